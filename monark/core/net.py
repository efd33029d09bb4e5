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
        if not address.is_global:
            raise UnsafeAddress(
                f"{parts.hostname} resolves to a non-public address ({address}); only public "
                f"hosts are allowed ({setting} allows others)."
            )
    if not addresses:
        raise Unresolvable(f"Cannot resolve the host {parts.hostname}.")
    return [str(a) for a in addresses]
