"""`oam-actors serve` over real sockets: TCP JSON lines and WebSocket text frames, one bridge per
connection, private objects by default, and a client that leaves mid-turn."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("websockets")

from serve_process import (
    OPEN_GATE,
    TOOL_ROUND,
    Peer,
    ServeProcess,
    TcpPeer,
    WsPeer,
    metric,
    scripted,
)

MAX_LINE = 4096


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with ServeProcess(
        ["--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--model", "scripted", "--max-line-bytes", str(MAX_LINE)]
    ) as process:
        yield process
        assert process.stop() == 0, process.stderr


@pytest.fixture(params=["tcp", "ws"])
def connect(request: pytest.FixtureRequest, server: ServeProcess) -> Iterator[Callable[[], Peer]]:
    peers: list[Peer] = []

    def open_peer() -> Peer:
        peers.append(server.tcp() if request.param == "tcp" else server.ws())
        return peers[-1]

    yield open_peer
    for peer in peers:
        peer.close()


def create_guard(peer: Peer, steps: list | None = None) -> None:
    result = peer.call("session/create", {"session": "guard", "tools": [OPEN_GATE], "model": scripted(steps or TOOL_ROUND)})
    assert result == {"session": "guard", "warnings": []}


def test_ping(connect: Callable[[], Peer]) -> None:
    peer = connect()
    assert peer.call("ping") == {}
    result = peer.call("initialize", {"protocolVersion": "1.0"})
    assert result["server"]["name"] == "oam-actors"
    # The same methods as stdio, the game extension's included.
    assert {"session/respond", "npc/create", "world/create"} <= set(result["capabilities"]["methods"])


def test_a_turn_with_a_client_tool_round_trip(connect: Callable[[], Peer]) -> None:
    peer = connect()
    create_guard(peer)
    turn = peer.request("session/respond", {"session": "guard", "prompt": "Let me through!", "stream": True})
    call = peer.tool_call()
    assert call["params"]["session"] == "guard"
    assert call["params"]["requestId"] == turn
    assert call["params"]["call"]["arguments"] == {"gate": "north"}
    peer.reply(call["id"], {"output": {"opened": True}})
    result = peer.result(turn)
    assert result["session"] == "guard"
    assert result["text"] == 'Done: {"opened":true}'
    assert [r["output"] for r in result["toolCalls"]] == [{"opened": True}]
    events = [m["params"]["event"]["type"] for m in peer.log if m.get("method") == "session/event"]
    assert events[:2] == ["modelStep", "toolCallStarted"]


def test_connections_are_isolated_by_default(connect: Callable[[], Peer]) -> None:
    first, second, third = connect(), connect(), connect()
    create_guard(first, [{"text": "first"}])
    create_guard(second, [{"text": "second"}])  # the same name: another connection's object
    assert first.call("session/respond", {"session": "guard", "prompt": "?"})["text"] == "first"
    assert second.call("session/respond", {"session": "guard", "prompt": "?"})["text"] == "second"
    assert [s["session"] for s in first.call("session/list")["sessions"]] == ["guard"]
    missing = third.error(third.request("session/respond", {"session": "guard", "prompt": "?"}))
    assert (missing["code"], missing["data"]) == (-32020, {"code": "session_not_found", "session": "guard"})
    assert third.call("session/list") == {"sessions": []}


def test_shutdown_ends_only_that_connection(connect: Callable[[], Peer]) -> None:
    leaving, staying = connect(), connect()
    assert leaving.call("shutdown") == {}
    leaving.wait_closed()
    assert staying.call("ping") == {}


def test_oversize_line_over_tcp_is_answered_and_skipped(server: ServeProcess) -> None:
    with server.tcp() as peer:
        assert isinstance(peer, TcpPeer)
        peer.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (2 * MAX_LINE) + b'"}}\n')
        peer.send_line('{"jsonrpc":"2.0","id":2,"method":"ping"}')
        assert peer.next() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": f"Invalid message: the line exceeds {MAX_LINE} bytes.",
                      "data": {"code": "invalid_message"}},
        }
        assert peer.next() == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_oversize_frame_closes_the_websocket(server: ServeProcess) -> None:
    with server.ws() as peer:
        peer.send_line('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + "x" * (2 * MAX_LINE) + '"}}')
        peer.wait_closed()
        assert isinstance(peer, WsPeer) and peer.close_code == 1009


def test_binary_frame_is_answered_and_the_connection_goes_on(server: ServeProcess) -> None:
    with server.ws() as peer:
        assert isinstance(peer, WsPeer)
        peer.send_binary(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
        error = peer.next()
        assert (error["id"], error["error"]["code"], error["error"]["data"]) == (None, -32600, {"code": "invalid_message"})
        assert peer.call("ping") == {}


def test_a_frame_may_hold_pretty_printed_json(server: ServeProcess) -> None:
    with server.ws() as peer:
        peer.send_line('{\n  "jsonrpc": "2.0",\n  "id": 7,\n  "method": "ping"\n}')
        assert peer.next() == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_a_client_leaving_mid_turn_does_not_disturb_another(connect: Callable[[], Peer], server: ServeProcess) -> None:
    cancelled_before = metric(server.get("/metrics")[2], 'oam_turns_total{outcome="cancelled"}')
    leaving, staying = connect(), connect()
    create_guard(leaving)
    create_guard(staying)
    leaving.request("session/respond", {"session": "guard", "prompt": "Open!"})
    leaving.tool_call()
    staying_turn = staying.request("session/respond", {"session": "guard", "prompt": "Open!"})
    call = staying.tool_call()
    leaving.close()  # with its tool call outstanding
    staying.reply(call["id"], {"output": "opened"})
    assert staying.result(staying_turn)["text"] == "Done: opened"
    # The leaving client's turn was cancelled, not left waiting for its tool answer.
    server_wait(lambda: metric(server.get("/metrics")[2], 'oam_turns_total{outcome="cancelled"}') == cancelled_before + 1)


def test_unknown_http_path_is_404(server: ServeProcess) -> None:
    assert server.get("/nope")[0] == 404


def server_wait(condition: Callable[[], bool]) -> None:
    """Poll the server (an HTTP round trip each time) until ``condition`` holds; hang-guarded."""
    for _ in range(2000):
        if condition():
            return
    raise AssertionError("condition not reached")
