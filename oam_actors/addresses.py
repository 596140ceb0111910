"""Network address helpers shared by the transports and the model backends.

:func:`public_address` is the check a server listening beyond loopback applies to the hosts a
protocol client names (a proxy model's ``baseUrl``, a device model's ``urls``): every address the
name resolves to must be public, so a remote client cannot make the server reach its own
loopback, its private network or a cloud metadata address (server-side request forgery).
"""

from __future__ import annotations

import ipaddress
import socket

import anyio

__all__ = ["PrivateAddress", "is_loopback", "is_public", "public_address"]


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ``::1``, brackets allowed); any other
    name or address (``0.0.0.0``, ``""``) is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_public(address: str) -> bool:
    """Whether an IP address is globally reachable: not loopback, link-local (169.254.169.254,
    ``fe80::``), private (10/8, 172.16/12, 192.168/16, ``fc00::/7``), shared, unspecified
    (``0.0.0.0``, ``::``), reserved or multicast; an IPv4-mapped IPv6 address is judged by its
    IPv4 address. ``ValueError`` for what is not an IP address."""
    ip = ipaddress.ip_address(address.strip("[]").partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


class PrivateAddress(ValueError):
    """A host that resolves to an address that is not public, or does not resolve; the message
    says which."""


async def public_address(host: str, port: int) -> str:
    """The address to connect to for ``host``: its first resolved address, once every address it
    resolves to is public. Connect to this address (not to the name again), so the name cannot
    resolve to a checked address first and another one later. Raises :class:`PrivateAddress`."""
    bare = host.strip("[]")
    try:
        infos = await anyio.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise PrivateAddress(f"host '{host}' does not resolve") from exc
    addresses = [str(info[4][0]) for info in infos]
    for address in addresses:
        if not is_public(address):
            raise PrivateAddress(f"host '{host}' resolves to {address}, which is not a public address")
    if not addresses:
        raise PrivateAddress(f"host '{host}' does not resolve")
    return addresses[0]
