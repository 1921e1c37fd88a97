"""What a host address reaches. "One host, one tenant" and "one host, one instance" compare hosts by
the IP addresses they reach, never by how an address is spelled: `localhost`, `::ffff:127.0.0.1` and
`127.0.0.1` are one host."""

from __future__ import annotations

import ipaddress
import socket


def legacy_ipv4(address: str) -> bool:
    """Whether `address` is IPv4 in a form other than dotted decimal. inet_aton (and so getaddrinfo and
    ssh) reads `127.1`, `0x7f000001` and leading zeros as octal (`010.0.0.1` is 8.0.0.1): spellings
    that hide which host they mean, so registration refuses them rather than guess."""
    try:
        ipaddress.ip_address(address)
        return False
    except ValueError:
        pass
    try:
        socket.inet_aton(address)
        return True
    except OSError:
        return False  # a name


def canonical(ip: str) -> str:
    """One spelling per IP address: IPv6 compressed and lowercase, IPv4-mapped IPv6 as its IPv4 address."""
    parsed = ipaddress.ip_address(ip)
    mapped = getattr(parsed, "ipv4_mapped", None)
    return str(mapped if mapped is not None else parsed)


def resolve(address: str) -> list[str]:
    """The canonical addresses `address` reaches, sorted: a literal is itself; anything else goes through
    getaddrinfo, as ssh would (a name asks the resolver). Raises OSError, or UnicodeError for a
    malformed name, when it does not resolve."""
    try:
        return [canonical(address)]
    except ValueError:
        pass
    return sorted({canonical(info[4][0]) for info in socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)})
