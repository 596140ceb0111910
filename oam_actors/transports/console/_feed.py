"""The console's data: one sampler per server, its latest view sent to every viewer.

Contract
--------
- :meth:`Console.run` (a task of the server, until cancelled) takes a sample every ``interval``
  seconds on the hub's clock: the ``model/status`` result of the hub's status model
  (:meth:`~oam_actors.transports.hub.Hub.model_status`, as ``/metrics`` does) and the counters
  of ``/metrics`` (:class:`~oam_actors.transports.console._history.TrafficHistory`); it keeps
  no counts of its own. While someone watches it adds the hub's connections, tenants and
  objects (a walk over every object, so only then).
- A viewer (:meth:`Console.serve_viewer`) first gets the whole view (:meth:`Console.view`: a
  snapshot taken then, the totals and every point of the window), then one message per tick with the
  new snapshot and the new point (``"append": true``). A viewer that reads slowly skips ticks:
  it holds at most the latest one. At most ``max_viewers`` watch at once; beyond,
  :meth:`serve_viewer` returns ``False`` at once.
- A status model that fails is shown as ``{"error": …}`` (the hub logs it); the other sections go on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from ..hub import Hub
from ._history import Sample, TrafficHistory
from ._signin import SignIns

__all__ = ["Console"]


INTERVAL = 1.0
"""Seconds between samples."""

WINDOW = 600.0
"""Seconds of traffic the console keeps (the sparklines' width)."""

MAX_VIEWERS = 16


class Console:
    """The console of the server ``hub`` serves (see the module docstring)."""

    def __init__(
        self,
        hub: Hub,
        *,
        interval: float = INTERVAL,
        window: float = WINDOW,
        max_viewers: int = MAX_VIEWERS,
    ) -> None:
        self.hub = hub
        self.sign_ins = SignIns(hub.policy.tokens, hub.clock)
        self.interval = interval
        self._history = TrafficHistory(window)
        self._max_viewers = max_viewers
        self._started = hub.clock.now()
        self._viewers: set[_Viewer] = set()

    async def run(self) -> None:
        """Sample every ``interval`` seconds until cancelled."""
        clock = self.hub.clock
        while True:
            started = clock.now()
            await self._tick()
            await clock.sleep_until(started + self.interval)

    async def view(self) -> dict[str, Any]:
        """Everything a viewer starts from (what ``GET /console/state`` answers): a snapshot
        taken now, and the window's traffic as of the latest tick."""
        return {
            "interval": self.interval,
            "window": self._history.window,
            "snapshot": self._snapshot(await self.hub.model_status()),
            "totals": self._history.totals(),
            "points": self._history.points(),
        }

    async def serve_viewer(self, send: Callable[[str], Awaitable[None]]) -> bool:
        """Send the view, then each tick, until ``send`` raises (the viewer left) or the task is
        cancelled; ``False`` at once when ``max_viewers`` already watch."""
        if len(self._viewers) >= self._max_viewers:
            return False
        viewer = _Viewer()
        self._viewers.add(viewer)
        try:
            await send(_encode(await self.view()))
            while True:
                await send(await viewer.next())
        finally:
            self._viewers.discard(viewer)

    async def _tick(self) -> None:
        model = await self.hub.model_status()
        statistics = (model or {}).get("statistics")
        gauges = statistics if isinstance(statistics, dict) else {}
        metrics = self.hub.metrics
        sample = Sample(
            at=self.hub.clock.now() - self._started,
            requests=metrics.requests.by_label() if metrics else {},
            responses=metrics.responses.by_label() if metrics else {},
            turns=metrics.turns.by_label() if metrics else {},
            queued=_count(gauges.get("queued")),
            in_flight=_count(gauges.get("inFlight")),
        )
        point = self._history.add(sample)
        if not self._viewers:
            return  # the rest of a snapshot (a walk over every object) only for someone watching
        message = _encode({"append": True, "snapshot": self._snapshot(model), "totals": self._history.totals(),
                           "points": [] if point is None else [point]})
        for viewer in self._viewers:
            viewer.put(message)

    def _snapshot(self, model: dict[str, Any] | None) -> dict[str, Any]:
        """The server's figures now, with ``model`` (the ``model/status`` result) as ``model``."""
        hub = self.hub
        objects = hub.objects()
        metrics = hub.metrics
        return {
            "uptimeSeconds": round(hub.clock.now() - self._started, 1),
            "server": {
                "connections": _counts(metrics.connections.by_label()) if metrics else {},
                "maxConnections": hub.policy.max_connections,
                "refused": _counts(metrics.connections_refused.by_label()) if metrics else {},
                "tenants": dict(sorted(hub.tenants.items())),
                "objects": {kind: {"live": c.live, "queued": c.queued} for kind, c in sorted(objects.items())},
                "viewers": len(self._viewers),
            },
            "model": model,
        }


class _Viewer:
    """One viewer's next message: only the latest is kept."""

    def __init__(self) -> None:
        self._message: str | None = None
        self._ready = anyio.Event()

    def put(self, message: str) -> None:
        self._message = message
        self._ready.set()

    async def next(self) -> str:
        await self._ready.wait()
        self._ready = anyio.Event()
        message, self._message = self._message, None
        assert message is not None
        return message


def _encode(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _counts(values: dict[str, float]) -> dict[str, int]:
    """Gauge and counter values as integers (they count connections), zeros kept: a transport
    that has had connections shows 0 rather than vanishing."""
    return {label: int(value) for label, value in values.items()}
