"""JSON-RPC bookkeeping over one :class:`~oam_actors.client._transports.Transport`.

One reader task reads every message in arrival order and dispatches it: a response resolves its
request (exactly once; a late answer to a call that timed out or was cancelled is dropped), a
``session/event`` / ``npc/event`` / ``conversation/event`` goes to the stream of the request it names (before that
request's response, as the server writes them), ``world/changed`` to its subscription's stream,
``tool/call`` to a handler task, ``tool/cancel`` cancels that task. When the connection ends, for
whatever cause, every pending request fails with the :class:`ConnectionLost` naming it and every
event stream ends with it.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec

from ..errors import OamError
from ._errors import ClientError, ConnectionLost, MalformedMessage, RequestTimeout, error_from_wire
from ._transports import Transport

__all__ = ["Connection", "EventStream", "Pending", "ToolHandler"]

_log = logging.getLogger("oam_actors.client")
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

ToolHandler = Callable[..., Any]
"""A tool: called with the call's arguments as keyword arguments; returns the output (text or
any JSON value), or raises to answer the error output. Async or not (a plain function runs in a
worker thread, so it may block)."""

ToolLookup = Callable[[dict[str, Any]], ToolHandler | None]


class EventStream:
    """The notifications addressed to one request or subscription, in arrival order, unbounded
    (the reader never waits for a slow consumer); ends when :meth:`end` is called."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](max_buffer_size=math.inf)
        self.error: BaseException | None = None

    def put(self, item: dict[str, Any]) -> None:
        try:
            self._send.send_nowait(item)
        except anyio.ClosedResourceError:
            pass  # ended already (the request answered); a stray late event is dropped

    def end(self, error: BaseException | None = None) -> None:
        if self.error is None:
            self.error = error
        self._send.close()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            if isinstance(self.error, ClientError):
                error = self.error.fresh()
                raise error from error.__cause__
            if self.error is not None:
                raise self.error from None
            raise StopAsyncIteration from None


@dataclass
class Pending:
    """A request sent and not yet answered (or answered and not yet collected)."""

    id: int
    method: str
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None


class Connection:
    """One open connection. Run :meth:`run` in a task group (``await tg.start(conn.run)``)."""

    def __init__(self, transport: Transport, tools: ToolLookup, name: str) -> None:
        self.transport = transport
        self.name = name
        self.lost: ConnectionLost | None = None
        self._tools = tools
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._event_streams: dict[Any, EventStream] = {}
        self._subscriptions: dict[str, EventStream] = {}
        self._tool_tasks: dict[Any, anyio.CancelScope] = {}
        self._unrouted_error: OamError | None = None
        self.closed = anyio.Event()

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read until the connection ends; then fail whatever still waits."""
        try:
            async with anyio.create_task_group() as tg:
                task_status.started()
                try:
                    await self._read_loop(tg)
                except ConnectionLost as exc:
                    self._lose(exc)
                tg.cancel_scope.cancel()  # tool handlers still running have nobody to answer
        finally:
            self._lose(ConnectionLost(f"{self.name}: the client closed the connection"))
            with anyio.CancelScope(shield=True):
                await self.transport.aclose()
            self.closed.set()

    async def aclose(self) -> None:
        """Close the connection; pending calls fail with :class:`ConnectionLost`."""
        self._lose(ConnectionLost(f"{self.name}: the client closed the connection"))
        with anyio.CancelScope(shield=True):
            await self.transport.aclose()
        await self.closed.wait()

    def _lose(self, error: ConnectionLost) -> None:
        if self.lost is not None:
            return
        if self._unrouted_error is not None:  # a better cause than the socket's end of stream
            error.cause += f" after it sent: {self._unrouted_error.message}"
            error.args = (error.cause,)
            error.__cause__ = self._unrouted_error
        self.lost = error
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.error = error
                pending.done.set()
        self._pending.clear()
        for stream in [*self._event_streams.values(), *self._subscriptions.values()]:
            stream.end(error)

    # --- sending ------------------------------------------------------------------------------

    async def _send(self, message: dict[str, Any]) -> None:
        if self.lost is not None:
            raise self.lost.fresh()
        await self.transport.send(_encode(message))

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def start(self, method: str, params: dict[str, Any] | None, events: EventStream | None = None) -> Pending:
        """Send a request; its answer is collected by :meth:`wait`. ``events`` receives the
        request's ``session/event`` / ``npc/event`` / ``conversation/event`` notifications and ends
        with its answer."""
        request_id = next(self._ids)
        pending = self._pending[request_id] = Pending(request_id, method)
        if events is not None:
            self._event_streams[request_id] = events
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._send(message)
        except BaseException as exc:
            self._forget(request_id, exc)
            raise
        return pending

    async def wait(self, pending: Pending, *, timeout: float | None) -> Any:
        """The answer to a started request: its result, or the server's error raised as the
        library's exception; :class:`RequestTimeout` after ``timeout`` seconds (``None``: no limit)."""
        try:
            if timeout is None:
                await pending.done.wait()
            else:
                with anyio.move_on_after(timeout) as waited:
                    await pending.done.wait()
                if waited.cancelled_caught:
                    raise RequestTimeout(pending.method, timeout)
        except BaseException as exc:
            self._forget(pending.id, exc)
            raise
        if isinstance(pending.error, ClientError):
            raise pending.error.fresh()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _forget(self, request_id: int, exc: BaseException) -> None:
        """Nobody waits for this request any more; a late answer to it is dropped."""
        self._pending.pop(request_id, None)
        stream = self._event_streams.pop(request_id, None)
        if stream is not None:
            stream.end(exc if isinstance(exc, ClientError) else None)

    async def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None) -> Any:
        """:meth:`start` then :meth:`wait`."""
        return await self.wait(await self.start(method, params), timeout=timeout)

    def subscribe(self, subscription: str) -> EventStream:
        """The ``world/changed`` stream of a subscription (registered before its first change)."""
        stream = self._subscriptions.setdefault(subscription, EventStream())
        if self.lost is not None:
            stream.end(self.lost)
        return stream

    def unsubscribe(self, subscription: str) -> None:
        stream = self._subscriptions.pop(subscription, None)
        if stream is not None:
            stream.end()

    # --- receiving ----------------------------------------------------------------------------

    async def _read_loop(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            line = await self.transport.receive()
            try:
                message = _decode(line)
            except msgspec.DecodeError as exc:
                raise MalformedMessage(f"{self.name}: the server sent a line that is not JSON: {line[:200]!r}",
                                       line[:200]) from exc
            if not isinstance(message, dict):
                raise MalformedMessage(f"{self.name}: the server sent JSON that is not an object: {line[:200]!r}",
                                       line[:200])
            self._dispatch(message, line, tg)

    def _dispatch(self, message: dict[str, Any], line: bytes, tg: anyio.abc.TaskGroup) -> None:
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                tg.start_soon(self._answer_request, message)
            else:
                self._notification(method, message.get("params"))
            return
        if "id" in message and ("result" in message or "error" in message):
            self._response(message)
            return
        raise MalformedMessage(f"{self.name}: the server sent a message that is neither a request, a "
                               f"notification nor a response: {line[:200]!r}", line[:200])

    def _response(self, message: dict[str, Any]) -> None:
        request_id = message["id"]
        if request_id is None:
            # An error about no request of ours (a refused connection, a line it could not read):
            # kept as the cause of the close that usually follows.
            self._unrouted_error = error_from_wire(message.get("error"))
            _log.warning("%s: the server sent %s", self.name, self._unrouted_error.message)
            return
        pending = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if pending is None:
            _log.debug("%s: an answer to no waiting request (late, or not ours): %r", self.name, request_id)
            return
        if "error" in message:
            pending.error = error_from_wire(message["error"])
        else:
            pending.result = message["result"]
            if pending.method == "world/subscribe" and isinstance(pending.result, dict):
                # Registered here, by the reader, so no change sent right after the answer is missed.
                self.subscribe(pending.result.get("subscription"))  # type: ignore[arg-type]
        stream = self._event_streams.pop(request_id, None)
        if stream is not None:
            stream.end(pending.error)
        pending.done.set()

    def _notification(self, method: str, params: Any) -> None:
        if not isinstance(params, dict):
            _log.debug("%s: %s without params object ignored", self.name, method)
            return
        if method in ("session/event", "npc/event", "conversation/event"):
            stream = self._event_streams.get(params.get("requestId"))
            if stream is not None and isinstance(params.get("event"), dict):
                stream.put(params["event"])
        elif method == "world/changed":
            stream = self._subscriptions.get(params.get("subscription"))  # type: ignore[arg-type]
            if stream is not None:
                stream.put(params)
        elif method == "tool/cancel":
            scope = self._tool_tasks.get(params.get("id"))
            if scope is not None:
                scope.cancel()
        else:
            _log.debug("%s: notification %s ignored", self.name, method)

    # --- tool calls ---------------------------------------------------------------------------

    async def _answer_request(self, message: dict[str, Any]) -> None:
        """Answer one request of the server: a ``tool/call`` runs its handler; anything else is
        ``-32601``. A handler cancelled by ``tool/cancel`` answers nothing (nobody waits)."""
        request_id = message["id"]
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        if message["method"] != "tool/call":
            await self._reply(request_id, error={"code": -32601, "message": f"Method not found: {message['method']}."})
            return
        call = params.get("call") if isinstance(params.get("call"), dict) else {}
        name = call.get("name")
        handler = self._tools(params)
        if handler is None:
            unknown = f"No handler for tool '{name}' on this client."
            await self._reply(request_id, error={"code": -32000, "message": unknown})
            return
        arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
        with anyio.CancelScope() as scope:
            self._tool_tasks[request_id] = scope
            try:
                output = await _run_handler(handler, arguments)
            except Exception as exc:  # the game's tool failed: the model sees the error output
                _log.debug("%s: tool %s raised %r", self.name, name, exc)
                await self._reply(request_id, error={"code": -32000, "message": str(exc) or type(exc).__name__})
                return
            finally:
                self._tool_tasks.pop(request_id, None)
            await self._reply(request_id, result={"output": output})

    async def _reply(self, request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            message["error"] = error
        else:
            message["result"] = result
        try:
            await self._send(message)
        except ConnectionLost:
            pass  # the connection went while the tool ran: nobody waits for this answer


async def _run_handler(handler: ToolHandler, arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None)):
        return await handler(**arguments)
    result = await anyio.to_thread.run_sync(lambda: handler(**arguments), abandon_on_cancel=True)
    if inspect.isawaitable(result):  # a plain function that returned a coroutine (a lambda, a partial)
        return await result
    return result
