"""What a server listening beyond loopback lets protocol clients make it reach.

A session or NPC names its backend's address (a proxy model's ``baseUrl``, a device model's
``urls``). Served on loopback only, that client is on this machine anyway; served beyond loopback
(``serve --tcp 0.0.0.0:…``), a remote tenant could make the server reach its own loopback, its
private network or a cloud metadata address and read the answers back (server-side request
forgery). An :class:`AddressGuard` refuses that, twice:

- **At create**, :meth:`AddressGuard.check` resolves the host and refuses (``invalid_params``
  naming the field) when any address it resolves to is not public (:func:`~oam_actors.addresses.is_public`).
- **At every connection**, :class:`PinnedTransport` resolves and checks again and connects to the
  address it checked, with the name kept in ``Host`` and in TLS SNI (and the certificate checked
  against the name): a name cannot pass the check with one address and connect to another (DNS
  rebinding). Redirects are never followed (the clients say ``follow_redirects=False``) and
  proxies from the environment are not used, as they would connect on the server's behalf.

Hosts the operator named (``--proxy-allow-host``, ``--device-allow-host``, the system model's own
host and phones) are exempt: the operator chose them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import httpx

from ..addresses import PrivateAddress, public_address
from ..errors import invalid_params

__all__ = ["AddressGuard", "PinnedTransport"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class AddressGuard:
    """The check of one server's backends; ``exempt`` is the live set of the operator's hosts
    (lower case), which may grow after this guard is made."""

    def __init__(self, exempt: Collection[str], *, allow_flag: str) -> None:
        self._exempt = exempt
        self._allow_flag = allow_flag

    def exempts(self, host: str) -> bool:
        return host.lower() in self._exempt

    async def check(self, url: str, field: str) -> None:
        """Refuse ``url`` (``invalid_params`` naming ``field``) unless its host is exempt or
        resolves to public addresses only."""
        parts = httpx.URL(url)
        if self.exempts(parts.host):
            return
        try:
            await public_address(parts.host, parts.port or _DEFAULT_PORTS.get(parts.scheme, 80))
        except PrivateAddress as exc:
            raise invalid_params(
                f"Parameter '{field}' is refused: {exc}. This server listens beyond loopback, so sessions may not "
                f"make it reach loopback, link-local or private addresses; the operator may allow the host with "
                f"{self._allow_flag}."
            ) from exc

    def transport(self, **options: Any) -> PinnedTransport:
        """An HTTP transport (``httpx.AsyncHTTPTransport(**options)``) that connects only to
        checked addresses."""
        return PinnedTransport(httpx.AsyncHTTPTransport(**options), self)


class PinnedTransport(httpx.AsyncBaseTransport):
    """Sends each request to the public address its host resolved to and was checked at, keeping
    the name in ``Host`` and TLS SNI; a host that resolves to anything else fails the request with
    ``httpx.ConnectError`` (what the backends already report as a connection failure)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, guard: AddressGuard) -> None:
        self._inner = inner
        self._guard = guard

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if not self._guard.exempts(host):
            try:
                address = await public_address(host, request.url.port or _DEFAULT_PORTS.get(request.url.scheme, 80))
            except PrivateAddress as exc:
                raise httpx.ConnectError(f"Refused to connect: {exc}.", request=request) from exc
            # The Host header was set from the name when the request was built; SNI and the
            # certificate check use the name too.
            request.url = request.url.copy_with(host=address)
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
