"""Device backends sessions name: ``{"type": "device", "urls": [URL, …]}`` in ``session/create``
(and wherever a ``model`` object is accepted: NPCs, ``decision/*``, ``content/generate``).

A protocol client names the phones (device-protocol base URLs, ``protocol/DEVICE.md``); the
server decides where that may lead: loopback, the hosts of its own ``--device`` phones, and the
hosts the operator allows (``--device-allow-host``). Anything else, and a malformed or repeated
URL, is ``-32602`` naming the field before anything is contacted. The phones get the server's
bearer token (``--device-token-env``), never one from the protocol.

**One quota per set of phones.** Every model naming the same phones (the same normalized URLs,
in any order) is one :class:`SharedDeviceModel`: one :class:`~oam_actors.models.pool.DevicePool`,
whose per-phone schedulers every session and NPC using it queues in. The pool is started on
first use (probing its phones) and runs until :class:`DeviceBackends` is left; at most
:data:`MAX_DEVICE_POOLS` sets per server (``-32055`` beyond). A model naming exactly the server's
own ``--device`` phones is the server's pool (:meth:`DeviceBackends.share`), on either runtime:
its phones have one scheduler, not two competing for their quotas.

On a runtime that moves actors (``RaySystem``) a :class:`SharedDeviceModel` is *hosted*
(``runtime.register_hosted``): one named model actor per set of phones (``device:URL,…``) for
the whole cluster, started on first use by whichever shard or front door needs it first and
shared by all of them, so each phone's quota is spent by one scheduler.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urlsplit

import anyio
import anyio.abc
import msgspec

from ..addresses import is_loopback
from ..agent.model import Availability, GenerationRequest, LanguageModel, ModelCapabilities, Usage
from ..errors import AgentError, ErrorCode, ProtocolError, invalid_params
from ..runtime import Hosting, register_hosted
from .address_guard import AddressGuard

if TYPE_CHECKING:
    from .pool import DevicePool, PoolConfig

__all__ = ["DEVICE_TYPE", "MAX_DEVICE_POOLS", "DeviceBackends", "SharedDeviceModel"]

DEVICE_TYPE = "device"
"""The ``model.type`` of a session-named device backend."""

MAX_DEVICE_POOLS = 64
"""Distinct sets of phones one server runs pools for (each probes its phones in the background)."""

_MAX_URLS = 64
_log = logging.getLogger(__name__)
_WIRE_KEYS = ("type", "urls")


class DeviceBackends:
    """The device pools of one server's sessions: ``async with`` it around everything that
    streams from its models (a pool starts inside it on first use and stops when it is left)."""

    def __init__(self, *, allowed_hosts: Iterable[str] = (), token: str | None = None,
                 queue_seconds: tuple[float, float, float] | None = None, refuse_private: bool = False) -> None:
        self._allowed = {h.lower() for h in allowed_hosts}
        # With refuse_private (a server listening beyond loopback), hosts the operator did not
        # allow must resolve to public addresses, and pools connect to the addresses checked.
        self._guard = AddressGuard(self._allowed, allow_flag="--device-allow-host") if refuse_private else None
        self._token = token
        self._queue_seconds = queue_seconds
        self._models: dict[tuple[str, ...], SharedDeviceModel] = {}
        self._server_pools: dict[tuple[str, ...], Callable[[], LanguageModel]] = {}
        self._tasks: anyio.abc.TaskGroup | None = None

    def allow_host(self, host: str) -> None:
        """Let protocol clients name phones on ``host``."""
        self._allowed.add(host.lower())

    def share(self, urls: Iterable[str], model: Callable[[], LanguageModel]) -> None:
        """Models naming exactly the phones at ``urls`` (in any spelling and order) are
        ``model()``, the server's system model over its own pool of them."""
        from .pool import canonical_urls

        self._server_pools[canonical_urls(list(urls))] = model

    def from_wire(self, value: dict[str, Any], path: str = "model") -> LanguageModel:
        """The model of a ``{"type": "device", "urls": […]}`` object; raises ``invalid_params``
        naming the field (or ``limit_reached`` past :data:`MAX_DEVICE_POOLS` sets). No address
        check: see :meth:`check_wire`."""
        return self._model_of(self._allowed_urls(value, path))

    async def check_wire(self, value: dict[str, Any], path: str = "model") -> None:
        """With ``refuse_private``: every host of ``value`` the operator did not allow must
        resolve to public addresses only (``invalid_params`` naming ``<path>.urls``)."""
        if self._guard is not None:
            for url in self._allowed_urls(value, path):
                await self._guard.check(url, f"{path}.urls")

    def _allowed_urls(self, value: dict[str, Any], path: str) -> tuple[str, ...]:
        from .pool import PoolConfigError, canonical_urls

        for key in value:
            if key not in _WIRE_KEYS:
                raise invalid_params(f"Unknown parameter '{path}.{key}'; a device model takes {', '.join(_WIRE_KEYS)}.")
        urls = value.get("urls")
        if not isinstance(urls, list) or not urls or len(urls) > _MAX_URLS or not all(isinstance(u, str) for u in urls):
            raise invalid_params(f"Parameter '{path}.urls' must be an array of 1-{_MAX_URLS} device URLs "
                                 "(http://HOST:PORT).")
        try:
            normalized = canonical_urls(urls)
        except PoolConfigError as exc:
            raise invalid_params(f"Parameter '{path}.urls': {exc}.") from exc
        for url in normalized:
            host = (urlsplit(url).hostname or "").lower()
            if not (is_loopback(host) or host in self._allowed):
                raise invalid_params(
                    f"Parameter '{path}.urls' names host '{host}', which this server does not allow (allowed: "
                    "loopback, the hosts of its --device phones, and hosts given with --device-allow-host)."
                )
        return normalized

    def _model_of(self, normalized: tuple[str, ...]) -> LanguageModel:
        from .pool import PoolConfig

        if (server_pool := self._server_pools.get(normalized)) is not None:
            return server_pool()
        model = self._models.get(normalized)
        if model is None:
            if len(self._models) >= MAX_DEVICE_POOLS:
                raise ProtocolError(ErrorCode.LIMIT_REACHED, f"This server runs pools for {MAX_DEVICE_POOLS} "
                                    "sets of phones already; name one of those.")
            config = PoolConfig(token=self._token, **({} if self._queue_seconds is None else
                                                      {"queue_seconds": self._queue_seconds}))
            model = self._models[normalized] = SharedDeviceModel(normalized, config, self._open, guard=self._guard)
        return model

    def model_types(self) -> dict[str, Callable[[dict[str, Any], str], LanguageModel]]:
        """``BridgeConfig.model_types`` entries: ``device``."""
        return {DEVICE_TYPE: self.from_wire}

    def model_checks(self) -> dict[str, Callable[[dict[str, Any], str], Awaitable[None]]]:
        """``BridgeConfig.model_checks`` entries: ``device`` with ``refuse_private``, else none."""
        return {} if self._guard is None else {DEVICE_TYPE: self.check_wire}

    def _open(self, model: SharedDeviceModel) -> None:
        if self._tasks is None:
            raise AgentError(ErrorCode.MODEL_UNAVAILABLE, "The server's device backends are not running.")
        self._tasks.start_soon(model.run)

    async def __aenter__(self) -> Self:
        self._tasks = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        tasks, self._tasks = self._tasks, None
        if tasks is not None:
            tasks.cancel_scope.cancel()  # every pool leaves its context on its own task
            await tasks.__aexit__(None, None, None)


class SharedDeviceModel:
    """The pool of one set of phones (see the module docstring), started on first use."""

    def __init__(self, urls: tuple[str, ...], config: PoolConfig, start: Callable[[SharedDeviceModel], None],
                 *, guard: AddressGuard | None = None) -> None:
        self.urls = urls
        self._guard = guard
        self.config = config
        self._start = start
        self._pool: DevicePool | None = None
        self._ready: anyio.Event | None = None
        self._failure: Exception | None = None

    @property
    def capabilities(self) -> ModelCapabilities:
        # Until its phones are probed, a pool's limits are the defaults every phone starts from.
        return self._pool.capabilities if self._pool is not None else ModelCapabilities()

    async def availability(self) -> Availability:
        return await (await self._running()).availability()

    async def statistics(self) -> msgspec.Struct:
        """The pool's record (:class:`~oam_actors.models.pool.PoolStatistics`)."""
        return await (await self._running()).statistics()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        async for piece in (await self._running()).stream(request):
            yield piece

    async def _running(self) -> DevicePool:
        if self._ready is None:  # the first use starts the pool; concurrent ones wait for it
            self._start(self)
            self._ready = anyio.Event()
        await self._ready.wait()
        if self._failure is not None:
            raise AgentError(ErrorCode.MODEL_UNAVAILABLE,
                             f"The device pool did not start: {self._failure}") from self._failure
        assert self._pool is not None
        return self._pool

    async def run(self) -> None:
        """Run the pool until cancelled (on the backends' task group: it enters and leaves there)."""
        from .pool import DevicePool

        try:
            async with DevicePool(self.urls, config=self.config, guard=self._guard) as pool:
                self._pool = pool
                self._set_ready()
                await anyio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - every step on it fails with it; the server stays up
            _log.exception("the device pool %s did not start", ",".join(self.urls))
            self._failure = exc
            self._set_ready()

    def _set_ready(self) -> None:
        assert self._ready is not None
        self._ready.set()

    def __repr__(self) -> str:
        return f"SharedDeviceModel({','.join(self.urls)!r})"


def _hosting(model: SharedDeviceModel) -> Hosting:
    # One model actor per set of phones; it runs the same pool (probing there) for its lifetime.
    from .factories import open_pool

    return Hosting(
        name=f"device:{','.join(model.urls)}",
        factory=functools.partial(open_pool, model.urls, (), model.config),
        info=model.capabilities,
    )


register_hosted(SharedDeviceModel, _hosting)
