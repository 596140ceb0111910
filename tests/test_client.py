"""The Python client (``oam_actors.client``) against real servers: ``oam-actors serve`` over TCP
and WebSocket, ``oam-actors stdio`` as a child process, and small raw socket servers that
misbehave (close mid-call, send a malformed line, never answer).

Timeouts here are small so a test that must time out does so quickly; nothing asserts how long
anything took.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.abc
import pytest

from oam_actors import AgentError, ErrorCode, ProtocolError
from oam_actors.client import (
    AuthenticationFailed,
    Client,
    ConnectError,
    ConnectionLost,
    MalformedMessage,
    RequestTimeout,
    SessionReply,
    UnexpectedResult,
    connect,
)
from serve_process import OPEN_GATE, TOOL_ROUND, ServeProcess, scripted

TOKEN = "s3cret-token"
HANG_GUARD = 30.0  # only to fail a hung test instead of blocking the suite


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with ServeProcess(["--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--model", "scripted",
                       "--token", f"alice={TOKEN}"]) as process:
        yield process


def target_of(server: ServeProcess, transport: str) -> dict[str, Any]:
    if transport == "tcp":
        host, port = server.tcp_address  # type: ignore[misc]
        return {"target": f"tcp://{host}:{port}", "token": TOKEN}
    if transport == "ws":
        return {"target": server.ws_url, "token": TOKEN}
    return {"target": "stdio", "args": ["--model", "scripted"]}


TRANSPORTS = ["tcp", "ws", "stdio"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_turn_with_sync_and_async_tool_handlers_over_each_transport(server: ServeProcess, transport: str) -> None:
    seen: list[str] = []

    def open_gate(gate: str) -> str:  # a plain function: runs in a worker thread
        seen.append(gate)
        return f"The {gate} gate opened."

    async def check_inventory(item: str) -> dict[str, Any]:
        await anyio.sleep(0)
        return {"item": item, "stock": 3}

    inventory = {"name": "check_inventory", "description": "Stock of an item.",
                 "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}
    steps = [*TOOL_ROUND[:1], {"toolCalls": [{"name": "check_inventory", "arguments": {"item": "ale"}}]},
             {"template": "{toolOutputs}"}]
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, transport)) as client:
            info = await client.initialize({"name": "test"})
            assert info["server"]["name"] == "oam-actors"
            session = await client.create_session(model=scripted(steps), tools=[OPEN_GATE, inventory],
                                                  tool_handlers={"open_gate": open_gate})
            client.add_tool("check_inventory", check_inventory)  # the client-wide handler
            reply = await session.respond("Let me in and tell me about the ale.")
    assert isinstance(reply, SessionReply) and reply.session == session.id
    assert seen == ["north"]
    assert [(r.call.name, r.output, r.is_error) for r in reply.tool_calls] == [
        ("open_gate", "The north gate opened.", False),
        ("check_inventory", {"item": "ale", "stock": 3}, False),
    ]
    assert reply.text == 'The north gate opened.\n{"item":"ale","stock":3}'
    if transport == "tcp":
        assert client.tenant == "alice"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_events_stream_before_the_result(server: ServeProcess, transport: str) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, transport)) as client:
            session = await client.create_session(model=scripted([*TOOL_ROUND]), tools=[OPEN_GATE],
                                                  tool_handlers={"open_gate": lambda gate: "Opened."})
            turn = session.respond_stream("Open it.")
            events = [event async for event in turn]
            reply = await turn
    kinds = [event["type"] for event in events]
    assert kinds.count("modelStep") >= 2 and "toolCallStarted" in kinds and "toolCallCompleted" in kinds
    after_reset = kinds[len(kinds) - 1 - kinds[::-1].index("modelStep"):]
    assert "text" in after_reset
    deltas = "".join(e["delta"] for e in events if e["type"] == "text")
    assert deltas == reply.text == "Done: Opened."


async def test_handler_errors_and_missing_handlers_become_tool_error_outputs(server: ServeProcess) -> None:
    def jammed(gate: str) -> str:
        raise RuntimeError(f"The {gate} gate is jammed.")

    steps = [*TOOL_ROUND[:1], *TOOL_ROUND[:1], {"template": "{toolOutputs}"}]
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "tcp")) as client:
            jammed_session = await client.create_session(model=scripted(steps), tools=[OPEN_GATE],
                                                         tool_handlers={"open_gate": jammed})
            nobody = await client.create_session(model=scripted(TOOL_ROUND), tools=[OPEN_GATE])
            first = await jammed_session.respond("Open.")
            second = await nobody.respond("Open.")
    assert [(r.output, r.is_error) for r in first.tool_calls] == [("The north gate is jammed.", True)] * 2
    assert [(r.output, r.is_error) for r in second.tool_calls] == [("No handler for tool 'open_gate' on this client.", True)]


class StuckTool:
    """An ``open_gate`` handler that never finishes on its own: ``called`` when it starts,
    ``cancelled`` when the server's ``tool/cancel`` (a tool timeout, a cancelled turn) stops it."""

    def __init__(self) -> None:
        self.called, self.cancelled = anyio.Event(), anyio.Event()

    async def __call__(self, gate: str) -> str:
        self.called.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.set()
        return "never"


async def test_tool_cancel_cancels_a_running_async_handler(server: ServeProcess) -> None:
    open_gate = StuckTool()  # stopped only by the tool/cancel the server sends at the tool's timeout
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "ws")) as client:
            session = await client.create_session(model=scripted(TOOL_ROUND), tools=[OPEN_GATE],
                                                  options={"toolTimeoutSeconds": 0.2},
                                                  tool_handlers={"open_gate": open_gate})
            reply = await session.respond("Open.")
            await open_gate.cancelled.wait()
    [record] = reply.tool_calls
    assert record.is_error and "timed out" in record.output


async def test_cancelling_the_awaiting_task_cancels_the_turn_on_the_server(server: ServeProcess) -> None:
    open_gate = StuckTool()  # stopped by the server's tool/cancel, sent because session/cancel ended the turn
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "tcp")) as client:
            session = await client.create_session(model=scripted([*TOOL_ROUND, {"text": "Next turn."}]),
                                                  tools=[OPEN_GATE], tool_handlers={"open_gate": open_gate})
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.respond, "Open.")
                await open_gate.called.wait()
                tg.cancel_scope.cancel()
            await open_gate.cancelled.wait()
            assert (await session.transcript())["transcript"]["entries"] == []  # the cancelled turn left no trace
            [listed] = [s for s in await client.list_sessions() if s["session"] == session.id]
            assert listed["busy"] is False


async def test_cancelling_an_npc_s_streamed_talk_mid_iteration_sends_npc_cancel(server: ServeProcess) -> None:
    open_gate = StuckTool()
    steps = [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"text": "Open."}]
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "ws")) as client:
            gorm = await client.create_npc(persona={"name": "Gorm"}, tools=[OPEN_GATE], model=scripted(steps),
                                           tool_handlers={"open_gate": open_gate})
            seen = []
            with anyio.CancelScope() as scope:
                async for event in gorm.talk_stream("Open the gate."):
                    seen.append(event["type"])
                    if event["type"] == "toolCallStarted":
                        await open_gate.called.wait()
                        scope.cancel()  # the task iterating the turn goes away
            await open_gate.cancelled.wait()  # npc/cancel ended the turn, and tool/cancel the handler
            subscription = await (await client.create_world()).subscribe()
            [listed] = await client.list_npcs()
        with pytest.raises(ConnectionLost):
            await subscription.__aiter__().__anext__()  # the connection ended: so did its subscriptions
    assert "toolCallStarted" in seen
    assert (listed["turnCount"], listed["busy"]) == (0, False)


async def test_a_turn_that_times_out_is_cancelled_on_the_server(server: ServeProcess) -> None:
    open_gate = StuckTool()  # stopped by the tool/cancel that follows the session/cancel of the timeout
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "stdio")) as client:
            session = await client.create_session(model=scripted(TOOL_ROUND), tools=[OPEN_GATE],
                                                  tool_handlers={"open_gate": open_gate})
            with pytest.raises(RequestTimeout) as timed_out:
                await session.respond("Open.", timeout=0.5)
            await open_gate.cancelled.wait()
            assert (await session.transcript())["transcript"]["entries"] == []
    assert timed_out.value.method == "session/respond"


async def test_a_full_server_s_refusal_is_named_when_it_closes_the_connection() -> None:
    with ServeProcess(["--tcp", "127.0.0.1:0", "--max-connections", "1"]) as full:
        host, port = full.tcp_address  # type: ignore[misc]
        with anyio.fail_after(HANG_GUARD):
            async with connect(f"tcp://{host}:{port}") as first:
                await first.ping()
                async with connect(f"tcp://{host}:{port}") as second:
                    with pytest.raises(ConnectionLost) as refused:
                        await second.ping()
    assert "closed the connection" in refused.value.cause
    assert isinstance(refused.value.__cause__, AgentError) and refused.value.__cause__.code is ErrorCode.BUSY
    assert refused.value.__cause__.message in refused.value.cause


async def test_a_result_without_what_a_helper_reads_is_an_unexpected_result() -> None:
    async def odd(stream: anyio.abc.SocketStream) -> None:
        async for message in _lines(stream):
            result: Any = {"session": "s1", "text": 42} if message["method"] == "session/respond" else ["not", "a", "dict"]
            await stream.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode() + b"\n")

    async def body(url: str) -> None:
        async with connect(url) as client:
            with pytest.raises(UnexpectedResult) as bad_reply:
                await client.session("s1").respond("Hi.")
            with pytest.raises(UnexpectedResult) as not_an_object:
                await client.list_sessions()
            assert client.connected  # a result is the server's word on one call: the connection stays
        assert "Expected `str`, got `int` - at `$.text`" in bad_reply.value.cause
        assert (not_an_object.value.method, not_an_object.value.result) == ("session/list", ["not", "a", "dict"])

    await _with_raw_server(odd, body)


async def test_server_errors_are_the_librarys_exceptions_with_data(server: ServeProcess) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "tcp")) as client:
            with pytest.raises(ProtocolError) as missing:
                await client.session("nobody").respond("Hello?")
            session = await client.create_session(model=scripted([{"error": "refusal", "message": "No."}]))
            with pytest.raises(AgentError) as refused:
                await session.respond("Tell me a secret.")
            await client.ping()  # the connection is fine after errors
    assert missing.value.code is ErrorCode.SESSION_NOT_FOUND
    assert missing.value.data() == {"code": "session_not_found", "session": "nobody"}
    assert refused.value.code is ErrorCode.REFUSAL


async def test_game_methods_npcs_worlds_subscriptions_and_decisions(server: ServeProcess) -> None:
    npc_reply = {"json": {"emotion": "amused", "line": "Steel is patient.", "player_options": ["Buy."],
                          "ends_conversation": False}}
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "stdio")) as client:
            world = await client.create_world(state={"gate": "closed"})
            changes = await world.subscribe("gate")
            gorm = await client.create_npc(persona={"name": "Gorm", "role": "a blacksmith"}, world=world.id,
                                           model=scripted([npc_reply, {"text": "Fine steel!"}]))
            turn = gorm.talk_stream("Teach me.")
            events = [event async for event in turn]
            talk = await turn
            bark = await gorm.bark("Dawn.")
            assert await world.set("gate", "open") == 1
            change = await changes.__aiter__().__anext__()
            assert await world.get("gate") == "open"
            await changes.unsubscribe()
            single = await client.decide("A dragon.", ["flee"])
            many = await client.decide_many([{"situation": "A dragon.", "options": ["flee"]},
                                             {"situation": "A dragon.", "options": ["fight", "flee"],
                                              "model": scripted([{"error": "refusal"}])}])
            state = await gorm.state()
            assert [n["npc"] for n in await client.list_npcs()] == [gorm.id]
    assert (talk.line, talk.emotion, talk.player_options) == ("Steel is patient.", "amused", ["Buy."])
    assert {"type": "emotion", "emotion": "amused"} in events
    assert bark.line == "Fine steel!" and bark.npc == gorm.id
    assert (change["path"], change["oldValue"], change["newValue"]) == ("gate", "closed", "open")
    assert (single.option_id, single.confidence) == ("flee", 100)
    assert many[0].option_id == "flee"  # type: ignore[union-attr]
    assert isinstance(many[1], AgentError)  # the failed element's error, not raised
    assert state["persona"]["name"] == "Gorm"


async def test_decisions_and_content_use_the_client_wide_tool_handlers(server: ServeProcess) -> None:
    measure_tool = {"name": "measure", "description": "Measure the distance to a target.",
               "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}
    steps = [{"toolCalls": [{"name": "measure", "arguments": {"target": "troll"}}]},
             {"json": {"reasoning": "Too close.", "choice": "flee", "confidence": 70}}]
    content_steps = [{"toolCalls": [{"name": "measure", "arguments": {"target": "bridge"}}]},
                     {"json": {"title": "The Troll Bridge"}}]
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "tcp")) as client:

            @client.tool()  # named after the function; calls that name no session or NPC come here
            async def measure(target: str) -> dict[str, Any]:
                return {"target": target, "paces": 12}

            decision = await client.decide("A troll.", ["fight", "flee"], tools=[measure_tool], tool_choice="required",
                                           model=scripted(steps))
            content = await client.generate_content(
                "Name the place.", {"type": "object", "properties": {"title": {"type": "string"}}},
                tools=[measure_tool], model=scripted(content_steps))
    assert (decision.option_id, decision.confidence) == ("flee", 70)
    assert [(r.call.name, r.output) for r in decision.tool_calls] == [("measure", {"target": "troll", "paces": 12})]
    assert content == {"title": "The Troll Bridge"}


async def test_every_other_helper_against_a_real_server(server: ServeProcess) -> None:
    """The helpers not exercised above, each once, reading what the protocol says they answer."""
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "stdio")) as client:
            await client.ping()
            assert (await client.model_availability())["available"] is True
            assert "generationSchema" in await client.validate_schema({"type": "object"}, name="thing")
            assert [t["name"] for t in (await client.validate_tools([OPEN_GATE]))["tools"]] == ["open_gate"]
            script = scripted([{"text": "One."}, {"text": "Two."}, {"text": "Summary."}, {"text": "Three."}])
            session = await client.create_session("s", model=script, instructions="Be brief.")
            await session.respond("First?")
            await session.respond("Second?")
            await session.set_instructions("Be terse.")
            await session.set_context_note("It rains.")
            assert await session.set_tools([OPEN_GATE]) == []
            assert await session.compact(keep_recent_turns=1) == "Summary."
            saved = await session.transcript()
            assert saved["transcript"]["instructions"] == "Be terse."
            await session.reset()
            assert (await session.transcript())["transcript"]["entries"] == []
            assert await session.cancel() == 0
            await session.delete()
            assert await client.list_sessions() == []
            world = await client.create_world("w", state={"a": {"b": 1}})
            assert await world.merge({"c": 2}) == 1
            assert (await world.remove("a.b"))["removed"] is True
            assert await world.snapshot() == {"a": {}, "c": 2}
            assert [w["world"] for w in await client.list_worlds()] == ["w"]
            npc = await client.create_npc("n", persona={"name": "Nell"}, world="w", model="scripted")
            assert await npc.update(persona={"role": "a baker"}) == []
            await npc.reset(clear_memory=True)
            state = await npc.state()
            assert state["persona"]["role"] == "a baker"
            await npc.delete()
            restored = await client.restore_npc(state, npc="n2", model="scripted")
            assert (restored.id, (await restored.state(settle=False))["world"]) == ("n2", "w")
            assert await restored.cancel() == 0
            await world.delete()
            assert await client.list_worlds() == []
        async with connect("stdio", args=["--model", "farm:1"]) as farm:
            status = await farm.model_status()
    assert [device["name"] for device in status["statistics"]["devices"]] == ["phone1"]


# --- authentication and reconnecting -----------------------------------------------------------


async def test_a_wrong_token_is_refused_over_tcp_and_websocket(server: ServeProcess) -> None:
    host, port = server.tcp_address  # type: ignore[misc]
    with anyio.fail_after(HANG_GUARD):
        with pytest.raises(AuthenticationFailed) as tcp:
            async with connect(f"tcp://{host}:{port}", token="wrong"):
                pass
        with pytest.raises(AuthenticationFailed) as ws:
            async with connect(server.ws_url, token="wrong"):  # type: ignore[arg-type]
                pass
        with pytest.raises(AuthenticationFailed) as anonymous:
            async with connect(server.ws_url):  # type: ignore[arg-type]
                pass
    assert tcp.value.reason == "failed" and ws.value.reason == "failed" and anonymous.value.reason == "required"
    assert "HTTP 401" in str(ws.value)


@pytest.mark.parametrize("transport", ["tcp", "ws"])
async def test_reconnect_authenticates_again_and_recreates_nothing(server: ServeProcess, transport: str) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, transport), reconnect=True) as client:
            session = await client.create_session("guard", model=scripted([{"text": "Halt!"}]))
            await client.shutdown()  # the server answers, then closes this connection
            await client.wait_closed()
            await client.ping()  # a new connection, authenticated with the same token
            assert client.reconnects == 1
            with pytest.raises(ProtocolError) as gone:
                await session.respond("Hello?")  # the old connection's session went with it
            await client.reconnect()  # by hand, too
            assert client.reconnects == 2
            await client.ping()
    assert gone.value.code is ErrorCode.SESSION_NOT_FOUND


async def test_without_reconnect_a_lost_connection_is_an_error(server: ServeProcess) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with connect(**target_of(server, "tcp")) as client:
            await client.shutdown()
            await client.wait_closed()
            assert not client.connected
            with pytest.raises(ConnectionLost) as lost:
                await client.ping()
    assert "closed the connection" in lost.value.cause


# --- misbehaving servers -----------------------------------------------------------------------


Behaviour = Callable[[anyio.abc.SocketStream], Awaitable[None]]


async def _lines(stream: anyio.abc.SocketStream) -> AsyncIterator[dict[str, Any]]:
    from anyio.streams.buffered import BufferedByteReceiveStream

    reader = BufferedByteReceiveStream(stream)
    while True:
        try:
            yield json.loads(await reader.receive_until(b"\n", 1 << 20))
        except (anyio.IncompleteRead, anyio.EndOfStream):
            return


async def _serve(behaviour: Behaviour, *, task_status: anyio.abc.TaskStatus[int]) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))

        async def handle(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                await behaviour(stream)

        await listener.serve(handle)


async def _with_raw_server(behaviour: Behaviour, body: Callable[[str], Awaitable[None]]) -> None:
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            port = await tg.start(_serve, behaviour)
            await body(f"tcp://127.0.0.1:{port}")
            tg.cancel_scope.cancel()


async def _answer_pings_then(stream: anyio.abc.SocketStream, then: bytes | None) -> None:
    """Answer ``ping``; on anything else send ``then`` (nothing when empty; close at once when None)."""
    async for message in _lines(stream):
        if message["method"] == "ping":
            await stream.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}).encode() + b"\n")
        elif then is None:
            return
        elif then:
            await stream.send(then)


async def _fail_every(client: Client, method: str, count: int) -> list[BaseException]:
    failures: list[BaseException] = []

    async def one() -> None:
        try:
            await client.call(method)
        except Exception as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return failures


@pytest.mark.parametrize(("then", "error", "cause"), [
    (None, ConnectionLost, "the server closed the connection"),
    (b"<html>oops</html>\n", MalformedMessage, "a line that is not JSON: b'<html>oops</html>'"),
    (b"[1, 2]\n", MalformedMessage, "JSON that is not an object"),
    (b'{"jsonrpc": "2.0", "id": 99}\n', MalformedMessage, "neither a request, a notification nor a response"),
], ids=["closes", "not-json", "not-an-object", "no-result"])
async def test_a_server_that_closes_or_misspeaks_mid_call_fails_every_pending_call(
        then: bytes | None, error: type[ConnectionLost], cause: str) -> None:
    async def body(url: str) -> None:
        async with connect(url) as client:
            await client.ping()
            failures = await _fail_every(client, "session/list", 3)
            assert len(failures) == 3 and all(type(f) is error for f in failures)
            assert cause in failures[0].cause  # type: ignore[attr-defined]
            assert not client.connected
            with pytest.raises(ConnectionLost):
                await client.ping()  # no reconnect: the lost connection stays lost

    await _with_raw_server(lambda stream: _answer_pings_then(stream, then), body)


async def test_a_server_that_never_answers_times_out_and_the_connection_stays() -> None:
    async def body(url: str) -> None:
        async with connect(url, timeout=0.2) as client:
            with pytest.raises(RequestTimeout) as timed_out:
                await client.call("session/list")
            await client.call("ping", timeout=HANG_GUARD)  # the connection is still up, and answers what it answers
            with pytest.raises(RequestTimeout):
                await client.call("session/list", timeout=0.05)
        assert timed_out.value.method == "session/list"

    await _with_raw_server(lambda stream: _answer_pings_then(stream, b""), body)


async def test_connect_times_out_when_authentication_is_never_answered() -> None:
    async def body(url: str) -> None:
        with pytest.raises(ConnectError) as failed:
            async with connect(url, token="t", connect_timeout=0.2):
                pass
        assert "no connection within" in failed.value.cause

    await _with_raw_server(lambda stream: anyio.sleep_forever(), body)


async def test_nothing_listening_and_a_server_process_that_exits_are_named() -> None:
    async with anyio.create_task_group():
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()
    with anyio.fail_after(HANG_GUARD):
        with pytest.raises(ConnectError) as refused:
            async with connect(f"tcp://127.0.0.1:{port}"):
                pass
        async with connect("stdio", args=["--no-such-option"]) as client:
            with pytest.raises(ConnectionLost) as exited:
                await client.ping()
    assert "cannot connect" in refused.value.cause
    assert "exited with status 2" in exited.value.cause and "--no-such-option" in exited.value.cause


def test_a_bad_target_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        connect("http://127.0.0.1:1")
