"""What every network connection of one server shares: the actor system, limits, tokens, metrics.

Contract
--------
- One :class:`Hub` per server, used by the TCP and the WebSocket transports alike, on the event
  loop's thread. :meth:`Hub.admit` / :meth:`Hub.release` bracket a connection; beyond
  ``max_connections`` open connections ``admit`` refuses (the transport answers
  :meth:`Hub.full_error` and closes). Unauthenticated connections count too.
- :meth:`Hub.open_bridge` makes the connection's bridge. Objects are private to the connection
  (namespace ``c<n>``) unless ``share_objects`` is on or the system has a state store: then every
  connection of one tenant uses the tenant's namespace (``t:<name>``) as a sharing bridge (see
  ``Bridge(shared=True)``).
- :class:`Watchdog` holds a connection's time rules, on the hub's clock (``Hub(clock=…)``; a
  :class:`~oam_actors.models.scheduler.ManualClock` in tests). Each rule aborts the connection
  (``Bridge.abort``: one log line, output dropped, work cancelled):

  - ``write_timeout``: a write that has not completed after that many seconds: the peer does not
    read its output (by then the bridge has stopped reading its input);
  - ``line_timeout``: a line begun and not completed after that many seconds (a partial line
    trickled a byte at a time), and a new connection's first message not complete after that
    many seconds from connecting (a silent connection);
  - ``idle_timeout``: that many seconds without a byte in either direction while the bridge has
    nothing in flight and nothing is being written; a long turn is not idleness.

  ``None`` disables a rule. A rule is checked when its deadline comes, exactly (the watchdog
  sleeps until the next deadline, or one timeout ahead when no rule is running).
- :meth:`Hub.serve` serves a bridge :meth:`Hub.open_bridge` made; meanwhile the bridge counts in
  ``Hub.tenants`` (open connections by :func:`tenant_label`, the ``oam_tenant_connections``
  gauge). :meth:`Hub.objects` counts live objects and their queued operations by kind, and
  :meth:`Hub.model_status` is what ``model/status`` answers for ``status_model``; the scrape
  (:meth:`Hub.scrape`) and the console read all three from here.
- ``extensions`` makes each new bridge's extensions (one set per connection, as the game
  extension requires).
- The hub is a transport: it makes, serves and aborts whole bridges, so it sees the
  :class:`~oam_actors.bridge.Bridge` (``serve``, ``abort``, ``in_flight``, which no handler may
  use); the one extension it adds itself (``auth`` on a server without tokens) sees only the
  :class:`~oam_actors.bridge.HandlerBridge`, as every handler does.
- With metrics, the inferences of the system model and of the registered model types are timed
  (``oam_model_step_seconds``); inline scripted models (``"model": {"type": "scripted", …}``) are
  built by the core methods and are not.
"""

from __future__ import annotations

import itertools
import logging
import socket
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..agent import (
    DelegatingModel,
    GenerationRequest,
    LanguageModel,
    Usage,
)
from ..bridge import Bridge, BridgeConfig, Call, CustomModelFactory, Extension, HandlerBridge, ModelFactory
from ..bridge.bridge import tenant_namespace
from ..bridge.model_status import model_status
from ..errors import AgentError, ErrorCode
from ..models import ModelWithStatistics
from ..models.scheduler import Clock, MonotonicClock
from ..objects.session import NAMESPACE_SEPARATOR
from ..observability.metrics import ServerMetrics
from ..runtime import ActorSystem
from .auth import ANONYMOUS, Tenant, TokenTable
from .stdio import MAX_LINE_BYTES

if TYPE_CHECKING:
    from ..models.routing import RouterStatistics

__all__ = [
    "ANONYMOUS_LABEL", "IDLE_TIMEOUT", "LINE_TIMEOUT", "WRITE_TIMEOUT", "Hub", "ObjectCount", "ServePolicy", "Watchdog",
    "limit_send_buffer", "peer_name", "serve_bridge", "tenant_label",
]

_log = logging.getLogger(__name__)

IDLE_TIMEOUT = 300.0
"""Seconds a connection may stay silent with nothing in flight (``--idle-timeout``)."""

LINE_TIMEOUT = 30.0
"""Seconds to complete a begun line, or a new connection's first message (``--line-timeout``)."""

WRITE_TIMEOUT = 30.0
"""Seconds a write to the peer may take before the peer counts as not reading (``--write-timeout``)."""


@dataclass(frozen=True, kw_only=True)
class ServePolicy:
    """Limits and access rules of one server. Timeouts in seconds, ``None`` for never (see
    :class:`Watchdog`)."""

    tokens: TokenTable = field(default_factory=TokenTable)
    share_objects: bool = False
    max_connections: int = 256
    idle_timeout: float | None = IDLE_TIMEOUT
    line_timeout: float | None = LINE_TIMEOUT
    write_timeout: float | None = WRITE_TIMEOUT
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
        clock: Clock | None = None,
        status_model: Callable[[], ModelWithStatistics] | None = None,
        routing: Callable[[], RouterStatistics] | None = None,
    ) -> None:
        self.system = system
        self.status_model = status_model
        self.policy = policy
        self.clock: Clock = clock or MonotonicClock()
        self.config = config or BridgeConfig()
        self.system_model = system_model
        self.extensions = extensions
        self.metrics = metrics
        self.routing = routing  # a routed system model's counters, for /metrics
        if metrics is not None:
            self.system_model = _timed(system_model, metrics) if system_model else None
            types = {name: _timed_type(factory, metrics) for name, factory in self.config.model_types.items()}
            self.config = msgspec.structs.replace(self.config, model_types=types)
        self.connections = 0
        self.tenants: dict[str, int] = {}  # open protocol connections by tenant_label()
        self._bridge_tenants: dict[Bridge, str] = {}
        self._serial = itertools.count(1)
        self._object_kinds: set[str] = set()
        self._status_error: str | None = None

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

    def open_bridge(self, write: Callable[[bytes], Awaitable[None]], tenant: Tenant, peer: str) -> Bridge:
        """The bridge of a new connection speaking for ``tenant``; ``peer`` names it in logs."""
        shared = self.policy.share_objects
        serial = next(self._serial)
        namespace = tenant_namespace(tenant.name) if shared else f"c{serial}{NAMESPACE_SEPARATOR}"
        # Without tokens, a client written for a server with them may still say ``auth``.
        open_auth = [] if self.policy.tokens else [_OpenAuth()]
        bridge = Bridge(
            self.system,
            write,
            config=self.config,
            system_model=self.system_model,
            extensions=[*self.extensions(), *open_auth],
            namespace=namespace,
            shared=shared,
            metrics=self.metrics,
            label=f"#{serial} {peer}",
            tenant=tenant.name,
        )
        self._tenant_opened(bridge, tenant_label(tenant))
        return bridge

    async def serve(self, bridge: Bridge, watchdog: Watchdog, lines: AsyncIterable[Any],
                    buffered: Callable[[], int] | None = None) -> None:
        """:func:`serve_bridge` for a bridge :meth:`open_bridge` made; its tenant's connection
        ends with it."""
        try:
            await serve_bridge(bridge, watchdog, lines, buffered)
        finally:
            self._tenant_closed(bridge)

    def _tenant_opened(self, bridge: Bridge, label: str) -> None:
        self._bridge_tenants[bridge] = label
        self.tenants[label] = self.tenants.get(label, 0) + 1
        if self.metrics is not None:
            self.metrics.tenant_connections.inc(tenant=label)

    def _tenant_closed(self, bridge: Bridge) -> None:
        label = self._bridge_tenants.pop(bridge)
        self.tenants[label] -= 1
        if not self.tenants[label]:
            del self.tenants[label]
        if self.metrics is not None:
            self.metrics.tenant_connections.dec(tenant=label)

    def watchdog(self) -> Watchdog:
        """The time rules of a connection accepted now."""
        return Watchdog(self.clock, self.policy)

    # --- health and metrics ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "connections": self.connections, "sessions": len(self.system.addresses("session"))}

    async def scrape(self) -> str:
        """:meth:`metrics_text` with the status model's numbers copied in first."""
        if self.metrics is not None and self.status_model is not None:
            self.metrics.model.update(await self.model_status())
        return self.metrics_text()

    async def model_status(self) -> dict[str, Any] | None:
        """What ``model/status`` answers now (``None`` without a status model). A status model
        that fails is logged (its traceback once per distinct error) and reported as
        ``{"error": …}``: a scrape or the console must not fail with it."""
        if self.status_model is None:
            return None
        try:
            status = await model_status(self.status_model())
        except Exception as exc:  # noqa: BLE001 -- reported in the result, logged with its traceback
            text = f"{type(exc).__name__}: {exc}"
            if text != self._status_error:
                _log.exception("model/status failed")
            self._status_error = text
            return {"error": "model/status failed; the server log has the details"}
        self._status_error = None
        return status

    def metrics_text(self) -> str:
        """The Prometheus exposition, gauges refreshed now; ``""`` without metrics."""
        if self.metrics is None:
            return ""
        self.metrics.sessions.set(len(self.system.addresses("session")))
        for kind, count in self.objects().items():
            self.metrics.queue_depth.set(count.queued, kind=kind)
        if self.routing is not None:
            self.metrics.observe_routing(self.routing())
        return self.metrics.render()

    def objects(self) -> dict[str, ObjectCount]:
        """The live objects of every kind seen so far (a kind whose objects are all gone stays at 0)."""
        counts = {kind: ObjectCount() for kind in self._object_kinds}
        for address in self.system.addresses():
            ref = self.system.lookup(address)
            if ref is not None:
                count = counts.setdefault(address.kind, ObjectCount())
                count.live += 1
                count.queued += ref.statistics().queued
        self._object_kinds.update(counts)
        return counts


@dataclass
class ObjectCount:
    """Objects of one kind: how many live, and the operations queued on their mailboxes."""

    live: int = 0
    queued: int = 0


def tenant_label(tenant: Tenant) -> str:
    """A tenant's name in metrics and the console; the anonymous tenant is ``(anonymous)``, which
    no token name can spell."""
    return tenant.name or ANONYMOUS_LABEL


ANONYMOUS_LABEL = "(anonymous)"


class Watchdog:
    """The time rules of one connection (see the module docstring). The transport reports what
    happens (:meth:`received`, :meth:`writing`); :meth:`watch` enforces the rules."""

    def __init__(self, clock: Clock, policy: ServePolicy) -> None:
        self._clock = clock
        self._policy = policy
        now = clock.now()
        self._last_activity = now
        self._line_since: float | None = now  # a new connection owes its first message
        self._write_since: float | None = None

    def received(self, *, completed: bool, partial: bool) -> None:
        """Bytes arrived: ``completed`` at least one line, and ``partial`` a line is left begun."""
        now = self._clock.now()
        self._last_activity = now
        if completed:
            self._line_since = now if partial else None
        elif partial and self._line_since is None:
            self._line_since = now

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around one write to the peer."""
        self._write_since = self._clock.now()
        try:
            yield
        finally:
            self._write_since = None
        self._last_activity = self._clock.now()

    async def watch(self, busy: Callable[[], bool], expire: Callable[[str, int], None]) -> None:
        """Until cancelled, or until a rule expires: then ``expire(reason, log level)`` once.
        ``busy()``: the bridge has requests in flight (not idle)."""
        policy = self._policy
        if policy.write_timeout is None and policy.line_timeout is None and policy.idle_timeout is None:
            return
        while (expired := self._expired(busy)) is None:
            await self._clock.sleep_until(self._next_check())
        expire(*expired)

    def _expired(self, busy: Callable[[], bool]) -> tuple[str, int] | None:
        policy, now = self._policy, self._clock.now()
        if _due(self._write_since, policy.write_timeout, now):
            return f"it has not read its output for {policy.write_timeout:g} s", logging.WARNING
        if _due(self._line_since, policy.line_timeout, now):
            return f"no complete message within {policy.line_timeout:g} s", logging.INFO
        if self._write_since is None and _due(self._last_activity, policy.idle_timeout, now):
            if not busy():
                return f"idle for {policy.idle_timeout:g} s", logging.INFO
            self._last_activity = now  # work in flight: idleness starts when it is done
        return None

    def _next_check(self) -> float:
        """The earliest deadline; a rule not running now cannot expire before one timeout."""
        now = self._clock.now()
        policy = self._policy
        starts = ((self._write_since, policy.write_timeout), (self._line_since, policy.line_timeout),
                  (self._last_activity, policy.idle_timeout))
        return min(now + timeout if since is None else since + timeout for since, timeout in starts if timeout is not None)


async def serve_bridge(
    bridge: Bridge, watchdog: Watchdog, lines: AsyncIterable[Any], buffered: Callable[[], int] | None = None
) -> None:
    """Serve a network connection's lines with its watchdog running beside the bridge; a
    client that goes away costs only its own work (``drain_on_eof=False``)."""
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watchdog.watch, lambda: bridge.in_flight > 0, bridge.abort)
        await bridge.serve(lines, drain_on_eof=False, buffered=buffered)
        tasks.cancel_scope.cancel()


SEND_BUFFER_BYTES = 256 * 1024
"""The kernel's send buffer of a connection (``SO_SNDBUF``): without a cap Linux grows it to
megabytes for a peer that does not read, holding that much before backpressure is felt."""


def limit_send_buffer(sock: socket.socket | None) -> None:
    """Cap ``sock``'s kernel send buffer at :data:`SEND_BUFFER_BYTES` (best effort)."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    except OSError:
        pass  # not a socket the kernel lets us tune; its default applies


def peer_name(address: object) -> str:
    """``host:port`` (``[v6]:port``) of a socket address, for logs."""
    if isinstance(address, tuple):
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(address)


def _due(since: float | None, timeout: float | None, now: float) -> bool:
    return since is not None and timeout is not None and now - since >= timeout


def _timed(factory: ModelFactory, metrics: ServerMetrics) -> ModelFactory:
    return lambda: _TimedModel(factory(), metrics)


class _OpenAuth:
    """``auth`` on a server without tokens: every connection is the anonymous tenant already, so
    any ``auth`` (first or later, any token) answers ``{"tenant": null}`` rather than
    ``-32601``, and a client written for a server with tokens works against a development one."""

    def install(self, bridge: HandlerBridge) -> None:
        bridge.registry.register("auth", _anonymous)

    async def aclose(self) -> None:
        return None


async def _anonymous(call: Call) -> dict[str, Any]:
    return {"tenant": ANONYMOUS.to_wire()}


def _timed_type(factory: CustomModelFactory, metrics: ServerMetrics) -> CustomModelFactory:
    def timed(spec: dict[str, Any], path: str) -> LanguageModel:
        return _TimedModel(factory(spec, path), metrics)

    return timed


class _TimedModel(DelegatingModel):
    """A LanguageModel that reports how long each inference attempt took."""

    def __init__(self, model: LanguageModel, metrics: ServerMetrics) -> None:
        super().__init__(model)
        self._metrics = metrics

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
