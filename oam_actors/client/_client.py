"""The client: :func:`connect` and :class:`Client`.

Every method of the protocol is one :meth:`Client.call` (``method``, ``params``) under a typed
helper; a family of methods the server gains is a handle class of a few lines (see
docs/client.md, "Adding methods").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from ..errors import OamError, ProtocolError
from ._connection import Connection, ToolHandler
from ._errors import AuthenticationFailed, ConnectError, ConnectionLost, error_from_wire
from ._handles import Conversation, Npc, Session, World
from ._params import UNSET, params_of, pick
from ._results import Decision, decode
from ._transports import Endpoint, endpoint_of
from ._turn import Turn

__all__ = ["Client", "Connecting", "connect"]

_log = logging.getLogger("oam_actors.client")

DEFAULT_TIMEOUT = 600.0
"""Seconds a call waits for its answer by default: longer than anything the server lets a turn
take by default (a tool's 120 s, the dialogue queue's 20 s, a proxy step's 300 s)."""
DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection, authentication included."""
CLOSE_GRACE = 5.0
"""Seconds :meth:`Client.shutdown` waits for the server to end the connection after answering."""


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
                   timeout: float | None = UNSET, cancel: tuple[str, dict[str, Any]] | None = None) -> Any:
        """Send ``method`` with ``params`` and return its ``result`` (JSON as sent).
        ``timeout`` overrides the client's; ``cancel`` is the notification sent when the
        awaiting task is cancelled or times out (``("session/cancel", {"session": "s1"})``)."""
        return await Turn(self, method, params, lambda result: result, cancel=cancel, timeout=timeout)

    async def member(self, method: str, params: Mapping[str, Any] | None, key: str, *,
                     timeout: float | None = UNSET) -> Any:
        """:meth:`call`, then the ``key`` member of its result (``UnexpectedResult`` without it)."""
        return pick(await self.call(method, params, timeout=timeout), key, method)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification (no answer)."""
        await (await self._live()).notify(method, dict(params) if params is not None else None)

    def stream(self, method: str, params: Mapping[str, Any], *, cancel: tuple[str, dict[str, Any]] | None = None,
               timeout: float | None = UNSET) -> Turn[Any]:
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

    async def create_conversation(self, conversation: str | None = None, *, world: str, members: Sequence[str],
                                  player: str | None = None, audience: Sequence[str] | None = None,
                                  location: str | None = None, situation: Any = None, turn_order: str | None = None,
                                  sequence: Sequence[str] | None = None, line_budget: int | None = None,
                                  **extra: Any) -> Conversation:
        """``conversation/create``: ``members`` (2–8 NPC ids of ``world``) talk to each other;
        ``player`` (the player's name) joins in with :meth:`Conversation.say`."""
        result = await self.call("conversation/create", params_of(
            conversation=conversation, world=world, members=members, player=player, audience=audience,
            location=location, situation=situation, turn_order=turn_order, sequence=sequence,
            line_budget=line_budget, **extra))
        return Conversation(self, pick(result, "conversation", "conversation/create"), result.get("warnings", []))

    async def restore_conversation(self, state: Mapping[str, Any], *, conversation: str | None = None) -> Conversation:
        """``conversation/restore`` from :meth:`Conversation.state` (or a whole ``conversation/state`` result)."""
        result = await self.call("conversation/restore", params_of(state=state, conversation=conversation))
        return Conversation(self, pick(result, "conversation", "conversation/restore"))

    def conversation(self, conversation: str) -> Conversation:
        """The handle of an existing conversation (no request is sent)."""
        return Conversation(self, conversation)

    async def list_conversations(self) -> list[dict[str, Any]]:
        return await self.member("conversation/list", None, "conversations")

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
                     deadline_seconds: float | None = None, model: Any = None, timeout: float | None = UNSET,
                     **extra: Any) -> Decision:
        """``decision/decide`` (``extra``: ``toolChoice``, ``coalesce``, ``instructions``,
        ``temperature``, … as the protocol names them, or in snake_case)."""
        params = params_of(situation=situation, options=options, actor=actor, context=context, tools=tools,
                           fallback_option_id=fallback_option_id, deadline_seconds=deadline_seconds, model=model,
                           **extra)
        return decode(await self.call("decision/decide", params, timeout=timeout), Decision, "decision/decide")

    async def decide_many(self, requests: Sequence[Mapping[str, Any]], *, timeout: float | None = UNSET,
                          **extra: Any) -> list[Decision | OamError]:
        """``decision/decideMany``: one :class:`Decision` or the error (not raised) per request,
        in request order."""
        method = "decision/decideMany"
        results = await self.member(method, {"requests": list(requests), **params_of(**extra)}, "results",
                                    timeout=timeout)
        return [error_from_wire(item["error"]) if "error" in item else decode(item, Decision, method)
                for item in results]

    async def generate_content(self, prompt: str, schema: Any, *, timeout: float | None = UNSET,
                               **extra: Any) -> Any:
        """``content/generate``: the ``content`` value."""
        return await self.member("content/generate", params_of(prompt=prompt, schema=schema, **extra), "content",
                                 timeout=timeout)
