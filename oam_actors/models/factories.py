"""Model factories: the backends a server (or a simulation) runs as its shared system model.

- :class:`PoolHost` starts a device pool, and the simulated farm its phones are (if any), and
  stops them: ``async with PoolHost.simulated(4, time_scale=0.1) as host: host.model()``. Its
  :meth:`~PoolHost.opener` is the same pool as a picklable factory, for a model actor to build
  in its own process (:class:`~oam_actors.cluster.ClusterModel`).
- :func:`open_pool` is such a picklable factory: an async context manager that yields the
  running pool. (A proxy backend needs none: :meth:`~oam_actors.models.proxy.ProxyBackends.shared`
  is its one quota, and on Ray it is hosted by its own type's declaration.)

Each factory is one quota: make it once per process (or once per cluster, on Ray) and hand the
same instance to every session. Bad settings raise :class:`~oam_actors.models.pool.PoolConfigError`
before anything starts.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:  # the pool's modules load on first use: a proxy or scripted server needs none
    from .device import PhoneConfig
    from .pool import DevicePool, PoolConfig, SimulatedFarm

__all__ = ["PoolHost", "open_pool"]


class PoolHost:
    """A device pool over real phones (``urls``) or simulated ones started here (``phones``,
    one config each), and its lifetime.

    The pool exists only inside ``async with``; :meth:`model` returns it (every session and NPC
    gets the one pool, so each phone's quota is enforced once per process). Raises
    :class:`~oam_actors.models.pool.PoolConfigError` at once for a bad URL list or config.
    """

    def __init__(self, *, urls: Sequence[str] = (), phones: Sequence[PhoneConfig] = (),
                 config: PoolConfig | None = None) -> None:
        from .pool import PoolConfig, PoolConfigError, normalize_urls

        if urls and phones:
            raise PoolConfigError("a device pool runs on device URLs or on simulated phones, not both")
        self._urls = [] if phones else normalize_urls(urls)  # refuse a bad list now, before anything starts
        self._phones = list(phones)
        self._config = config or PoolConfig()
        self._stack = AsyncExitStack()
        self._pool: DevicePool | None = None
        self.farm: SimulatedFarm | None = None
        """The simulated phones while the pool runs (``None`` for real devices)."""

    @classmethod
    def simulated(cls, phones: int, *, time_scale: float,
                  queue_seconds: tuple[float, float, float] | None = None) -> PoolHost:
        """``phones`` Pixel-like simulated phones (seeds 0, 1, …) running ``time_scale`` real
        seconds per phone second, behind a pool scheduled on the phones' clock; ``queue_seconds``
        are the deadlines by priority (``None``: the pool's defaults)."""
        from .pool import PoolConfigError, farm_phone_config, scaled_config

        if phones < 1:
            raise PoolConfigError("a farm needs at least one phone")
        config = scaled_config(time_scale, **_queue_fields(queue_seconds))
        return cls(phones=[farm_phone_config(time_scale, seed=n) for n in range(phones)], config=config)

    @classmethod
    def devices(cls, urls: Sequence[str], *, token: str | None = None,
                queue_seconds: tuple[float, float, float] | None = None) -> PoolHost:
        """Real phones at ``urls``, each sent ``token`` as its bearer token."""
        from .pool import PoolConfig

        return cls(urls=urls, config=PoolConfig(token=token, **_queue_fields(queue_seconds)))

    @property
    def label(self) -> str:
        """``farm:N`` or ``devices:URL,…``: what the pool is made of."""
        return f"farm:{len(self._phones)}" if self._phones else "devices:" + ",".join(self._urls)

    def model(self) -> DevicePool:
        """The running pool (the system model factory)."""
        if self._pool is None:
            raise RuntimeError("the device pool is not running (use it inside `async with PoolHost`)")
        return self._pool

    def opener(self) -> Callable[[], AbstractAsyncContextManager[DevicePool]]:
        """A picklable factory of this pool (and farm) for a model actor to run."""
        return functools.partial(open_pool, self._urls, self._phones, self._config)

    async def __aenter__(self) -> Self:
        from .pool import DevicePool, SimulatedFarm

        async with AsyncExitStack() as stack:
            urls, names = self._urls, None
            if self._phones:
                self.farm = await stack.enter_async_context(SimulatedFarm(self._phones))
                urls, names = self.farm.urls, [f"phone{n + 1}" for n in range(len(self._phones))]
            self._pool = await stack.enter_async_context(DevicePool(urls, config=self._config, names=names))
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._stack.aclose()
        finally:
            self._pool = self.farm = None


@asynccontextmanager
async def open_pool(
    urls: Sequence[str], phones: Sequence[PhoneConfig], config: PoolConfig
) -> AsyncIterator[DevicePool]:
    """The pool :class:`PoolHost` ``(urls=…, phones=…, config=…)`` runs, while the block runs."""
    async with PoolHost(urls=urls, phones=phones, config=config) as host:
        yield host.model()


def _queue_fields(queue_seconds: tuple[float, float, float] | None) -> dict[str, tuple[float, float, float]]:
    return {} if queue_seconds is None else {"queue_seconds": queue_seconds}
