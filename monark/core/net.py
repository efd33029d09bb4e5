"""Outbound requests to addresses someone typed in (a webhook, an org's model endpoint):
only to public hosts, unless the deployment allows private ones."""

from __future__ import annotations

import ipaddress
import socket
import unicodedata
from typing import Any
from urllib.parse import urlsplit


class UnsafeAddress(ValueError):
    """A URL Monark will not send a request to; the message says why, in plain words."""


class Unresolvable(UnsafeAddress):
    """The host has no address now (a typo, or DNS down): nothing to connect to yet."""


def check_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL with a host Monark can look up, a port from
    1 to 65535 and no credentials; ``UnsafeAddress`` otherwise. Every address someone types
    (an org's model endpoint, a webhook) is checked by this one rule when it is saved."""
    try:
        parts = urlsplit(url)
        port = parts.port  # reading it checks it: "99999" or "abc" raise
    except ValueError:
        raise UnsafeAddress(
            "Give a valid address (check its brackets, and that the port is from 1 to 65535)."
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeAddress("Give a full http:// or https:// address.")
    if parts.username or parts.password:
        raise UnsafeAddress("Leave user names and passwords out of the address.")
    if any(unicodedata.category(ch)[0] in "CZ" for ch in url):  # controls, format, spaces
        raise UnsafeAddress("Leave spaces and control characters out of the address.")
    if port == 0:
        raise UnsafeAddress("Give a port from 1 to 65535 (or none, for the scheme's own).")
    if "%" in parts.hostname:
        if ":" in parts.hostname:  # [fe80::1%25eth0]: an IPv6 address with a zone
            raise UnsafeAddress(
                "Leave the zone (%…) out of the IPv6 address: it names a network interface "
                "of this machine, never a public host."
            )
        raise UnsafeAddress("Write the host name as it is, without %-escapes.")
    _check_host_name(parts.hostname)
    return url


HOST_LABEL_MAX = 63  # DNS (RFC 1035): each part between dots
HOST_NAME_MAX = 253  # and the whole name, in its ASCII (IDNA) form


def _check_host_name(host: str) -> None:
    """Refuse a host name DNS cannot carry (an empty part, a part over 63 characters, over
    253 in all, once in its ASCII form): the lookup and the request would fail at every try."""
    try:
        ipaddress.ip_address(host)
        return  # an IP literal has no labels
    except ValueError:
        pass
    label_rule = f"Give a valid host name: each part between dots is 1-{HOST_LABEL_MAX} characters."
    try:
        ascii_name = host.encode("idna").decode("ascii").rstrip(".")
    except UnicodeError:  # a part empty or too long, in its ASCII form
        raise UnsafeAddress(label_rule) from None
    if any(not 1 <= len(label) <= HOST_LABEL_MAX for label in ascii_name.split(".")):
        raise UnsafeAddress(label_rule)
    if len(ascii_name) > HOST_NAME_MAX:
        raise UnsafeAddress(f"Give a valid host name: at most {HOST_NAME_MAX} characters in all.")


NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix (RFC 6052)
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local-use prefixes (RFC 8215)
IPV4_TRANSLATED = 0xFFFF0000  # ::ffff:0:a.b.c.d (SIIT, RFC 2765), above the low 32 bits
ISATAP = (0x00005EFE, 0x02005EFE)  # the interface id's high half, before an IPv4 (RFC 5214)

# Addresses ``is_global`` may call public that are no single host to talk to: multicast
# (Python 3.11 says 224.0.0.0/4 and ff00::/8 are global), the 6to4 relay anycast
# (RFC 7526) and site-local IPv6, deprecated but still private in practice (RFC 3879).
# 240.0.0.0/4 with the broadcast 255.255.255.255 is reserved: ``is_global`` refuses it.
NOT_UNICAST = tuple(
    ipaddress.ip_network(n)
    for n in ("224.0.0.0/4", "192.88.99.0/24", "ff00::/8", "fec0::/10", "255.255.255.255/32")
)
ANYCAST_IID_LOW = 0xFDFFFFFFFFFFFF80  # RFC 2526: the top 128 interface ids are anycast
# Ranges ``is_global`` (Python 3.11) still calls global that hold no public host: the
# second IPv6 documentation prefix (RFC 9637) and SRv6 segment ids (RFC 9602).
NOT_PUBLIC = (ipaddress.ip_network("3fff::/20"), ipaddress.ip_network("5f00::/16"))


def _embedded_ipv4(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list:
    """The IPv4 addresses an IPv6 address carries (mapped, translated, compatible, 6to4,
    Teredo, NAT64, ISATAP): a network may route to them, so each must be public too."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found = [address.ipv4_mapped, address.sixtofour]
    if address.teredo:
        found += list(address.teredo)
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    high = int(address) >> 32
    if address in NAT64 or address in NAT64_LOCAL or high in (0, IPV4_TRANSLATED):
        found.append(low)  # NAT64, IPv4-compatible (::a.b.c.d) or IPv4-translated
    if high & 0xFFFFFFFF in ISATAP:
        found.append(low)
    return [a for a in found if a is not None]


def _is_anycast(address: ipaddress.IPv6Address) -> bool:
    """A subnet's anycast address (RFC 4291's subnet-router, interface id 0, or RFC 2526's
    reserved ones): it reaches whichever router or server answers, not a host."""
    iid = int(address) & 0xFFFFFFFFFFFFFFFF
    return iid == 0 or iid >= ANYCAST_IID_LOW


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``address`` is one global unicast host, and so is every IPv4 it carries."""
    for one in (address, *_embedded_ipv4(address)):
        if not one.is_global or any(one in net for net in (*NOT_UNICAST, *NOT_PUBLIC)):
            return False
        if isinstance(one, ipaddress.IPv6Address) and _is_anycast(one):
            return False
    return True


def check_literal_address(url: str, setting: str) -> None:
    """Refuse ``url`` when its host is an IP address written out that is not public
    (loopback, private, link-local…): known at once, before any lookup; ``UnsafeAddress``
    naming ``setting``, the deployment setting that allows them."""
    host = urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return  # a name: it is looked up (and checked) at each request
    if not is_public(address):
        raise UnsafeAddress(
            f"{host} is a non-public address; only public hosts are allowed "
            f"({setting} allows others)."
        )


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
        if not is_public(address):
            raise UnsafeAddress(
                f"{parts.hostname} resolves to a non-public address ({address}); only public "
                f"hosts are allowed ({setting} allows others)."
            )
    if not addresses:
        raise Unresolvable(f"Cannot resolve the host {parts.hostname}.")
    return [str(a) for a in addresses]


def public_only_transport(setting: str) -> Any:
    """An ``httpx2`` transport that resolves each request's host once, refuses it unless
    every address is public (``UnsafeAddress`` naming ``setting`` becomes a connect error),
    and connects to those addresses themselves: no second lookup at connect time that a
    rebinding DNS could answer otherwise."""
    import httpx2  # the SDKs' HTTP library: imported only by a caller that uses it

    class PublicOnly(httpx2.HTTPTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            url = request.url
            try:
                addresses = public_addresses(str(url), setting)
            except UnsafeAddress as err:
                raise httpx2.ConnectError(str(err), request=request) from None
            for n, address in enumerate(addresses, start=1):
                # The Host header and the TLS server name stay the URL's host.
                request.url = url.copy_with(host=address)
                request.extensions = {**request.extensions, "sni_hostname": url.host}
                try:
                    return super().handle_request(request)
                except httpx2.ConnectError:
                    if n == len(addresses):
                        raise
            raise httpx2.ConnectError("No address to connect to.", request=request)

    return PublicOnly()
