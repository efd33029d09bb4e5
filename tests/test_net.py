"""Which addresses count as public for requests to an address someone typed (an org's model
endpoint, a webhook): global unicast hosts only, with every IPv4 an IPv6 address carries."""

from __future__ import annotations

import pytest

from monark.core.net import UnsafeAddress, check_url, public_addresses

NOT_ONE_HOST = [
    "http://224.0.0.1:5077/v1",  # IPv4 multicast (is_global on Python 3.11)
    "http://239.255.255.250:1900/",  # SSDP
    "http://255.255.255.255/",  # the limited broadcast
    "http://192.88.99.1/",  # the 6to4 relay anycast
    "http://[ff02::1]/",  # IPv6 multicast, link scope
    "http://[ff0e::1]/",  # IPv6 multicast, global scope
    "http://[fec0::1]/",  # site-local
    "http://[2606:4700:4700::]/",  # a subnet's router anycast
    "http://[2606:4700:4700::fdff:ffff:ffff:ffff]/",  # a reserved subnet anycast
    "http://[::ffff:224.0.0.1]/",  # IPv4-mapped multicast
    "http://[::224.0.0.1]/",  # IPv4-compatible
    "http://[::ffff:0:127.0.0.1]/",  # IPv4-translated loopback
    "http://[64:ff9b::e000:1]/",  # NAT64 of 224.0.0.1
    "http://[2002:e000:1::1]/",  # 6to4 of 224.0.0.1
    "http://[2001:4860::5efe:7f00:1]/",  # ISATAP of 127.0.0.1
    "http://[3fff::1]/",  # documentation (RFC 9637; is_global on Python 3.11)
    "http://[3fff:fff:ffff::1]:8080/v1",  # the same prefix's end
    "http://[5f00::1]/",  # an SRv6 segment id (RFC 9602; is_global on Python 3.11)
    "http://[5f00:ffff::1]/",
]


@pytest.mark.parametrize("url", NOT_ONE_HOST)
def test_only_global_unicast_addresses_count_as_public(url):
    with pytest.raises(UnsafeAddress, match=r"non-public address.*SETTING allows others"):
        public_addresses(url, "SETTING")


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("https://8.8.8.8/", "8.8.8.8"),
        ("https://[2606:4700:4700::1111]:8443/v1", "2606:4700:4700::1111"),
        ("http://[2002:808:808::1]/", "2002:808:808::1"),  # 6to4 of a public IPv4
    ],
)
def test_a_public_host_passes_with_its_address(url, address):
    assert public_addresses(url, "SETTING") == [address]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1%25lo]/", "zone"),
        ("http://[fe80::1%25eth0]/", "zone"),
        ("http://[fe80::1%25eth0]:11434/v1", "zone"),
        ("http://[fe80::1%eth0]/", "zone"),
        ("http://exa%6dple.com/", "%-escapes"),
        ("http://example.com:0/", "port from 1 to 65535"),
        ("http://example.com:99999/", "port is from 1 to 65535"),
        ("http://exa mple.com/", "spaces"),
    ],
)
def test_an_address_no_request_can_reach_is_refused_when_it_is_checked(url, says):
    with pytest.raises(UnsafeAddress, match=says):
        check_url(url)
    with pytest.raises(UnsafeAddress, match=says):  # never "cannot resolve", taken for later
        public_addresses(url, "SETTING")


def test_a_port_at_either_end_of_the_range_is_valid():
    assert check_url("https://example.com:1/") == "https://example.com:1/"
    assert check_url("https://example.com:65535/v1") == "https://example.com:65535/v1"
