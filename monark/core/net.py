"""Outbound requests to addresses someone typed in (a webhook, an org's model endpoint):
only to public hosts, unless the deployment allows private ones."""

from __future__ import annotations

import ipaddress
import socket
import unicodedata
from urllib.parse import urlsplit


class UnsafeAddress(ValueError):
    """A URL Monark will not send a request to; the message says why, in plain words."""


class Unresolvable(UnsafeAddress):
    """The host has no address now (a typo, or DNS down): nothing to connect to yet."""


def check_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL with a valid port and no credentials;
    ``UnsafeAddress`` otherwise."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading it checks it: "99999" or "abc" raise)
    except ValueError:
        raise UnsafeAddress("Give a valid address (check its brackets and port).") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeAddress("Give a full http:// or https:// address.")
    if parts.username or parts.password:
        raise UnsafeAddress("Leave user names and passwords out of the address.")
    if any(unicodedata.category(ch)[0] in "CZ" for ch in url):  # controls, format, spaces
        raise UnsafeAddress("Leave spaces and control characters out of the address.")
    return url


NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix (RFC 6052)
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local-use prefixes (RFC 8215)


def _embedded_ipv4(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, 6to4, Teredo,
    NAT64): a network may route to them, so each must be public too."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found = [address.ipv4_mapped, address.sixtofour]
    if address.teredo:
        found += list(address.teredo)
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in NAT64 or address in NAT64_LOCAL or int(address) >> 32 == 0:
        found.append(low)  # NAT64, or IPv4-compatible (::a.b.c.d)
    return [a for a in found if a is not None]


def public_addresses(url: str, setting: str) -> list[str]:
    """The host's addresses, resolved once, when every one of them is public; otherwise
    ``UnsafeAddress`` naming ``setting``, the deployment setting that allows others.

    A caller that can, connects to these addresses as they are: a second lookup at connect
    time could answer otherwise (DNS rebinding) and reach an internal service after the
    check passed.
    """
    parts = urlsplit(check_url(url))
    default_port = 443 if parts.scheme == "https" else 80
    try:
        infos = socket.getaddrinfo(
            parts.hostname, parts.port or default_port, type=socket.SOCK_STREAM
        )
    except (OSError, UnicodeError):
        raise Unresolvable(f"Cannot resolve the host {parts.hostname}.") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    for address in addresses:
        if not all(a.is_global for a in (address, *_embedded_ipv4(address))):
            raise UnsafeAddress(
                f"{parts.hostname} resolves to a non-public address ({address}); only public "
                f"hosts are allowed ({setting} allows others)."
            )
    if not addresses:
        raise Unresolvable(f"Cannot resolve the host {parts.hostname}.")
    return [str(a) for a in addresses]
