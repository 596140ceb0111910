"""The bridge: one per connection. JSON-RPC lines in, actor messages out, one ordered outbox.

Contract
--------
- :meth:`Bridge.receive` handles one line completely before the next: decode, validate, run the
  method handler's order-sensitive part (create the object, queue the turn). Long work comes back
  as a :class:`~oam_actors.bridge.registry.Deferred` and is awaited in the bridge's task group.
- Replies to ``tool/call`` bypass every queue: they are routed to the waiting object's control lane
  as soon as they are read. Unknown, finished or repeated replies are ignored.
- One responder (:meth:`_answer` / :meth:`_answer_error`): every request gets exactly one response,
  written after every event its work produced (object actors hand events to the outbox
  synchronously, before their reply resolves).
- ``shutdown`` cancels all work, waits (bounded) for the cancelled requests' answers, answers
  ``{}``; afterwards every request gets ``-32023 shut_down`` (in :meth:`Bridge.serve`: the lines
  already read when ``shutdown`` is answered; then it returns).
- At end of input with draining (:meth:`Bridge.serve`), the client can no longer answer
  ``tool/call``: every outstanding and every later call gets an error output at once, so no turn
  waits for an answer that cannot come.
- ``namespace`` prefixes the runtime ids of this bridge's objects (``""`` for stdio; otherwise it
  ends with ``NAMESPACE_SEPARATOR``). With ``shared=True`` other bridges use the same namespace:
  closing or ``shutdown`` then cancels only the work this bridge queued and leaves the objects
  alone. A queued turn carries this bridge as its outlet, so its events and ``tool/call``s come
  back here whichever connection created the session.
- ``metrics`` (optional, see ``oam_actors.observability.metrics.ServerMetrics``) is told of every
  request, response and finished deferred request.
- Method handlers (the core methods of ``core``, then each extension's) get the bridge as a
  :class:`~oam_actors.bridge.registry.HandlerBridge`, which :class:`Bridge` satisfies; ``core``,
  ``registry`` and the extensions' handlers (``model_status``, ``game_methods``) never import
  this module.

Limits (``BridgeConfig.max_connection_bytes`` and ``max_in_flight``; ``None`` is no limit)
---------------------------------------------------------------------------------------------
- What the connection holds is counted in bytes: pending output (``Outbox.pending_bytes``), the
  requests in flight (each its message size plus :data:`REQUEST_OVERHEAD`) and the transport's
  buffered input (``serve(buffered=…)``).
- Backpressure: after each line, :meth:`serve` reads no further while the pending output is at
  least an eighth of the bound; the peer's own writes then stall in its socket or pipe.
- Fairness: every :data:`YIELD_EVERY` lines (:data:`FAIR_YIELD_EVERY` while other connections'
  busy work waits its turn) the reader yields through ``runtime.FairYield`` as this bridge's
  ``flow``, and the work it queues carries that flow to the admission gate: connections take
  turns at the event loop and at the gate, each connection one share however many sessions it
  keeps busy. Immediate methods (``ping``, ``session/cancel``, ``session/list``, …) are answered
  by the reader itself and never wait behind anyone's turns.
- Queued work (see :meth:`admit`): beyond ``max_in_flight`` requests in flight, or once the
  requests in flight hold half the bound, a request that would queue work is answered at once
  ``-32010 busy`` with ``data.limit``; a full object mailbox answers the same with its ``max_queue``.
- Past the whole bound (output produced by work already running while reading is paused), the
  connection is aborted (:meth:`abort`): one warning naming the connection, the cause and the bytes
  held; its output is dropped, its work cancelled, and :meth:`serve` returns.
"""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import msgspec

from .._version import __version__
from ..agent import ErrorOutput, ToolCall, ToolOutput, output_from_value
from ..errors import AgentError, ErrorCode, OamError, ProtocolError, internal_error
from ..objects import Respond, ToolResult
from ..objects.session import NAMESPACE_SEPARATOR
from ..runtime import (
    Actor, ActorRef, ActorStopped, ActorSystem, Address, CheckpointFailed, FairYield, HostFailed, MailboxFull,
    MessageCancelled, Reply, StaleVersion, fair_yield, flow,
)
from . import jsonrpc
from .config import BridgeConfig, ModelFactory
from .core import install_core
from .outbox import Outbox
from .params import Params
from .registry import Call, Deferred, Extension, MethodRegistry, Reviver

if TYPE_CHECKING:
    from ..observability.metrics import ServerMetrics

__all__ = ["FAIR_YIELD_EVERY", "REQUEST_OVERHEAD", "YIELD_EVERY", "Bridge", "tenant_namespace"]

_log = logging.getLogger(__name__)

NO_CLIENT_ANSWER = "The client closed its input before answering."
REQUEST_OVERHEAD = 2048
"""Bytes a request in flight is counted beyond its message: its decoded form, task and reply."""

YIELD_EVERY = 16
"""Lines the read loop handles before it lets other connections' tasks run."""

FAIR_YIELD_EVERY = 4
"""The same while other connections' busy work waits for its turn (``FairYield.contended``)."""

_BRIDGES = itertools.count(1)

LATE_LINES_GRACE = 0.25
"""Seconds the input is still read after ``shutdown`` (ended sooner by end of input)."""

NOT_DURABLE = (
    "The change could not be saved to the state store, so it was not made; the object keeps its last saved "
    "state. The server log has the cause."
)

_Slot = list[bytes | None]
"""The place of an in-order deferred answer among the answers in arrival order (its line once known)."""

_UNORDERED: _Slot = [None]
"""The order of a deferred answer written as soon as it is known (a turn's)."""

HOST_FAILED = (
    "The process hosting this object failed during the operation, which did not complete; "
    "the object keeps its last committed state. Retry the request."
)


class Bridge:
    """One connection's bridge. Create it, then ``await serve(lines)`` (or drive ``receive``
    yourself inside ``async with bridge:``)."""

    def __init__(
        self,
        system: ActorSystem,
        write: Callable[[bytes], Awaitable[None]],
        *,
        config: BridgeConfig | None = None,
        system_model: ModelFactory | None = None,
        extensions: Sequence[Extension] = (),
        namespace: str = "",
        shared: bool = False,
        metrics: ServerMetrics | None = None,
        label: str = "stdio",
        tenant: str = "",
    ) -> None:
        self.system = system
        self.config = config or BridgeConfig()
        self.system_model = system_model
        if system.durability is not None:
            namespace = tenant_namespace(tenant)  # stored objects are the tenant's, whichever the front door
        self.namespace = namespace
        self.durability = system.durability
        self.tenant = tenant
        # With a state store the objects are the tenant's and outlive the connection.
        self.shared = shared or self.durability is not None
        self.revivers: dict[str, Reviver] = {}  # kind -> how its durable objects are built again
        self.metrics = metrics
        self.label = label
        self.flow = f"bridge-{next(_BRIDGES)}"  # this connection at the fair admission gate and yields
        self.registry = MethodRegistry()
        self.outbox = Outbox(write)
        self.aborted: str | None = None  # why abort() ended the connection
        self.client_info: dict[str, Any] | None = None
        self.shut_down = False
        self.closed = anyio.Event()
        self._extensions = list(extensions)
        self._task_group: anyio.abc.TaskGroup | None = None
        self._tool_counter = itertools.count(1)
        self._local_counter = itertools.count(1)
        self._tool_routes: dict[str, tuple[Address, str]] = {}
        self._input_closed = False
        self._inflight = 0
        self._request_bytes = 0  # what the requests in flight are counted (REQUEST_OVERHEAD each included)
        self._line_bytes = 0  # the size of the line being handled
        self._buffered: Callable[[], int] = _nothing
        self._since_yield = 0
        self._queued: set[Reply] = set()  # replies of the work this bridge queued, until answered
        self._held: collections.deque[_Slot] = collections.deque()  # answers in arrival order, from the first not known
        self._session_number = 0
        self._idle = anyio.Event()
        self._idle.set()
        install_core(self)  # the core methods are the first extension
        for extension in self._extensions:
            extension.install(self)

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Bridge:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self.outbox.run)
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        assert self._task_group is not None
        # Cleanup is bounded (grace periods) and must run even when the caller is cancelled.
        with anyio.CancelScope(shield=True):
            if not self.shut_down:
                await self._cancel_everything()
            await self.outbox.aclose()
        self._task_group.cancel_scope.cancel()
        return await self._task_group.__aexit__(*exc_info)

    async def serve(
        self, lines: AsyncIterable[Any], *, drain_on_eof: bool = True, buffered: Callable[[], int] | None = None
    ) -> None:
        """Serve lines until end of input, until ``shutdown`` has been answered, or until
        :meth:`abort`.

        At end of input, ``drain_on_eof`` lets requests in flight finish and answer (a piped
        script gets every response); otherwise their work is cancelled (a network client that
        went away costs only its own work). ``buffered`` tells how many bytes of input the
        transport holds (counted against ``max_connection_bytes``).
        """
        if buffered is not None:
            self._buffered = buffered
        async with self:
            async with anyio.create_task_group() as reader:

                async def read() -> None:
                    # After shutdown, lines already read are still answered (-32023) until the
                    # next read yields and stop_when_closed ends the loop.
                    with flow(self.flow):  # once for the whole read loop (see receive)
                        fair = fair_yield()
                        async for line in lines:
                            await self._receive(line)
                            await self._pace(fair)
                    reader.cancel_scope.cancel()

                async def stop_when_closed() -> None:
                    await self.closed.wait()
                    if self.aborted is None:
                        # Lines a client sent right behind `shutdown` may still be on their way (a
                        # WebSocket frame each): answer them -32023 for a moment, not silence.
                        await anyio.sleep(LATE_LINES_GRACE)
                    reader.cancel_scope.cancel()

                reader.start_soon(read)
                reader.start_soon(stop_when_closed)
            if drain_on_eof and not self.shut_down and self.aborted is None:
                self._close_input()
                await self._idle.wait()

    async def _pace(self, fair: FairYield) -> None:
        """Between two lines: wait while the peer leaves its output unread; yield now and then."""
        limit = self.config.max_connection_bytes
        if limit is not None and self.outbox.pending_bytes >= limit // 8:
            await self.outbox.wait_below(limit // 8)
            self._since_yield = 0
            return
        self._since_yield += 1
        if self._since_yield >= YIELD_EVERY or (self._since_yield >= FAIR_YIELD_EVERY and fair.contended):
            self._since_yield = 0
            await fair.pause(self.flow)

    # --- limits ------------------------------------------------------------------------------

    def held_bytes(self) -> int:
        """What this connection holds: pending output, requests in flight, buffered input."""
        return self.outbox.pending_bytes + self._request_bytes + self._buffered()

    def admit(self) -> None:
        """Check that the request being handled may queue work; raises ``busy`` (``data.limit``)
        when the connection already has ``max_in_flight`` requests in flight or their bytes
        reach half of ``max_connection_bytes``. Handlers call it before they queue anything."""
        most = self.config.max_in_flight
        if most is not None and self._inflight >= most:
            raise AgentError(
                ErrorCode.BUSY,
                f"Too many requests in flight on this connection (limit {most}); wait for answers before sending more.",
                limit=most,
            )
        bound = self.config.max_connection_bytes
        if bound is not None and self._request_bytes + self._line_bytes + REQUEST_OVERHEAD > bound // 2:
            raise AgentError(
                ErrorCode.BUSY,
                f"The requests in flight on this connection hold too much memory (limit {bound // 2} bytes); "
                "wait for answers before sending more.",
                limit=bound // 2,
            )

    def abort(self, reason: str, level: int = logging.WARNING) -> None:
        """End the connection now because of ``reason`` (the peer's fault): log one line (at
        ``level``) with what it held, drop its output, cancel its work; :meth:`serve` returns.
        Idempotent."""
        if self.aborted is not None:
            return
        self.aborted = reason
        _log.log(
            level,
            "connection %s closed: %s; %d bytes held (output %d, requests in flight %d in %d bytes, input %d)",
            self.label, reason, self.held_bytes(), self.outbox.pending_bytes, self._inflight,
            self._request_bytes, self._buffered(),
        )
        self.outbox.abandon()
        self.closed.set()

    def _send(self, line: bytes) -> None:
        """Every outbound message goes through here (the one place the bound is checked)."""
        self.outbox.put_nowait(line)
        bound = self.config.max_connection_bytes
        if bound is not None and self.aborted is None and self.held_bytes() > bound:
            self.abort(f"its output is not being read fast enough (memory bound {bound} bytes exceeded)")

    # --- inbound -----------------------------------------------------------------------------

    async def receive(self, line: Any) -> None:
        """Handle one inbound line (bytes/str, or a transport's ``LineTooLong`` marker). The work
        it queues is this connection's flow at the admission gate (``runtime.flow``: the
        bridge's ``flow``), so connections are admitted in turn."""
        with flow(self.flow):
            await self._receive(line)

    async def _receive(self, line: Any) -> None:
        # A transport's marker (LineTooLong) has to_error; lines are looked at as lines first.
        if not isinstance(line, bytes | str) and (to_error := getattr(line, "to_error", None)) is not None:
            self._answer_error(None, to_error())
            return
        self._line_bytes = len(line)
        message = jsonrpc.decode(line)
        if message is None:
            return
        if isinstance(message, jsonrpc.Invalid):
            self._answer_error(message.id, message.error)
        elif isinstance(message, jsonrpc.Response):
            await self._route_tool_reply(message)
        else:
            await self._dispatch(message)

    @property
    def in_flight(self) -> int:
        """Requests received and not answered yet (their work still runs)."""
        return self._inflight

    async def _dispatch(self, message: jsonrpc.Request | jsonrpc.Notification) -> None:
        if self.metrics is not None:
            # Unknown names share one label: clients must not grow the label set.
            known = self.registry.get(message.method) is not None
            self.metrics.request(message.method if known else "(unknown)")
        request_id = message.id if isinstance(message, jsonrpc.Request) else None
        notification = request_id is None
        if self.shut_down:
            if not notification:
                self._answer_error(request_id, ProtocolError(ErrorCode.SHUT_DOWN, "The bridge has shut down."))
            return
        handler = self.registry.get(message.method)
        if handler is None:
            if notification:
                _log.info("ignored notification for unknown method %r", message.method)
            else:
                self._answer_error(
                    request_id,
                    ProtocolError(ErrorCode.METHOD_NOT_FOUND, f"Method '{message.method}' not found.", method=message.method),
                )
            return
        try:
            params = jsonrpc.require_params_object(message)
            result = await handler(Call(self, request_id, message.method, Params(params)))
        except Exception as exc:
            self._finish_error(request_id, exc, message.method)
            return
        if isinstance(result, Deferred):
            if result.reply is not None:
                self._answer_when_settled(request_id, message.method, result)
            else:
                self._defer(request_id, message.method, result.awaitable, in_order=result.in_order)
        elif not notification:
            self._answer(request_id, result)

    def _defer(self, request_id: Any, method: str, awaitable: Awaitable[Any], *, in_order: bool = False) -> None:
        assert self._task_group is not None, "use the bridge inside 'async with'"
        charge = self._track()
        slot: _Slot | None = None
        if in_order and request_id is not None:  # its answer keeps its place among the immediate ones
            slot = [None]
            self._held.append(slot)

        async def finish() -> None:
            try:
                result = await awaitable
            except Exception as exc:
                self._finish(request_id, method, None, exc, charge, slot)
            else:
                self._finish(request_id, method, result, None, charge, slot)

        self._task_group.start_soon(finish)

    def _answer_when_settled(self, request_id: Any, method: str, deferred: Deferred) -> None:
        """Answer from the reply's done callback, on the task that settles it (see ``Deferred``)."""
        assert deferred.reply is not None
        deferred.reply.add_done_callback(_Answer(self, request_id, method, self._track(), deferred.settled))

    def _track(self) -> int:
        """A request's work is in flight; what its bytes are counted."""
        self._inflight += 1
        charge = self._line_bytes + REQUEST_OVERHEAD
        self._request_bytes += charge
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        return charge

    def _finish(self, request_id: Any, method: str, result: Any, error: Exception | None, charge: int,
                slot: _Slot | None = None) -> None:
        """A deferred request's outcome is known: answer it (a notification's is dropped), in
        its ``slot`` if it keeps its place in arrival order, else at once."""
        order = _UNORDERED if slot is None else slot
        try:
            if error is not None:
                self._completed(method, self._finish_error(request_id, error, method, order).code.wire)
            else:
                self._completed(method, "ok")
                if request_id is not None:
                    self._answer(request_id, result, order)
        finally:
            self._inflight -= 1
            self._request_bytes -= charge
            if not self._inflight:
                self._idle.set()

    # --- the one responder -------------------------------------------------------------------

    def _answer(self, request_id: Any, result: Any, order: _Slot | None = None) -> None:
        code = "ok"
        try:
            line = jsonrpc.encode_result(request_id, result)
        except (msgspec.EncodeError, TypeError, UnicodeEncodeError) as exc:
            _log.error("result of request %r could not be encoded", request_id, exc_info=exc)
            line = jsonrpc.encode_error(request_id, internal_error())
            code = ErrorCode.INTERNAL_ERROR.wire
        if self.metrics is not None:
            self.metrics.response(code)
        self._deliver(line, order)

    def _answer_error(self, request_id: Any, error: OamError, order: _Slot | None = None) -> None:
        if self.metrics is not None:
            self.metrics.response(error.code.wire)
        self._deliver(jsonrpc.encode_error(request_id, error), order)

    def _deliver(self, line: bytes, order: _Slot | None) -> None:
        """Write an answer: ``None``, an immediate one, in arrival order (behind the in-order
        deferred answers not written yet); ``_UNORDERED`` (a turn's) at once; a slot fills it."""
        if order is None:
            if self._held:
                self._held.append([line])
            else:
                self._send(line)
        elif order is _UNORDERED:
            self._send(line)
        else:
            order[0] = line
            while self._held and (ready := self._held[0][0]) is not None:
                self._held.popleft()
                self._send(ready)

    def _completed(self, method: str, code: str) -> None:
        if self.metrics is not None:
            self.metrics.completed(method, code)

    def _finish_error(self, request_id: Any, exc: Exception, method: str, order: _Slot | None = None) -> OamError:
        error = self.error_for(exc, request_id=request_id, method=method)
        if request_id is None:
            _log.info("notification %s failed: %s", method, error.message)
        else:
            self._answer_error(request_id, error, order)
        return error

    @staticmethod
    def error_for(exc: Exception, *, request_id: Any = None, method: str | None = None) -> OamError:
        """Runtime errors mapped onto the protocol; everything else as §4.2 says (a bug is
        logged with ``request_id`` and ``method``)."""
        if isinstance(exc, MessageCancelled | ActorStopped):
            return AgentError(ErrorCode.CANCELLED, "The operation was cancelled.")
        if isinstance(exc, MailboxFull):
            return AgentError(
                ErrorCode.BUSY,
                f"Too many operations are queued for this object (limit {exc.max_queue}); try again later.",
                limit=exc.max_queue,
            )
        if isinstance(exc, HostFailed):
            return ProtocolError(ErrorCode.INTERNAL_ERROR, HOST_FAILED)
        if isinstance(exc, CheckpointFailed | StaleVersion):
            return ProtocolError(ErrorCode.INTERNAL_ERROR, NOT_DURABLE)
        return jsonrpc.error_for_exception(exc, request_id=request_id, method=method)

    # --- the Outlet that object actors write through -----------------------------------------

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._send(jsonrpc.encode_notification(method, params))

    def call_tool(self, params_head: dict[str, Any], request_id: Any, call: ToolCall, *, target: Address) -> str:
        tool_id = f"t-{next(self._tool_counter)}"
        self._tool_routes[tool_id] = (target, call.id)
        params = {**params_head, "requestId": request_id, "call": call}  # the encoder writes the struct
        self._send(jsonrpc.encode_request(tool_id, "tool/call", params))
        if self._input_closed:
            self._answer_for_gone_client(tool_id)
        return tool_id

    def release_tool(self, tool_request_id: str) -> None:
        self._tool_routes.pop(tool_request_id, None)

    async def _route_tool_reply(self, reply: jsonrpc.Response) -> None:
        route = self._tool_routes.pop(str(reply.id), None) if isinstance(reply.id, str) else None
        if route is None:
            _log.info("ignored a reply to unknown or finished bridge request %r", reply.id)
            return
        address, call_id = route
        ref = self.system.lookup(address)
        if ref is None:
            return
        try:
            await ref.ask_control(ToolResult(call_id, tool_output_from_reply(reply)))
        except (ActorStopped, HostFailed) as exc:  # the object went away meanwhile: nobody waits
            _log.info("tool reply %r not delivered: %s", reply.id, exc)
        except Exception:  # a bug: the connection stays up, the turn times out its call
            _log.exception("tool reply %r could not be delivered", reply.id)

    def _close_input(self) -> None:
        """End of input: nobody can answer ``tool/call`` any more (outstanding or later)."""
        self._input_closed = True
        for tool_id in list(self._tool_routes):
            self._answer_for_gone_client(tool_id)

    def _answer_for_gone_client(self, tool_id: str) -> None:
        assert self._task_group is not None
        reply = jsonrpc.Response(tool_id, error={"message": NO_CLIENT_ANSWER})
        self._task_group.start_soon(self._route_tool_reply, reply)

    # --- shutdown ----------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Cancel everything, wait (bounded) for the cancelled answers; further requests fail."""
        self.shut_down = True
        await self._cancel_everything()

    async def _cancel_everything(self) -> None:
        if self.shared:  # other connections' work and the objects themselves are not ours
            for reply in list(self._queued):
                reply.cancel()
        for address in self.system.addresses():
            if self.owns(address) and not self.shared:
                ref = self.system.lookup(address)
                if ref is not None:
                    ref.cancel_all()
        with anyio.move_on_after(self.config.shutdown_grace_seconds):
            await self._idle.wait()
        for address in self.system.addresses():
            if self.owns(address) and not self.shared:
                with anyio.move_on_after(self.config.shutdown_grace_seconds):
                    await self.system.stop(address)
        for extension in self._extensions:
            await extension.aclose()

    # --- helpers for method handlers ---------------------------------------------------------

    def new_session_id(self) -> str:
        """The first unused ``s<n>``; a number once handed out is not reused."""
        while True:
            self._session_number += 1
            candidate = f"s{self._session_number}"
            if self.lookup("session", candidate) is None:
                return candidate

    # --- durable objects (a system with a state store) ---------------------------------------

    def lookup(self, kind: str, object_id: str) -> ActorRef | None:
        """The ref of this bridge's object ``kind``/``object_id``: the live actor, or, with a
        state store, the stored one built again now (a virtual actor revived on first use);
        ``None`` if there is neither. A record that cannot be built again is logged and
        answered ``-32603``."""
        address = self.address(kind, object_id)
        ref = self.system.lookup(address)
        if ref is not None or self.durability is None or (reviver := self.revivers.get(kind)) is None:
            return ref
        record = self.durability.revive(address)
        if record is None:
            return None
        try:
            actor = reviver(self, record)
        except Exception as exc:
            self.durability.forget(address)
            _log.error("%s could not be revived from the state store", address, exc_info=exc)
            raise ProtocolError(ErrorCode.INTERNAL_ERROR, f"The stored {kind} '{object_id}' could not be restored.") from exc
        return self.system.spawn(address, lambda: actor, max_queue=self.config.max_queue)

    def stored_ids(self, kind: str) -> list[str]:
        """The ids of this bridge's stored objects of ``kind`` (live or not); ``[]`` without a store."""
        if self.durability is None:
            return []
        return self.durability.store.ids(self.tenant, kind)

    def created(self, ref: ActorRef, actor: Actor, recipe: bytes, result: Any, *,
                undo: Callable[[], None] | None = None) -> Any:
        """The answer of a creation that spawned ``actor`` at ``ref``: ``result``, at once
        without a state store. With one, a :class:`Deferred` answered in arrival order once the
        actor's first record is written (``recipe``: what its reviver needs besides its
        snapshot), while the bridge reads on, so creations share group commits; if the write
        fails, ``undo`` runs, the actor is stopped and the request fails (``CheckpointFailed``)."""
        durability = self.durability
        if durability is None:
            return result
        address = ref.address
        written = durability.create(
            address, tenant=self.tenant, kind=address.kind, object_id=self.local_id(address), recipe=recipe,
            state=actor.snapshot() or b"",
        )

        async def answer() -> Any:
            try:
                await written
            except Exception:
                if undo is not None:
                    undo()
                await self.system.stop(address)
                raise
            return result

        return Deferred(answer(), in_order=True)

    def shares(self, holder: Address, owner: Address) -> None:
        """With a state store: ``holder`` writes ``owner``'s state (an NPC its world's
        document), so each of its commits checkpoints ``owner`` too. Without one, nothing."""
        if self.durability is not None:
            self.durability.share(holder, owner)

    async def delete_durable(self, address: Address) -> None:
        """After ``*/delete`` stopped the object: forget it for good in the state store."""
        if self.durability is not None:
            await self.durability.delete(address)

    def new_local_id(self) -> str:
        """A private ``local-<n>`` request id for work without a JSON-RPC id (a notification),
        so its events stay distinguishable (§1.4)."""
        return f"local-{next(self._local_counter)}"

    def session_count(self) -> int:
        """This bridge's sessions (with a state store: the tenant's stored ones, live or not)."""
        live = {self.local_id(address) for address in self.system.addresses("session") if self.owns(address)}
        return len(live.union(self.stored_ids("session")))

    def address(self, kind: str, object_id: str) -> Address:
        """The runtime address of this connection's object ``kind``/``object_id``."""
        return Address(kind, self.namespace + object_id)

    def owns(self, address: Address) -> bool:
        return address.id.startswith(self.namespace)

    def local_id(self, address: Address) -> str:
        return address.id[len(self.namespace):]

    def enqueue(self, ref: ActorRef, message: Any) -> Deferred:
        """Queue ``message`` on the object's ordered lane now (per-object order); the request
        is answered when the object has handled it. A turn gets this bridge as its outlet.
        Raises ``busy`` beyond the connection's limits (:meth:`admit`)."""
        self.admit()
        if isinstance(message, Respond) and message.outlet is None:
            message = msgspec.structs.replace(message, outlet=self)
        return self.queued(ref.ask_nowait(message))

    def queued(self, reply: Reply, *, settled: Callable[[], None] | None = None) -> Deferred:
        """Answer the request with ``reply`` once it resolves (``settled`` runs first, as in
        :meth:`Deferred.of_reply`). Like :meth:`enqueue`'s work, it is cancelled when a shared
        bridge closes or shuts down (extensions queue their own messages)."""
        self._queued.add(reply)
        return Deferred.of_reply(reply, settled=_Forget(self._queued, reply, settled))


class _Answer:
    """A queued request's done callback: answers it on the task that settles its reply. A small
    record rather than a closure: a burst holds one per queued turn, and the collector walks
    each cell of a closure as an object of its own."""

    __slots__ = ("_bridge", "_charge", "_method", "_request_id", "_settled")

    def __init__(self, bridge: Bridge, request_id: Any, method: str, charge: int,
                 settled: Callable[[], None] | None) -> None:
        self._bridge = bridge
        self._request_id = request_id
        self._method = method
        self._charge = charge
        self._settled = settled

    def __call__(self, value: Any, error: BaseException | None) -> None:
        # A done callback must not raise: it runs inside the settling actor's bookkeeping.
        try:
            if self._settled is not None:
                self._settled()
            failure = error if isinstance(error, Exception) or error is None else internal_error()
            self._bridge._finish(self._request_id, self._method, value, failure, self._charge)  # noqa: SLF001
        except anyio.ClosedResourceError:
            _log.info("request %r finished after its connection closed; not answered", self._request_id)
        except Exception:
            _log.exception("request %r could not be answered", self._request_id)


class _Forget:
    """A queued reply is settled: the bridge stops tracking it, then ``settled`` runs."""

    __slots__ = ("_queued", "_reply", "_settled")

    def __init__(self, queued: set[Reply], reply: Reply, settled: Callable[[], None] | None) -> None:
        self._queued = queued
        self._reply = reply
        self._settled = settled

    def __call__(self) -> None:
        self._queued.discard(self._reply)
        if self._settled is not None:
            self._settled()


def tenant_namespace(tenant: str) -> str:
    """The namespace of ``tenant``'s objects when connections share them (``--share-objects``,
    or a state store); the anonymous tenant (stdio, servers without tokens) is ``""``."""
    return f"t:{tenant}{NAMESPACE_SEPARATOR}"


def _nothing() -> int:
    return 0


def tool_output_from_reply(reply: jsonrpc.Response) -> ToolOutput:
    """What the model sees for each accepted reply form of ``tool/call``."""
    if reply.error is not None:
        message = reply.error.get("message")
        return ErrorOutput(message if isinstance(message, str) else msgspec.json.encode(reply.error).decode())
    result = reply.result
    if isinstance(result, dict) and "output" in result:
        return output_from_value(result["output"], is_error=result.get("isError") is True)
    return output_from_value(result)
