"""The client: :func:`connect`, :class:`Client`, and the handles of sessions, NPCs and worlds.

Every method of the protocol is one :meth:`Client.call` (``method``, ``params``) under a typed
helper; a family of methods the server gains is a handle class of a few lines (see
docs/client.md, "Adding methods").
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc

from ..errors import OamError, ProtocolError
from ._connection import Connection, EventStream, Pending, ToolHandler
from ._errors import (
    AuthenticationFailed,
    ClientError,
    ConnectError,
    ConnectionLost,
    RequestTimeout,
    UnexpectedResult,
    error_from_wire,
)
from ._results import Bark, Decision, NpcReply, SessionReply, decode
from ._transports import Endpoint, endpoint_of

__all__ = ["Client", "Connecting", "Npc", "Owner", "pick", "Session", "Subscription", "Turn", "World", "connect"]

_log = logging.getLogger("oam_actors.client")

DEFAULT_TIMEOUT = 600.0
"""Seconds a call waits for its answer by default: longer than anything the server lets a turn
take by default (a tool's 120 s, the dialogue queue's 20 s, a proxy step's 300 s)."""
DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection, authentication included."""
CLOSE_GRACE = 5.0
"""Seconds :meth:`Client.shutdown` waits for the server to end the connection after answering."""
CANCEL_GRACE = 2.0
"""Seconds a cancelled call spends sending its ``…/cancel`` before it gives up on it."""

R = TypeVar("R")
_UNSET: Any = object()


def pick(result: Any, key: str, method: str) -> Any:
    """``result[key]``; :class:`UnexpectedResult` when the result is not an object holding it."""
    if not isinstance(result, dict) or key not in result:
        raise UnexpectedResult(method, f"no '{key}' in the result", result)
    return result[key]


def _camel(name: str) -> str:
    if name.endswith("_id"):  # fallbackOptionID: the protocol spells ids in capitals
        return _camel(name[:-3]) + "ID"
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def params_of(**fields: Any) -> dict[str, Any]:
    """Protocol params from keyword arguments: snake_case names become the protocol's camelCase,
    ``None`` is left out. A name already in camelCase passes unchanged (``**extra``)."""
    return {_camel(name): value for name, value in fields.items() if value is not None}


def connect(
    target: str | Endpoint,
    *,
    token: str | None = None,
    args: Sequence[str] = (),
    timeout: float | None = DEFAULT_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    reconnect: bool = False,
) -> Connecting:
    """Connect to a server: ``async with connect(…) as client:``; leaving the block closes the
    connection.

    ``target`` is ``"tcp://HOST:PORT"`` (``oam-actors serve --tcp``), ``"ws://HOST:PORT/ws"``
    (``--ws``), ``"stdio"`` (starts ``oam-actors stdio ARGS`` as a child process; ``args`` are
    its options) or an :class:`~oam_actors.client.Endpoint`. ``token`` authenticates (TCP: the
    ``auth`` message; WebSocket: the ``Authorization`` header). ``timeout`` is every call's
    default (``None``: wait as long as the connection lives); ``connect_timeout`` bounds opening
    and authenticating. With ``reconnect``, a call made after the connection was lost opens a new
    one (authenticating again) instead of raising; see :class:`Client` for what survives.

    Entering raises :class:`~oam_actors.client.ConnectError` (or ``AuthenticationFailed``) when
    the connection cannot be opened. Leaving normally waits for the connection to close (a
    ``stdio`` server or an in-process bridge finishes the requests in flight); leaving with an
    exception cancels what is left. The block's own exception propagates as it is.
    """
    return Connecting(endpoint_of(target, args), token=token, timeout=timeout, connect_timeout=connect_timeout,
                      reconnect=reconnect)


class Connecting:
    """What :func:`connect` returns: an async context manager yielding the :class:`Client`."""

    def __init__(self, endpoint: Endpoint, **options: Any) -> None:
        self._endpoint = endpoint
        self._options = options
        self._task_group: anyio.abc.TaskGroup | None = None
        self._client: Client | None = None

    async def __aenter__(self) -> Client:
        # The task group is entered by hand so that the block's exception is not wrapped in an
        # exception group on the way out (__aexit__ never hands it to the task group).
        task_group = self._task_group = anyio.create_task_group()
        await task_group.__aenter__()
        try:
            self._client = Client(self._endpoint, task_group, **self._options)
            await self._client._reopen()
        except BaseException:
            await self._stop(graceful=False)
            raise
        return self._client

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._stop(graceful=exc_info[0] is None)

    async def _stop(self, *, graceful: bool) -> None:
        assert self._task_group is not None
        if self._client is not None:
            self._client._closed = True
        if not graceful:
            self._task_group.cancel_scope.cancel()
        with anyio.CancelScope(shield=not graceful):
            if self._client is not None:
                await self._client.aclose()
        await self._task_group.__aexit__(None, None, None)


class Client:
    """One client of one server, made by :func:`connect`; use it from one event loop.

    **Calls.** :meth:`call` sends any method and returns its ``result``; the helpers below wrap
    it. A server error is raised as :class:`~oam_actors.errors.AgentError` or
    :class:`~oam_actors.errors.ProtocolError` (``.code``, ``.message``, ``.data()``); a problem
    between the peers as a :class:`~oam_actors.client.ClientError`. Every call ends: with its
    answer, its timeout (``RequestTimeout``) or the end of the connection (``ConnectionLost``).

    **Cancelling** the task that awaits a turn (``respond``, ``talk``, their streams) sends the
    owner's cancel (``session/cancel``, ``npc/cancel``), which cancels that session's or NPC's
    running and queued work, then re-raises the cancellation. Other calls are not cancellable
    on the server: the client stops waiting and drops the late answer.

    **Tools.** The server's ``tool/call`` runs the handler registered for the tool's name on the
    session or NPC that called it (:meth:`Session.add_tool`), else the client's own
    (:meth:`add_tool`, used by decisions and content too). A tool without a handler answers an
    error output; ``tool/cancel`` cancels the running handler (an async one stops at its next
    await; a plain function's thread runs on, its answer is dropped).

    **Reconnecting** (``reconnect=True``, or :meth:`reconnect`): the calls pending when the
    connection was lost fail with ``ConnectionLost`` (they are not resent: their outcome is
    unknown); the new connection authenticates with the same token and nothing else is sent.
    What survives is on the client: tool handlers and handles (ids). Sessions, NPCs, worlds and
    subscriptions of the old connection are gone on a server that keeps objects per connection
    (the default; with ``serve --share-objects`` a tenant's objects stay), and subscriptions'
    iterators end with ``ConnectionLost`` either way.
    """

    def __init__(self, endpoint: Endpoint, task_group: anyio.abc.TaskGroup, *, token: str | None,
                 timeout: float | None, connect_timeout: float, reconnect: bool) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.auto_reconnect = reconnect
        self.reconnects = 0
        """Connections opened after the first."""
        self.tenant: str | None = None
        """The tenant the server named for the token (TCP ``auth``), if any."""
        self._token = token
        self._task_group = task_group
        self._connection: Connection | None = None
        self._opening = anyio.Lock()
        self._closed = False
        self._tools: dict[str, ToolHandler] = {}
        self._owner_tools: dict[tuple[str, str], dict[str, ToolHandler]] = {}

    # --- connection -------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connection is not None and self._connection.lost is None

    async def _reopen(self) -> Connection:
        if self._connection is not None:
            await self._connection.aclose()
        try:
            with anyio.fail_after(self.connect_timeout):
                connection = await self._open()
        except TimeoutError as exc:
            raise ConnectError(f"{self.endpoint}: no connection within {self.connect_timeout:g} s") from exc
        self._connection = connection
        return connection

    async def _open(self) -> Connection:
        transport = await self.endpoint.open(self._task_group, self._token)
        connection = Connection(transport, self._handler_for, str(self.endpoint))
        await self._task_group.start(connection.run)
        if self._token is not None and self.endpoint.auth_in_band:
            try:
                answer = await connection.request("auth", {"token": self._token}, timeout=None)
            except ProtocolError as exc:
                await connection.aclose()
                reason = str(exc.extra.get("auth", "failed"))
                raise AuthenticationFailed(f"{self.endpoint}: {exc.message}", reason) from exc
            except ConnectionLost as exc:
                cause = f"{self.endpoint}: the connection ended during authentication ({exc.cause})"
                raise ConnectError(cause) from exc
            self.tenant = answer.get("tenant") if isinstance(answer, dict) else None
        return connection

    async def _live(self) -> Connection:
        """The open connection; with ``reconnect``, a new one when it was lost."""
        connection = self._connection
        assert connection is not None
        if connection.lost is None:
            return connection
        if self._closed or not self.auto_reconnect:
            raise connection.lost.fresh()
        async with self._opening:
            if self._connection is connection:  # nobody reconnected while this call waited
                _log.info("%s: reconnecting after: %s", self.endpoint, connection.lost.cause)
                await self._reopen()
                self.reconnects += 1
        assert self._connection is not None
        return self._connection

    async def wait_closed(self) -> None:
        """Wait until the current connection has ended (the server closed it, or it was lost)."""
        assert self._connection is not None
        await self._connection.closed.wait()

    async def reconnect(self) -> None:
        """Close the connection (pending calls fail with ``ConnectionLost``) and open a new one,
        authenticating again. Works with or without ``reconnect=True``."""
        async with self._opening:
            await self._reopen()
            self.reconnects += 1

    async def aclose(self) -> None:
        """Close the connection (``stdio``: the server finishes what it has and exits)."""
        self._closed = True
        if self._connection is not None:
            await self._connection.aclose()

    # --- generic calls ------------------------------------------------------------------------

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   timeout: float | None = _UNSET, cancel: tuple[str, dict[str, Any]] | None = None) -> Any:
        """Send ``method`` with ``params`` and return its ``result`` (JSON as sent).
        ``timeout`` overrides the client's; ``cancel`` is the notification sent when the
        awaiting task is cancelled or times out (``("session/cancel", {"session": "s1"})``)."""
        return await Turn(self, method, params, lambda result: result, cancel=cancel, timeout=timeout)

    async def member(self, method: str, params: Mapping[str, Any] | None, key: str, *,
                     timeout: float | None = _UNSET) -> Any:
        """:meth:`call`, then the ``key`` member of its result (``UnexpectedResult`` without it)."""
        return pick(await self.call(method, params, timeout=timeout), key, method)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification (no answer)."""
        await (await self._live()).notify(method, dict(params) if params is not None else None)

    def stream(self, method: str, params: Mapping[str, Any], *, cancel: tuple[str, dict[str, Any]] | None = None,
               timeout: float | None = _UNSET) -> Turn[Any]:
        """A :class:`Turn` of ``method`` sent with ``"stream": true``: its events, then its result."""
        return Turn(self, method, {**params, "stream": True}, lambda result: result, cancel=cancel, timeout=timeout,
                    events=True)

    # --- tools --------------------------------------------------------------------------------

    def add_tool(self, name: str, handler: ToolHandler) -> None:
        """Answer ``tool/call`` for ``name`` with ``handler`` when the caller has no handler of
        its own for it (decisions and content have none). Replaces an earlier one."""
        self._tools[name] = handler

    def tool(self, name: str | None = None) -> Callable[[ToolHandler], ToolHandler]:
        """Decorator form of :meth:`add_tool` (the name defaults to the function's)."""
        def register(handler: ToolHandler) -> ToolHandler:
            self.add_tool(name or handler.__name__, handler)
            return handler
        return register

    def _add_owner_tools(self, kind: str, owner: str, handlers: Mapping[str, ToolHandler] | None) -> None:
        if handlers:
            self._owner_tools.setdefault((kind, owner), {}).update(handlers)

    def _handler_for(self, params: dict[str, Any]) -> ToolHandler | None:
        call = params.get("call")
        name = call.get("name") if isinstance(call, dict) else None
        for kind in ("session", "npc"):
            owner = params.get(kind)
            if isinstance(owner, str):
                handler = self._owner_tools.get((kind, owner), {}).get(name)  # type: ignore[arg-type]
                if handler is not None:
                    return handler
        return self._tools.get(name)  # type: ignore[arg-type]

    # --- core methods -------------------------------------------------------------------------

    async def initialize(self, client: Mapping[str, Any] | None = None, *,
                         protocol_version: str = "1.0") -> dict[str, Any]:
        """``initialize``: the server's name, version, capabilities and model availability."""
        return await self.call("initialize", params_of(client=client, protocol_version=protocol_version))

    async def ping(self) -> None:
        await self.call("ping")

    async def model_availability(self) -> dict[str, Any]:
        return await self.call("model/availability")

    async def model_status(self) -> dict[str, Any]:
        """``model/status`` (servers with a device pool or a model that reports statistics)."""
        return await self.call("model/status")

    async def validate_schema(self, schema: Any, *, name: str | None = None) -> dict[str, Any]:
        return await self.call("schema/validate", params_of(schema=schema, name=name))

    async def validate_tools(self, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return await self.call("tools/validate", {"tools": list(tools)})

    async def shutdown(self) -> None:
        """``shutdown``: the server cancels this connection's work, answers, and ends the
        connection (a ``stdio`` server exits); returns once it has ended, or after
        ``CLOSE_GRACE`` seconds if the server keeps it open."""
        await self.call("shutdown")
        with anyio.move_on_after(CLOSE_GRACE):
            await self.wait_closed()

    async def create_session(self, session: str | None = None, *, instructions: str | None = None,
                             tools: Sequence[Mapping[str, Any]] | None = None, options: Mapping[str, Any] | None = None,
                             history: Any = None, model: Any = None,
                             tool_handlers: Mapping[str, ToolHandler] | None = None, **extra: Any) -> Session:
        """``session/create``; ``tool_handlers`` answer this session's tool calls by name."""
        result = await self.call("session/create", params_of(
            session=session, instructions=instructions, tools=tools, options=options, history=history, model=model,
            **extra))
        handle = Session(self, pick(result, "session", "session/create"), result.get("warnings", []))
        self._add_owner_tools("session", handle.id, tool_handlers)
        return handle

    def session(self, session: str) -> Session:
        """The handle of an existing session (no request is sent)."""
        return Session(self, session)

    async def list_sessions(self) -> list[dict[str, Any]]:
        return await self.member("session/list", None, "sessions")

    # --- game methods -------------------------------------------------------------------------

    async def create_npc(self, npc: str | None = None, *, persona: Mapping[str, Any],
                         tools: Sequence[Mapping[str, Any]] | None = None, world: str | None = None,
                         memory: Mapping[str, Any] | None = None, options: Mapping[str, Any] | None = None,
                         model: Any = None, tool_handlers: Mapping[str, ToolHandler] | None = None,
                         **extra: Any) -> Npc:
        """``npc/create``; ``tool_handlers`` answer this NPC's client tool calls by name."""
        result = await self.call("npc/create", params_of(
            npc=npc, persona=persona, tools=tools, world=world, memory=memory, options=options, model=model, **extra))
        return self._npc_created(result, tool_handlers)

    async def restore_npc(self, state: Mapping[str, Any], *, npc: str | None = None, model: Any = None,
                          tool_handlers: Mapping[str, ToolHandler] | None = None, **extra: Any) -> Npc:
        """``npc/restore``; ``tools``, ``options`` and ``world`` go in ``extra`` (a present key,
        even ``None``, wins over the saved one, so they pass through as given)."""
        result = await self.call("npc/restore", {**params_of(state=state, npc=npc, model=model), **extra})
        return self._npc_created(result, tool_handlers)

    def _npc_created(self, result: dict[str, Any], tool_handlers: Mapping[str, ToolHandler] | None) -> Npc:
        handle = Npc(self, pick(result, "npc", "npc/create"), result.get("warnings", []), result.get("tools", []))
        self._add_owner_tools("npc", handle.id, tool_handlers)
        return handle

    def npc(self, npc: str) -> Npc:
        """The handle of an existing NPC (no request is sent)."""
        return Npc(self, npc)

    async def list_npcs(self) -> list[dict[str, Any]]:
        return await self.member("npc/list", None, "npcs")

    async def create_world(self, world: str | None = None, *, state: Mapping[str, Any] | None = None) -> World:
        result = await self.call("world/create", params_of(world=world, state=state))
        return World(self, pick(result, "world", "world/create"))

    def world(self, world: str) -> World:
        """The handle of an existing world (no request is sent)."""
        return World(self, world)

    async def list_worlds(self) -> list[dict[str, Any]]:
        return await self.member("world/list", None, "worlds")

    async def unsubscribe(self, subscription: str) -> dict[str, Any]:
        """``world/unsubscribe``; its :class:`Subscription` iterator ends."""
        result = await self.call("world/unsubscribe", {"subscription": subscription})
        if self._connection is not None:
            self._connection.unsubscribe(subscription)
        return result

    async def decide(self, situation: str, options: Sequence[Any], *, actor: Any = None, context: Any = None,
                     tools: Sequence[Mapping[str, Any]] | None = None, fallback_option_id: str | None = None,
                     deadline_seconds: float | None = None, model: Any = None, timeout: float | None = _UNSET,
                     **extra: Any) -> Decision:
        """``decision/decide`` (``extra``: ``toolChoice``, ``coalesce``, ``instructions``,
        ``temperature``, … as the protocol names them, or in snake_case)."""
        params = params_of(situation=situation, options=options, actor=actor, context=context, tools=tools,
                           fallback_option_id=fallback_option_id, deadline_seconds=deadline_seconds, model=model,
                           **extra)
        return decode(await self.call("decision/decide", params, timeout=timeout), Decision, "decision/decide")

    async def decide_many(self, requests: Sequence[Mapping[str, Any]], *, timeout: float | None = _UNSET,
                          **extra: Any) -> list[Decision | OamError]:
        """``decision/decideMany``: one :class:`Decision` or the error (not raised) per request,
        in request order."""
        method = "decision/decideMany"
        results = await self.member(method, {"requests": list(requests), **params_of(**extra)}, "results",
                                    timeout=timeout)
        return [error_from_wire(item["error"]) if "error" in item else decode(item, Decision, method)
                for item in results]

    async def generate_content(self, prompt: str, schema: Any, *, timeout: float | None = _UNSET,
                               **extra: Any) -> Any:
        """``content/generate``: the ``content`` value."""
        return await self.member("content/generate", params_of(prompt=prompt, schema=schema, **extra), "content",
                                 timeout=timeout)


class Turn(Generic[R]):
    """One request in flight: ``await turn`` for its result; ``async for event in turn`` (or
    ``turn.events()``) for its events first, for streamed turns. The request is sent when the
    turn is first awaited or iterated. The timeout counts from then, for events and result alike.
    Cancelling the task that awaits or iterates it sends the turn's cancel notification."""

    def __init__(self, client: Client, method: str, params: Mapping[str, Any] | None, decode_as: Callable[[Any], R],
                 *, cancel: tuple[str, dict[str, Any]] | None, timeout: float | None, events: bool = False) -> None:
        self._client = client
        self.method = method
        self._params = dict(params) if params is not None else None
        self._decode = decode_as
        self._cancel = cancel
        self._timeout = client.timeout if timeout is _UNSET else timeout
        self._events = EventStream() if events else None
        self._pending: Pending | None = None
        self._connection: Connection | None = None
        self._deadline = math.inf
        self._sent: anyio.Event | None = None  # set once the request is sent (or failed to be)

    async def _start(self) -> None:
        """Send the request once, whoever (awaiting, iterating) gets here first."""
        if self._sent is not None:
            await self._sent.wait()
            if self._pending is None:
                raise ConnectionLost(f"{self.method} could not be sent")
            return
        self._sent = anyio.Event()
        try:
            self._connection = await self._client._live()
            if self._timeout is not None:
                self._deadline = anyio.current_time() + self._timeout
            self._pending = await self._connection.start(self.method, self._params, self._events)
        finally:
            self._sent.set()

    @contextlib.contextmanager
    def _cancelling(self) -> Generator[None]:
        try:
            yield
        except BaseException as exc:
            sent = self._pending is not None
            if sent and self._cancel is not None and isinstance(exc, (anyio.get_cancelled_exc_class(), RequestTimeout)):
                self._client._task_group.start_soon(self._send_cancel)
            raise

    async def _send_cancel(self) -> None:
        assert self._cancel is not None and self._connection is not None
        with anyio.move_on_after(CANCEL_GRACE), contextlib.suppress(ClientError):
            await self._connection.notify(*self._cancel)

    def _remaining(self) -> float | None:
        return None if self._timeout is None else max(0.0, self._deadline - anyio.current_time())

    async def result(self) -> R:
        """The decoded result (the events, if not read, are dropped)."""
        with self._cancelling():
            await self._start()
            assert self._connection is not None and self._pending is not None
            raw = await self._connection.wait(self._pending, timeout=self._remaining())
        return self._decode(raw)

    def __await__(self) -> Generator[Any, None, R]:
        return self.result().__await__()

    def events(self) -> Turn[R]:
        return self

    def __aiter__(self) -> Turn[R]:
        if self._events is None:
            raise TypeError(f"{self.method} was not sent as a stream")
        return self

    async def __anext__(self) -> dict[str, Any]:
        """The next event (``event`` of ``session/event`` / ``npc/event``); the iteration ends
        when the answer arrives, or raises ``ConnectionLost``. A server error is raised by
        ``await turn``, not here."""
        assert self._events is not None
        with self._cancelling():
            await self._start()
            remaining = self._remaining()
            with anyio.move_on_after(math.inf if remaining is None else remaining) as waited:
                try:
                    return await self._events.__anext__()
                except OamError:
                    raise StopAsyncIteration from None
            assert waited.cancelled_caught
            raise RequestTimeout(self.method, self._timeout)  # type: ignore[arg-type]


class Owner:
    """What a session's and an NPC's handles share: an id the server knows them by (``kind`` is
    the param that carries it), turns cancelled with ``<kind>/cancel``, tools answered per owner.
    A handle for another family of objects (conversations) subclasses it in a few lines."""

    kind = ""

    def __init__(self, client: Client, owner: str, warnings: list[str] | None = None) -> None:
        self.client = client
        self.id = owner
        self.warnings = warnings or []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"

    def _params(self, **fields: Any) -> dict[str, Any]:
        return {self.kind: self.id, **params_of(**fields)}

    def _turn(self, method: str, result_type: type[R], params: dict[str, Any], timeout: float | None,
              *, stream: bool) -> Turn[R]:
        """A cancellable request of this owner (``<kind>/cancel`` when the awaiting task is cancelled)."""
        cancel = (f"{self.kind}/cancel", {self.kind: self.id})
        return Turn(self.client, method, {**params, "stream": True} if stream else params,
                    lambda result: decode(result, result_type, method), cancel=cancel, timeout=timeout, events=stream)

    def add_tool(self, name: str, handler: ToolHandler) -> None:
        """Answer this owner's ``tool/call`` for ``name`` with ``handler``."""
        self.client._add_owner_tools(self.kind, self.id, {name: handler})

    async def cancel(self) -> int:
        """``<kind>/cancel``: how many operations were cancelled."""
        return await self.client.member(f"{self.kind}/cancel", self._params(), "cancelled")

    async def delete(self) -> None:
        await self.client.call(f"{self.kind}/delete", self._params())


class Session(Owner):
    """A session's handle: ``id``, the create ``warnings``, and its methods."""

    kind = "session"

    async def respond(self, prompt: str, *, schema: Any = None, timeout: float | None = _UNSET,
                      **extra: Any) -> SessionReply:
        """``session/respond`` (``extra``: ``tool_choice``, ``max_tool_rounds``,
        ``max_tool_calls``, ``enabled_tools``)."""
        params = self._params(prompt=prompt, schema=schema, **extra)
        return await self._turn("session/respond", SessionReply, params, timeout, stream=False)

    def respond_stream(self, prompt: str, *, schema: Any = None, timeout: float | None = _UNSET,
                       **extra: Any) -> Turn[SessionReply]:
        """``session/respond`` streamed: iterate the :class:`Turn` for its ``session/event``
        events (``modelStep``, ``text``, ``partial``, ``toolCallStarted``, ``toolCallCompleted``),
        then ``await`` it for the :class:`SessionReply`."""
        params = self._params(prompt=prompt, schema=schema, **extra)
        return self._turn("session/respond", SessionReply, params, timeout, stream=True)

    async def reset(self) -> None:
        await self.client.call("session/reset", self._params())

    async def set_instructions(self, instructions: str | None) -> None:
        await self.client.call("session/setInstructions", {"session": self.id, "instructions": instructions})

    async def set_context_note(self, note: str | None) -> None:
        await self.client.call("session/setContextNote", {"session": self.id, "note": note})

    async def set_tools(self, tools: Sequence[Mapping[str, Any]]) -> list[str]:
        """``session/setTools``: the warnings."""
        return await self.client.member("session/setTools", self._params(tools=list(tools)), "warnings")

    async def compact(self, *, keep_recent_turns: int | None = None,
                      summary_instructions: str | None = None) -> str | None:
        """``session/compact``: the summary (``None`` when there was nothing to compact)."""
        params = self._params(keep_recent_turns=keep_recent_turns, summary_instructions=summary_instructions)
        return await self.client.member("session/compact", params, "summary")

    async def transcript(self) -> dict[str, Any]:
        """``session/transcript``: the transcript document (pass it as ``history`` to restore)."""
        return await self.client.member("session/transcript", self._params(), "transcript")


class Npc(Owner):
    """An NPC's handle: ``id``, the create ``warnings`` and ``tools`` (the names the model
    sees), and its methods."""

    kind = "npc"

    def __init__(self, client: Client, npc: str, warnings: list[str] | None = None,
                 tools: list[Any] | None = None) -> None:
        super().__init__(client, npc, warnings)
        self.tools = tools or []

    async def talk(self, line: str, *, context: Any = None, timeout: float | None = _UNSET, **extra: Any) -> NpcReply:
        """``npc/talk`` (``extra``: ``tool_choice``, ``deadline_seconds``, ``coalesce``)."""
        return await self._turn("npc/talk", NpcReply, self._params(line=line, context=context, **extra), timeout,
                                stream=False)

    def talk_stream(self, line: str, *, context: Any = None, timeout: float | None = _UNSET,
                    **extra: Any) -> Turn[NpcReply]:
        """``npc/talk`` streamed: its ``npc/event`` events (``emotion``, ``lineDelta``,
        ``lineReset``, ``toolCallStarted``, ``toolCallCompleted``), then the :class:`NpcReply`."""
        return self._turn("npc/talk", NpcReply, self._params(line=line, context=context, **extra), timeout,
                          stream=True)

    async def bark(self, situation: str | None = None, *, deadline_seconds: float | None = None,
                   timeout: float | None = _UNSET, **extra: Any) -> Bark:
        """``npc/bark`` (not cancellable on the server: cancelling only stops waiting)."""
        params = self._params(situation=situation, deadline_seconds=deadline_seconds, **extra)
        return decode(await self.client.call("npc/bark", params, timeout=timeout), Bark, "npc/bark")

    async def state(self, *, settle: bool = True) -> dict[str, Any]:
        """``npc/state``: the saved state (pass it to :meth:`Client.restore_npc`)."""
        return await self.client.member("npc/state", self._params(settle=settle), "state")

    async def update(self, **fields: Any) -> list[str]:
        """``npc/update`` (``persona``, ``options``, ``memory``: merge patches; ``tools``): the
        warnings. A field given as ``None`` is sent as ``null`` (it removes or clears)."""
        return await self.client.member("npc/update", {"npc": self.id, **fields}, "warnings")

    async def reset(self, *, clear_memory: bool = False) -> None:
        await self.client.call("npc/reset", self._params(clear_memory=clear_memory))


class World:
    """A world's handle: ``id`` and its methods (results as the protocol sends them)."""

    def __init__(self, client: Client, world: str) -> None:
        self.client = client
        self.id = world

    def __repr__(self) -> str:
        return f"World({self.id!r})"

    async def _call(self, method: str, **fields: Any) -> dict[str, Any]:
        return await self.client.call(method, {"world": self.id, **fields})

    async def _member(self, method: str, key: str, **fields: Any) -> Any:
        return await self.client.member(method, {"world": self.id, **fields}, key)

    async def get(self, path: str = "") -> Any:
        """``world/get``: the value at ``path`` (``None`` when absent; see ``exists`` in
        ``client.call("world/get", …)`` to tell a null from nothing)."""
        return await self._member("world/get", "value", path=path)

    async def set(self, path: str, value: Any) -> int:
        """``world/set``: the new version."""
        return await self._member("world/set", "version", path=path, value=value)

    async def merge(self, patch: Mapping[str, Any], *, path: str = "") -> int:
        """``world/merge`` (RFC 7386): the new version."""
        return await self._member("world/merge", "version", patch=patch, path=path)

    async def remove(self, path: str) -> dict[str, Any]:
        return await self._call("world/remove", path=path)

    async def snapshot(self) -> dict[str, Any]:
        """``world/snapshot``: the whole state document."""
        return await self._member("world/snapshot", "state")

    async def delete(self) -> None:
        await self._call("world/delete")

    async def subscribe(self, path: str = "") -> Subscription:
        """``world/subscribe``: iterate the :class:`Subscription` for its ``world/changed``."""
        connection = await self.client._live()
        result = await self._call("world/subscribe", path=path)
        subscription = pick(result, "subscription", "world/subscribe")
        return Subscription(self.client, subscription, connection.subscribe(subscription))


class Subscription:
    """``world/changed`` notifications of one subscription (``world``, ``subscription``,
    ``path``, ``oldValue``?, ``newValue``?), in arrival order, buffered from the moment the
    ``world/subscribe`` answer is read. Ends after :meth:`unsubscribe`; raises
    ``ConnectionLost`` when the connection ends."""

    def __init__(self, client: Client, subscription: str, stream: EventStream) -> None:
        self.client = client
        self.id = subscription
        self._stream = stream

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._stream

    async def unsubscribe(self) -> None:
        await self.client.unsubscribe(self.id)
