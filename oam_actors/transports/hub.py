"""What every network connection of one server shares: the actor system, limits, tokens, metrics.

Contract
--------
- One :class:`Hub` per server, used by the TCP and the WebSocket transports alike, on the event
  loop's thread. :meth:`Hub.admit` / :meth:`Hub.release` bracket a connection; beyond
  ``max_connections`` open connections ``admit`` refuses (the transport answers
  :meth:`Hub.full_error` and closes). Unauthenticated connections count too.
- :meth:`Hub.open_bridge` makes the connection's bridge. Objects are private to the connection
  (namespace ``c<n>``) unless ``share_objects`` is on: then every connection of one tenant uses the
  tenant's namespace (``t:<name>``) as a sharing bridge (see ``Bridge(shared=True)``).
- :func:`receive_or_idle` ends a connection's input after ``idle_timeout`` seconds without a byte
  in either direction while the bridge has nothing in flight; a long turn is not idleness.
- ``extensions`` makes each new bridge's extensions (one set per connection, as the game
  extension requires).
- With metrics, the inferences of the system model and of the registered model types are timed
  (``oam_model_step_seconds``); inline scripted models (``"model": {"type": "scripted", …}``) are
  built by the core methods and are not.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import msgspec

from ..agent import (
    Availability,
    GenerationRequest,
    LanguageModel,
    ModelCapabilities,
    Usage,
)
from ..bridge import Bridge, BridgeConfig, CustomModelFactory, Extension, ModelFactory
from ..errors import AgentError, ErrorCode
from ..objects.session import NAMESPACE_SEPARATOR
from ..observability.metrics import ServerMetrics
from ..runtime import ActorSystem
from .auth import Tenant, TokenTable
from .stdio import MAX_LINE_BYTES

__all__ = ["Activity", "Hub", "ServePolicy", "receive_or_idle"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ServePolicy:
    """Limits and access rules of one server. ``idle_timeout``: seconds, ``None`` for never."""

    tokens: TokenTable = field(default_factory=TokenTable)
    share_objects: bool = False
    max_connections: int = 256
    idle_timeout: float | None = None
    max_line_bytes: int = MAX_LINE_BYTES
    auth_timeout: float = 10.0


class Hub:
    """See the module docstring."""

    def __init__(
        self,
        system: ActorSystem,
        policy: ServePolicy,
        *,
        config: BridgeConfig | None = None,
        system_model: ModelFactory | None = None,
        extensions: Callable[[], Sequence[Extension]] = tuple,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.system = system
        self.policy = policy
        self.config = config or BridgeConfig()
        self.system_model = system_model
        self.extensions = extensions
        self.metrics = metrics
        if metrics is not None:
            self.system_model = _timed(system_model, metrics) if system_model else None
            types = {name: _timed_type(factory, metrics) for name, factory in self.config.model_types.items()}
            self.config = msgspec.structs.replace(self.config, model_types=types)
        self.connections = 0
        self._serial = itertools.count(1)
        self._queue_kinds: set[str] = set()

    # --- connections -----------------------------------------------------------------------

    def admit(self, transport: str) -> bool:
        """Take a connection slot; ``False`` when all ``max_connections`` are taken."""
        if self.connections >= self.policy.max_connections:
            self.refused(transport, "limit")
            return False
        self.connections += 1
        if self.metrics is not None:
            self.metrics.connection_opened(transport)
        return True

    def release(self, transport: str) -> None:
        self.connections -= 1
        if self.metrics is not None:
            self.metrics.connection_closed(transport)

    def refused(self, transport: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.connection_refused(transport, reason)

    def full_error(self) -> AgentError:
        limit = self.policy.max_connections
        return AgentError(ErrorCode.BUSY, f"Too many connections (limit {limit}); try again later.", limit=limit)

    def open_bridge(self, write: Callable[[bytes], Awaitable[None]], tenant: Tenant) -> Bridge:
        """The bridge of a new connection speaking for ``tenant``."""
        shared = self.policy.share_objects
        namespace = f"t:{tenant.name}" if shared else f"c{next(self._serial)}"
        return Bridge(
            self.system,
            write,
            config=self.config,
            system_model=self.system_model,
            extensions=self.extensions(),
            namespace=namespace + NAMESPACE_SEPARATOR,
            shared=shared,
            metrics=self.metrics,
        )

    # --- health and metrics ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "connections": self.connections, "sessions": len(self.system.addresses("session"))}

    def metrics_text(self) -> str:
        """The Prometheus exposition, gauges refreshed now; ``""`` without metrics."""
        if self.metrics is None:
            return ""
        self.metrics.sessions.set(len(self.system.addresses("session")))
        depth: dict[str, int] = dict.fromkeys(self._queue_kinds, 0)
        for address in self.system.addresses():
            ref = self.system.lookup(address)
            if ref is not None:
                depth[address.kind] = depth.get(address.kind, 0) + ref.statistics().queued
        self._queue_kinds.update(depth)
        for kind, queued in depth.items():
            self.metrics.queue_depth.set(queued, kind=kind)
        return self.metrics.render()


class Activity:
    """When the connection last moved a byte, in either direction (event-loop clock)."""

    def __init__(self) -> None:
        self.last = anyio.current_time()

    def touch(self) -> None:
        self.last = anyio.current_time()


async def receive_or_idle(
    receive: Callable[[], Awaitable[T]], activity: Activity, timeout: float | None, busy: Callable[[], bool]
) -> T | None:
    """``await receive()``; ``None`` once ``timeout`` seconds pass without activity while not
    ``busy()``. ``receive`` must be safe to cancel (anyio streams and websockets' ``recv`` are)."""
    if timeout is None:
        return await receive()
    while True:
        remaining = activity.last + timeout - anyio.current_time()
        if remaining <= 0:
            if not busy():
                return None
            activity.touch()  # work in flight: idleness starts when it is done
            continue
        with anyio.move_on_after(remaining):
            item = await receive()
            activity.touch()
            return item


def _timed(factory: ModelFactory, metrics: ServerMetrics) -> ModelFactory:
    return lambda: _TimedModel(factory(), metrics)


def _timed_type(factory: CustomModelFactory, metrics: ServerMetrics) -> CustomModelFactory:
    return lambda spec, path: _TimedModel(factory(spec, path), metrics)


class _TimedModel:
    """A LanguageModel that reports how long each inference attempt took."""

    def __init__(self, model: LanguageModel, metrics: ServerMetrics) -> None:
        self._model = model
        self._metrics = metrics

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._model.capabilities

    async def availability(self) -> Availability:
        return await self._model.availability()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        start = anyio.current_time()
        pieces = self._model.stream(request)
        try:
            async for piece in pieces:
                yield piece
        finally:
            self._metrics.model_step(request.kind.value, anyio.current_time() - start)
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()
