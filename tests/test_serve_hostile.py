"""Hostile and broken clients cost only themselves: bounded memory, backpressure, reaping.

In process, on real loopback sockets, with the server's time on a :class:`ManualClock` (the
timeouts are asserted by moving it, never by waiting): a client that does not read is
backpressured and closed after the write timeout; running work that overflows the memory bound
aborts the connection at once; partial lines and silent connections are reaped; silent
connections cannot lock everyone out; queued work beyond the per-connection and per-object caps
is answered at once with ``data.limit``; well-behaved clients next to all this get the same
answers, and their turns are admitted ahead of a flooding connection's backlog (order, counted
at the server's admission gate). WebSocket frame cases with a real ``websockets`` client. The same against a real
``oam-actors serve`` subprocess (tiny real timeouts, outcomes only, its resident memory measured)
is in ``test_serve_hostile_process.py``.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec
import pytest

from oam_actors import Bridge, BridgeConfig, GameExtension, LocalSystem, ManualClock, ScriptedModel
from oam_actors.agent import DelegatingModel, GenerationRequest, Usage
from oam_actors.bridge import ModelFactory
from oam_actors.observability.metrics import ServerMetrics
from oam_actors.transports.hub import Hub, ServePolicy
from oam_actors.transports.tcp import serve_tcp

HANG_GUARD = 20.0  # real seconds; only fails a hung test
LINE = 4096
BOUND = 64 * 1024  # 16 x LINE: output high water 8 KiB, requests in flight 32 KiB
OPEN_GATE = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}
TOOL_STEP = {"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}


@dataclass
class Server:
    hub: Hub
    clock: ManualClock
    port: int
    clients: list[Client] = field(default_factory=list)

    @property
    def metrics(self) -> ServerMetrics:
        assert self.hub.metrics is not None
        return self.hub.metrics

    async def connect(self) -> Client:
        self.clients.append(Client(await anyio.connect_tcp("127.0.0.1", self.port)))
        return self.clients[-1]

    async def advance(self, seconds: float) -> None:
        """Move the server's clock and let every task react."""
        await anyio.wait_all_tasks_blocked()
        self.clock.advance(seconds)
        await anyio.wait_all_tasks_blocked()


@asynccontextmanager
async def tcp_server(
    config: BridgeConfig | None = None, *, system: LocalSystem | None = None, system_model: ModelFactory | None = None,
    **policy: Any,
) -> AsyncIterator[Server]:
    config = config or BridgeConfig(max_connection_bytes=BOUND, max_in_flight=64)
    clock = ManualClock()
    async with system or LocalSystem() as system:
        hub = Hub(system, ServePolicy(max_line_bytes=LINE, **policy), config=config, clock=clock,
                  metrics=ServerMetrics(), extensions=lambda: [GameExtension()], system_model=system_model)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(serve_tcp, listener, hub)
            server = Server(hub, clock, port)
            yield server
            for client in server.clients:  # closed first, the server's lingering close ends at once
                await client.aclose()
            tasks.cancel_scope.cancel()


class Client:
    """A JSON-lines client on a real socket: requests, and reading when it chooses to."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self._buffer = b""
        self._next_id = 0

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def request(self, method: str, params: Any = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send_raw(json.dumps(message).encode() + b"\n")
        return self._next_id

    async def next(self) -> dict[str, Any]:
        with anyio.fail_after(HANG_GUARD):
            while b"\n" not in self._buffer:
                self._buffer += await self.stream.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    async def response(self, request_id: int) -> dict[str, Any]:
        while "method" in (message := await self.next()) or message.get("id") != request_id:
            pass
        return message

    async def call(self, method: str, params: Any = None) -> Any:
        answer = await self.response(await self.request(method, params))
        assert "result" in answer, answer
        return answer["result"]

    async def wait_closed(self) -> None:
        """Read (and drop) until the server has closed the connection."""
        with anyio.fail_after(HANG_GUARD):
            try:
                while await self.stream.receive():
                    pass
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
                return

    async def aclose(self) -> None:
        await self.stream.aclose()


async def settle(fingerprint: Callable[[], object], rounds: int = 20) -> None:
    """Wait until ``fingerprint()`` stays the same for ``rounds`` short real pauses (socket I/O is
    not a task, so ``wait_all_tasks_blocked`` cannot tell it has come to rest); hang-guarded."""
    with anyio.fail_after(HANG_GUARD):
        last, same = fingerprint(), 0
        while same < rounds:
            await anyio.sleep(0.01)
            now = fingerprint()
            same = same + 1 if now == last else 0
            last = now


def scripted(steps: list[Any]) -> dict[str, Any]:
    return {"type": "scripted", "steps": steps}


def closing_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "oam_actors.bridge.bridge" and " closed: " in r.getMessage()]


async def well_behaved_answers(client: Client) -> list[Any]:
    """What a well-behaved client gets: a ping and a turn (compared with and without a flood)."""
    await client.call("session/create", {"session": "good", "model": scripted([{"text": "Hello."}])})
    turn = await client.call("session/respond", {"session": "good", "prompt": "Hi"})
    await client.call("session/delete", {"session": "good"})
    return [await client.call("ping"), turn["text"], turn["toolCalls"]]


# --- a client that does not read ------------------------------------------------------------------


async def test_a_client_that_does_not_read_is_backpressured_then_closed_after_the_write_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with tcp_server() as server:
        good = await server.connect()
        baseline = await well_behaved_answers(good)
        flooder = await server.connect()
        port = flooder.stream.extra(anyio.abc.SocketAttribute.local_port)
        # Each request is answered with about 3 KB: the answers fill the kernel's buffers quickly.
        await flooder.call("session/create", {"session": "big", "instructions": "x" * 3000, "model": scripted([])})
        request = b'{"jsonrpc":"2.0","id":1,"method":"session/transcript","params":{"session":"big"}}\n'
        flood = request * 50_000  # 4 MB of requests, never reading the answers

        async def send_flood() -> None:
            try:
                await flooder.send_raw(flood)
            except (anyio.BrokenResourceError, ConnectionError):
                pass  # closed by the server, as it should be

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(send_flood)
            await settle(lambda: server.metrics.requests.value(method="session/transcript"))
            # Backpressure: the server stopped reading long before the end of the flood...
            assert 0 < server.metrics.requests.value(method="session/transcript") < 50_000
            # ...and serves everyone else meanwhile, with the same answers.
            assert await well_behaved_answers(good) == baseline
            await server.advance(29)
            assert not closing_lines(caplog)
            await server.advance(2)
            await flooder.wait_closed()
        [line] = closing_lines(caplog)
        assert line.startswith(f"connection #2 tcp 127.0.0.1:{port} closed: it has not read its output for 30 s; ")
        assert "bytes held (output " in line
        assert await well_behaved_answers(good) == baseline
        assert server.hub.connections == 1


async def test_running_work_that_passes_the_memory_bound_aborts_the_connection_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reading has stopped (the peer does not read) but turns already in flight keep producing
    output: past the bound the connection is aborted, not grown."""
    never = anyio.Event()

    async def peer_that_never_reads(data: bytes) -> None:
        await never.wait()

    async def requests() -> AsyncIterator[bytes]:
        for n in range(8):
            yield json.dumps({"jsonrpc": "2.0", "id": f"c{n}", "method": "session/create",
                              "params": {"session": f"s{n}", "model": scripted([{"text": "y" * 3000}])}}).encode()
        for n in range(8):
            yield json.dumps({"jsonrpc": "2.0", "id": n, "method": "session/respond",
                              "params": {"session": f"s{n}", "prompt": "Talk.", "stream": True}}).encode()
        await never.wait()  # the peer sends nothing more and reads nothing

    config = BridgeConfig(max_connection_bytes=16 * 1024, max_in_flight=64)
    async with LocalSystem() as system:
        bridge = Bridge(system, peer_that_never_reads, config=config, label="test")
        with anyio.fail_after(HANG_GUARD):
            await bridge.serve(requests(), drain_on_eof=False)
        assert bridge.aborted == "its output is not being read fast enough (memory bound 16384 bytes exceeded)"
        assert bridge.outbox.pending_bytes == 0  # dropped
        assert system.addresses("session") == []  # its work cancelled, its objects gone
    [line] = closing_lines(caplog)
    assert line.startswith("connection test closed: its output is not being read fast enough (memory bound 16384 bytes "
                           "exceeded); ")


# --- reaping ----------------------------------------------------------------------------------------


async def test_a_partial_line_trickled_a_byte_at_a_time_is_reaped_after_the_line_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with tcp_server() as server:
        trickler = await server.connect()
        assert await trickler.call("ping") == {}
        await trickler.send_raw(b'{"jsonrpc":"2.0",')
        await delivered()
        for _ in range(5):  # a byte every 5 s: progress in bytes, none toward a complete line
            await server.advance(5)
            await trickler.send_raw(b" ")
            await delivered()
        await server.advance(4.9)
        assert server.hub.connections == 1 and not closing_lines(caplog)
        await server.advance(0.2)
        await trickler.wait_closed()
        [line] = closing_lines(caplog)
        assert "closed: no complete message within 30 s; " in line
        assert "input 22)" in line  # the partial line it held


async def test_a_silent_connection_is_reaped_and_cannot_lock_others_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with tcp_server(max_connections=3) as server:
        silent = [await server.connect() for _ in range(3)]
        await delivered()
        refused = await server.connect()
        assert (await refused.next())["error"] == {
            "code": -32010, "message": "Too many connections (limit 3); try again later.",
            "data": {"code": "busy", "limit": 3},
        }
        await refused.wait_closed()
        await server.advance(29.9)
        assert server.hub.connections == 3
        await server.advance(0.2)
        for client in silent:
            await client.wait_closed()
        assert len(closing_lines(caplog)) == 3
        assert all("closed: no complete message within 30 s; 0 bytes held" in line for line in closing_lines(caplog))
        newcomer = await server.connect()
        assert await newcomer.call("ping") == {}


async def test_an_idle_connection_is_reaped_but_one_with_work_in_flight_is_not(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with tcp_server() as server:
        idle, busy = await server.connect(), await server.connect()
        assert await idle.call("ping") == {}
        await busy.call("session/create", {"session": "g", "tools": [OPEN_GATE], "model": scripted([TOOL_STEP])})
        turn = await busy.request("session/respond", {"session": "g", "prompt": "Open!"})
        call = await busy.next()
        assert call["method"] == "tool/call"
        await server.advance(299)
        assert server.hub.connections == 2
        await server.advance(2)
        await idle.wait_closed()
        [line] = closing_lines(caplog)
        assert "closed: idle for 300 s; " in line
        await busy.send_raw(json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": {"output": "opened"}}).encode() + b"\n")
        assert "result" in await busy.response(turn)


# --- queued work ------------------------------------------------------------------------------------


async def test_requests_beyond_the_in_flight_cap_are_answered_busy_at_once_naming_the_limit() -> None:
    async with tcp_server(BridgeConfig(max_in_flight=4)) as server:
        client = await server.connect()
        await client.call("session/create", {"session": "g", "tools": [OPEN_GATE], "model": scripted([TOOL_STEP] * 9)})
        await client.call("npc/create", {"npc": "gorm", "persona": {"name": "Gorm"}, "model": scripted([])})
        turns = [await client.request("session/respond", {"session": "g", "prompt": "Open!"}) for _ in range(4)]
        refused = [await client.request("session/respond", {"session": "g", "prompt": "Open!"}),
                   await client.request("npc/talk", {"npc": "gorm", "line": "Hello."})]
        for request_id in refused:  # answered while the first turn still waits for its tool
            assert (await client.response(request_id))["error"] == {
                "code": -32010,
                "message": "Too many requests in flight on this connection (limit 4); wait for answers before sending more.",
                "data": {"code": "busy", "limit": 4},
            }
        # Immediate methods are never refused: the client can still see and cancel its work.
        assert await client.call("ping") == {}
        assert await client.call("session/cancel", {"session": "g"}) == {"session": "g", "cancelled": 4}
        for request_id in turns:
            assert (await client.response(request_id))["error"]["data"]["code"] == "cancelled"
        assert "result" in await client.response(await client.request("npc/talk", {"npc": "gorm", "line": "Hello."}))


async def test_an_objects_full_queue_is_answered_busy_with_its_limit() -> None:
    async with tcp_server(BridgeConfig(max_queue=2, max_in_flight=64)) as server:
        client = await server.connect()
        await client.call("session/create", {"session": "g", "tools": [OPEN_GATE], "model": scripted([TOOL_STEP] * 4)})
        for _ in range(3):  # one running (waiting for its tool), two queued
            await client.request("session/respond", {"session": "g", "prompt": "Open!"})
        error = (await client.response(await client.request("session/respond", {"session": "g", "prompt": "Open!"})))["error"]
        assert error == {
            "code": -32010,
            "message": "Too many operations are queued for this object (limit 2); try again later.",
            "data": {"code": "busy", "limit": 2},
        }


async def test_requests_in_flight_are_bounded_in_bytes_too() -> None:
    async with tcp_server() as server:  # BOUND: the requests in flight may hold 32 KiB
        client = await server.connect()
        await client.call("session/create", {"session": "g", "tools": [OPEN_GATE], "model": scripted([TOOL_STEP] * 9)})
        prompt = "p" * 3500  # each request counts about 5.6 KiB
        ids = [await client.request("session/respond", {"session": "g", "prompt": prompt}) for _ in range(6)]
        error = (await client.response(ids[5]))["error"]
        assert error["data"] == {"code": "busy", "limit": BOUND // 2}
        assert error["message"].startswith(f"The requests in flight on this connection hold too much memory (limit {BOUND // 2} bytes)")
        assert await client.call("session/cancel", {"session": "g"}) == {"session": "g", "cancelled": 5}


# --- fair sharing between connections ----------------------------------------------------------------


class Turnstile(DelegatingModel):
    """A system model (capabilities of a scripted one) whose steps start one by one as the test
    lets them through: ``started``
    lists the prompts in the order their turns were admitted (with one running slot, a step
    starts only once the turn before it has finished)."""

    def __init__(self) -> None:
        super().__init__(ScriptedModel.from_wire({"type": "scripted", "steps": []}, path="model"))
        self.started: list[str] = []
        self._go = anyio.Event()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        self.started.append(request.user_prompt)
        await self._go.wait()
        self._go = anyio.Event()
        yield f"Reply to {request.user_prompt}."

    async def let_one_through(self) -> None:
        self._go.set()
        await anyio.wait_all_tasks_blocked()


async def test_a_connection_is_admitted_ahead_of_another_connections_backlog() -> None:
    """Two connections pipeline nine turns each over three sessions without reading; with one
    running slot, a third connection's turn starts after at most one turn of each, not after
    their eighteen, and its pings, lists and cancels are answered while the slot is taken."""
    turnstile = Turnstile()
    async with tcp_server(system=LocalSystem(max_running=1), system_model=lambda: turnstile) as server:
        system = server.hub.system
        assert isinstance(system, LocalSystem)
        flooders = [await server.connect() for _ in range(2)]
        for number, flooder in enumerate(flooders):
            for session in range(3):
                await flooder.call("session/create", {"session": f"f{session}"})
            await flooder.send_raw(b"".join(
                b'{"jsonrpc":"2.0","id":%d,"method":"session/respond","params":{"session":"f%d","prompt":"flood %d"}}\n'
                % (100 + turn, turn % 3, number) for turn in range(9)
            ))
        await settle(lambda: system.gate_statistics())
        assert system.gate_statistics() == msgspec.structs.replace(system.gate_statistics(), running=1, waiting=5)
        good = await server.connect()
        await good.call("session/create", {"session": "good"})
        await good.call("session/create", {"session": "idle"})
        turn = await good.request("session/respond", {"session": "good", "prompt": "good"})
        await settle(lambda: system.gate_statistics())
        assert system.gate_statistics().waiting == 6
        # The control plane never waits for a turn, whoever holds the slots.
        assert await good.call("ping") == {}
        assert await good.call("session/cancel", {"session": "idle"}) == {"session": "idle", "cancelled": 0}
        assert [s["session"] for s in (await good.call("session/list"))["sessions"]] == ["good", "idle"]
        while "good" not in turnstile.started:
            await turnstile.let_one_through()
        assert turnstile.started == ["flood 0", "flood 0", "flood 1", "good"]
        for _ in range(18):
            await turnstile.let_one_through()
        assert (await good.response(turn))["result"]["text"] == "Reply to good."
        assert len(turnstile.started) == 19
        for number, flooder in enumerate(flooders):  # the flood is answered in full too
            assert [(await flooder.response(100 + n))["result"]["text"] for n in range(9)] == [f"Reply to flood {number}."] * 9


async def delivered() -> None:
    """Let loopback bytes just sent reach the server's reader (a few event-loop rounds)."""
    await settle(lambda: None, rounds=5)


# --- WebSocket (RFC 6455, with the websockets client) -------------------------------------------------


@asynccontextmanager
async def ws_server(**policy: Any) -> AsyncIterator[tuple[Server, str]]:
    from oam_actors.transports.websocket import websocket_server

    clock = ManualClock()
    config = BridgeConfig(max_connection_bytes=BOUND, max_in_flight=64)
    async with LocalSystem() as system:
        hub = Hub(system, ServePolicy(max_line_bytes=LINE, **policy), config=config, clock=clock, metrics=ServerMetrics())
        async with websocket_server(hub, "127.0.0.1", 0) as listening:
            port = listening.sockets[0].getsockname()[1]
            yield Server(hub, clock, port), f"ws://127.0.0.1:{port}/ws"


async def ws_connect(url: str, **options: Any) -> Any:
    from websockets.asyncio.client import connect

    return await connect(url, proxy=None, max_size=None, open_timeout=HANG_GUARD, **options)


async def ws_close_code(ws: Any) -> int | None:
    from websockets.exceptions import ConnectionClosed

    with anyio.fail_after(HANG_GUARD):
        try:
            while True:
                await ws.recv()
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd is not None else None


async def test_websocket_frames_follow_rfc_6455() -> None:
    pytest.importorskip("websockets")
    async with ws_server() as (server, url):
        ws = await ws_connect(url)
        # A fragmented message is reassembled; pings are answered.
        await ws.send(['{"jsonrpc":"2.0",', '"id":1,', '"method":"ping"}'])
        assert json.loads(await ws.recv()) == {"jsonrpc": "2.0", "id": 1, "result": {}}
        with anyio.fail_after(HANG_GUARD):
            await (await ws.ping())
        # The close handshake completes, and the slot is free again.
        await ws.close()
        assert ws.close_code == 1000
        await settle(lambda: server.hub.connections)
        assert server.hub.connections == 0
        # Invalid UTF-8 in a text frame: 1007.
        ws = await ws_connect(url)
        await ws.send(b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}', text=True)
        assert await ws_close_code(ws) == 1007
        # Fragments adding up to more than the limit: 1009, like one oversize frame.
        ws = await ws_connect(url)
        await ws.send(["x" * 2000, "x" * 2000, "x" * 2000])
        assert await ws_close_code(ws) == 1009


async def test_a_websocket_client_that_does_not_read_is_backpressured_then_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("websockets")
    async with ws_server() as (server, url):
        good = await ws_connect(url)
        await good.send('{"jsonrpc":"2.0","id":1,"method":"ping"}')
        assert json.loads(await good.recv())["result"] == {}
        # It reads one frame into its queue, then nothing; no compression (repeated answers would
        # shrink to nothing with permessage-deflate).
        flooder = await ws_connect(url, max_queue=1, compression=None)
        await flooder.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "session/create",
                                       "params": {"session": "big", "instructions": "x" * 3000, "model": scripted([])}}))
        request = '{"jsonrpc":"2.0","id":1,"method":"session/transcript","params":{"session":"big"}}'

        async def send_flood() -> None:
            from websockets.exceptions import ConnectionClosed

            try:
                for _ in range(50_000):
                    await flooder.send(request)
            except ConnectionClosed:
                pass

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(send_flood)
            await settle(lambda: server.metrics.requests.value(method="session/transcript"))
            assert 0 < server.metrics.requests.value(method="session/transcript") < 50_000
            await good.send('{"jsonrpc":"2.0","id":2,"method":"ping"}')
            assert json.loads(await good.recv()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
            await server.advance(31)
            await settle(lambda: len(closing_lines(caplog)))
            tasks.cancel_scope.cancel()
        [line] = closing_lines(caplog)
        assert line.startswith("connection #2 ws 127.0.0.1:") and "closed: it has not read its output for 30 s; " in line
        await good.close()
        flooder.transport.abort()  # it does not read: a close handshake would only wait for its timeout


async def test_a_silent_websocket_is_closed_with_the_reason() -> None:
    pytest.importorskip("websockets")
    async with ws_server() as (server, url):
        ws = await ws_connect(url)
        await delivered()
        await server.advance(30)
        from websockets.exceptions import ConnectionClosed

        with pytest.raises(ConnectionClosed) as closed, anyio.fail_after(HANG_GUARD):
            await ws.recv()
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, "no complete message within 30 s")
