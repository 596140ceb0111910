"""Backends a simulation can run on. Each tells the bridge which model sessions and NPCs use and
reports its own counters (quota events, per-device utilisation) for the final report.

- ``farm`` (the default): simulated phones in this process on loopback, behind a device pool. The
  phones run at a time scale (0.1: the 60 s quota window lasts 6 s) and differ like real ones: one
  manages fewer generations per window than the pool assumes, one goes to the background for a
  while, and streams break now and then, so quota refusals and fail-over show within a minute.
- ``devices``: real phones (``--device URL``) behind a device pool.
- ``proxy``: an OpenAI-compatible server (``--proxy URL[#MODEL]``) behind one quota scheduler.
- ``scripted``: scripted sessions with latency, no model at all.
- ``routes``: a route file (``--routes FILE``): the system model is a router over its backends
  (:mod:`oam_actors.models.routing`), built as a server builds it; the report adds a routing
  section (steps and spend per backend).

The farm, devices and proxy system models are coalesced as the servers' are (on unless
``SimConfig.coalesce`` is off; :mod:`oam_actors.models.coalesce`).

Use a backend as ``async with make_backend(config) as backend``.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

import msgspec

from ..bridge import ModelFactory
from ..models import ModelWithStatistics
from ..models.coalesce import CoalesceSettings, CoalescingModel, open_coalesced
from ..models.errors import ModelConfigError
from ..models.factories import PoolHost
from .config import SimConfig

if TYPE_CHECKING:
    from ..models.pool import DevicePool

__all__ = ["Backend", "DevicesBackend", "FarmBackend", "ProxyBackend", "RoutedBackend", "ScriptedBackend", "make_backend",
           "routed_model_config"]


class Backend(Protocol):
    name: str

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...

    def system_model(self) -> ModelFactory | None:
        """The bridge's ``"system"`` model, or None when sessions name their own."""

    def session_model(self, index: int) -> Any:
        """The ``model`` param of session ``index`` (None = the system model)."""

    def npc_model(self, index: int) -> Any:
        """The ``model`` param of NPC ``index`` (None = the system model)."""

    def decision_model(self) -> Any:
        """The ``model`` param of the NPCs' decisions (None = the system model)."""

    def snapshot(self) -> dict[str, Any]:
        """A cheap look at the backend for the live display (may be empty)."""

    async def statistics(self) -> dict[str, Any]:
        """Backend counters for the report."""


class ScriptedBackend:
    """Scripted sessions with latency: every turn either calls one tool then answers, or answers."""

    name = "scripted"

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def system_model(self) -> ModelFactory | None:
        return None

    def session_model(self, index: int) -> Any:
        steps: list[dict[str, Any]] = []
        for delay in self._delays():
            if self.rng.random() < 0.5:
                tool = self.rng.choice(["open_gate", "check_inventory"])
                arguments = {"gate": "north"} if tool == "open_gate" else {"item": "ale"}
                steps.append({"toolCalls": [{"name": tool, "arguments": arguments}], "delayMs": delay // 2})
                steps.append({"template": "Done: {toolOutput}", "delayMs": delay // 2})
            else:
                steps.append({"text": "Welcome, traveller. The road is quiet today.", "delayMs": delay})
        return {"type": "scripted", "steps": steps}

    def npc_model(self, index: int) -> Any:
        line = {"emotion": "neutral", "line": "Aye. What do you need?", "player_options": ["Goodbye."],
                "ends_conversation": False}
        return {"type": "scripted", "steps": [{"json": line, "delayMs": delay} for delay in self._delays()]}

    def decision_model(self) -> Any:
        choice = {"reasoning": "There is work to do.", "choice": "work", "confidence": 70}
        return {"type": "scripted", "fallback": {"json": choice, "delayMs": int(self.config.model_latency_seconds * 1000)}}

    def _delays(self) -> list[int]:
        turns = int(self.config.duration_seconds / max(0.05, self.config.think_seconds) * 2) + 10
        latency_ms = int(self.config.model_latency_seconds * 1000)
        return [self.rng.randint(latency_ms // 2, latency_ms * 3 // 2) if latency_ms else 0 for _ in range(turns)]

    def snapshot(self) -> dict[str, Any]:
        return {}

    async def statistics(self) -> dict[str, Any]:
        return {"backend": self.name}


class _SystemModelOnly:
    """A backend whose sessions, NPCs and decisions all use the system model."""

    def session_model(self, index: int) -> Any:
        return None

    def npc_model(self, index: int) -> Any:
        return None

    def decision_model(self) -> Any:
        return None


class _PoolBackend(_SystemModelOnly):
    """A device pool as the system model; subclasses say what the pool is made of.

    On ``--runtime ray`` the pool (and a farm's phones) is built inside one model actor, so every
    shard's sessions share its quotas; the live display then shows only what the report shows.
    """

    name = "devices"

    def __init__(self, config: SimConfig) -> None:
        from ..models.pool import PoolConfigError

        self.config = config
        try:
            self.host = self._pool_host()
        except PoolConfigError as exc:
            raise ModelConfigError(self._field, str(exc)) from exc
        self._stack = AsyncExitStack()
        self._model: ModelWithStatistics | None = None
        self._pool: DevicePool | None = None  # the pool, when it runs in this process

    _field = "device_urls"  # the SimConfig field a pool config error is about

    def _pool_host(self) -> PoolHost:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            if self.config.runtime == "ray":
                from ..cluster import ClusterModel

                opener: Callable[[], Any] = self.host.opener()
                if self.config.coalesce:  # in the model actor, so every shard's steps share batches
                    opener = functools.partial(open_coalesced, opener, self._coalescing())
                hosted = await stack.enter_async_context(ClusterModel(f"sim:{self.name}:{self.config.seed}", opener))
                self._model = hosted.model()
            else:
                self._pool = (await stack.enter_async_context(self.host)).model()
                self._model = CoalescingModel(self._pool, self._coalescing()) if self.config.coalesce else self._pool
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def _coalescing(self) -> CoalesceSettings:
        """Coalescing in the phones' time (real phones run in real time)."""
        return CoalesceSettings()

    def system_model(self) -> ModelFactory | None:
        model = self._model
        assert model is not None, "enter the backend first"
        return lambda: model

    def snapshot(self) -> dict[str, Any]:
        if self._pool is None:  # on Ray: the numbers are in the model actor
            return {}
        stats = self._pool.statistics_nowait()
        # The words of the summary line and the report's cards for the same figures.
        return {"pool ready": stats.ready, "pool cooling": stats.cooling, "pool dead": stats.dead,
                "pool queued": stats.queued, "pool quota refusals absorbed": stats.quota_events_absorbed,
                "pool steps given up (queue time ran out)": stats.quota_events_surfaced}

    async def statistics(self) -> dict[str, Any]:
        assert self._model is not None
        return {"backend": self.name, **msgspec.to_builtins(await self._model.statistics())}


class DevicesBackend(_PoolBackend):
    """Real phones (``--device URL``, repeatable)."""

    name = "devices"

    def _pool_host(self) -> PoolHost:
        from ..models.pool import queue_times

        return PoolHost.devices(self.config.device_urls, queue_seconds=queue_times(self.config.deadlines))


class FarmBackend(_PoolBackend):
    """``phones`` simulated phones in this process; see the module docstring."""

    name = "farm"
    _field = "phones"

    def _pool_host(self) -> PoolHost:
        from ..models.pool import PoolConfigError, queue_times, scaled_config

        config = self.config
        if config.phones < 1:
            raise PoolConfigError(f"a farm needs at least one phone; got {config.phones}")
        return PoolHost(phones=[demo_phone_config(n, config) for n in range(config.phones)],
                        config=scaled_config(config.time_scale, queue_seconds=queue_times(config.deadlines)))

    def _coalescing(self) -> CoalesceSettings:
        return CoalesceSettings(time_scale=self.config.time_scale)  # a phone second lasts time_scale real seconds

    async def statistics(self) -> dict[str, Any]:
        stats = await super().statistics()
        if self.host.farm is None:  # the phones run inside the Ray model actor
            return stats
        phones = {f"phone{n + 1}": msgspec.to_builtins(p.statistics()) for n, p in enumerate(self.host.farm.phones)}
        return {**stats, "phones": phones}


def demo_phone_config(index: int, config: SimConfig) -> Any:
    """Phone ``index`` of the demo farm: phone 2 manages only 30 generations per window (the pool
    assumes 36 and learns from its BUSY), phone 3 goes to the background from 20 % to 35 % of the
    run, and every phone breaks about one stream in a hundred."""
    from ..models.pool import farm_phone_config

    seconds = config.duration_seconds / config.time_scale  # the run in phone seconds
    overrides: dict[str, Any] = {"seed": config.seed + index, "fault_disconnect": 0.005, "fault_garbage": 0.005}
    if index == 1:
        overrides["quota_requests"] = 30
    if index == 2:
        overrides["background_periods"] = ((0.2 * seconds, 0.35 * seconds),)
    return farm_phone_config(config.time_scale, **overrides)


class ProxyBackend(_SystemModelOnly):
    """An OpenAI-compatible server (``--proxy URL[#MODEL]``) behind its one quota scheduler,
    starting from the stated limits (``--rpm`` …); on Ray, the backend's model actor, shared with
    every front door using it (so :meth:`snapshot` counts this process's scheduler only locally)."""

    name = "proxy"

    def __init__(self, config: SimConfig) -> None:
        from ..models.pool import queue_times
        from ..models.proxy import ProxyBackends, parse_model_spec
        from ..models.setup import stated_limits

        if not config.proxy:
            raise ModelConfigError("proxy", "the proxy backend needs an OpenAI-compatible base URL[#MODEL]")
        try:
            spec = parse_model_spec(f"openai:{config.proxy}", model="default")
        except ValueError as exc:
            raise ModelConfigError("proxy", str(exc)) from exc
        assert spec is not None  # "openai" is a provider
        limits = stated_limits(rpm=config.rpm, tpm=config.tpm, max_concurrency=config.max_concurrency)
        self._backends = ProxyBackends(limits=limits, queue_seconds=queue_times(config.deadlines))
        self._backends.allow_host(spec.host)
        shared = self._backends.shared(spec)
        self._scheduler = shared.scheduler
        self._coalescing = CoalescingModel(shared) if config.coalesce else None
        self._model = self._coalescing or shared

    async def __aenter__(self) -> Self:
        await self._backends.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None = None, exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        await self._backends.__aexit__(exc_type, exc, tb)

    def system_model(self) -> ModelFactory | None:
        model = self._model
        return lambda: model

    def snapshot(self) -> dict[str, Any]:
        stats = self._scheduler.statistics()
        return {"proxy queued": sum(stats.queued), "rate limits from the server": stats.throttles}

    async def statistics(self) -> dict[str, Any]:
        stats = {"backend": self.name, "scheduler": msgspec.to_builtins(self._scheduler.statistics())}
        if self._coalescing is not None:
            stats["coalescing"] = msgspec.to_builtins(self._coalescing.coalescing_statistics())
        return stats


def routed_model_config(config: SimConfig) -> Any:
    """The :class:`~oam_actors.models.setup.ModelConfig` of ``config``'s route file, its farms
    at the simulation's time scale. Raises :class:`ModelConfigError` (field ``routes``)."""
    from ..models.pool import queue_times
    from ..models.routing import RouteError, load_routes
    from ..models.setup import ModelConfig

    if not config.routes:
        raise ModelConfigError("routes", "the routes backend needs a route file")
    try:
        table = load_routes(config.routes)
    except RouteError as exc:
        raise ModelConfigError("routes", str(exc)) from exc
    return ModelConfig(routes=table, farm_time_scale=config.time_scale, queue_seconds=queue_times(config.deadlines),
                       coalesce=CoalesceSettings() if config.coalesce else None)


class RoutedBackend(_SystemModelOnly):
    """The system model routed by a route file (``--routes FILE``); on ``--runtime ray`` the
    router is one model actor (its caps hold for every shard), and the live display is empty."""

    name = "routes"

    def __init__(self, config: SimConfig) -> None:
        from ..models.setup import create_model_setup

        host = None
        if config.runtime == "ray":
            from ..cluster import ClusterModel

            host = ClusterModel
        self.setup = create_model_setup(routed_model_config(config), host=host)
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            for context in (self.setup.backends, self.setup.resources, self.setup.hosted):
                await stack.enter_async_context(context)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def system_model(self) -> ModelFactory | None:
        return self.setup.system_model

    def snapshot(self) -> dict[str, Any]:
        if self.setup.router is None:  # on Ray: the numbers are in the model actor
            return {}
        stats = self.setup.router.statistics_nowait()
        return {f"{b.name} served": b.served for b in stats.backends} | {
            "spend": round(sum(b.spend for b in stats.backends), 4)}

    async def statistics(self) -> dict[str, Any]:
        assert self.setup.status_model is not None
        return {"backend": self.name, "routing": msgspec.to_builtins(await self.setup.status_model().statistics())}


_BACKENDS: dict[str, type[Any]] = {
    "farm": FarmBackend,
    "devices": DevicesBackend,
    "proxy": ProxyBackend,
    "scripted": ScriptedBackend,
    "routes": RoutedBackend,
}


def make_backend(config: SimConfig) -> Backend:
    """The backend ``config.backend`` names, not yet entered. Raises
    :class:`~oam_actors.models.errors.ModelConfigError` naming the ``SimConfig`` field at fault."""
    kind = _BACKENDS.get(config.backend)
    if kind is None:
        raise ModelConfigError("backend", f"unknown backend {config.backend!r} (one of {', '.join(_BACKENDS)})")
    backend: Backend = kind(config)
    return backend
