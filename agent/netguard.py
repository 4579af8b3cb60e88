"""Which IP addresses the agent may reach: only public internet addresses, by default.

One rule for everything that connects on the agent's behalf — ``web_fetch`` (:mod:`agent.web`) and the
sandbox's egress proxy (:mod:`agent.egress`) — so the two can never disagree about what "this machine
and private networks" means. Python's ``ipaddress.is_global`` alone is not enough: it calls
``64:ff9b::7f00:1`` (NAT64 for 127.0.0.1), ``::7f00:1`` (IPv4-compatible) and ``2002:7f00:1::`` (6to4)
global, and multicast global; so IPv6 forms that carry an IPv4 address are judged by that address, and
every special range is named here.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def refused_range(address: str | IPAddress) -> str | None:
    """Why ``address`` is not a public internet address ("loopback", "link-local" …), or None if it is."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return "local NAT64"
        if ip in _IPV4_COMPATIBLE and not (ip.is_loopback or ip.is_unspecified):
            return "reserved"  # IPv4-compatible (::a.b.c.d), deprecated since RFC 4291
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return refused_range(embedded)
    checks = (
        ("unspecified", ip.is_unspecified),  # 0.0.0.0 and :: reach this machine on Linux
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),  # 169.254.169.254, the cloud metadata service
        ("multicast", ip.is_multicast),
        ("carrier-grade NAT", isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT),
        ("private", ip.is_private),  # RFC 1918, fc00::/7, and the other non-routed ranges
        ("reserved", ip.is_reserved),
        ("site-local", isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local),
    )
    for name, hit in checks:
        if hit:
            return name
    return None if ip.is_global else "not globally routable"
