"""`oam-actors serve` access and limits: bearer tokens on TCP and WebSocket, tenants sharing
objects, refusing to listen in the open without a token, max connections, idle timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

pytest.importorskip("websockets")

from serve_process import (
    OPEN_GATE,
    TOOL_ROUND,
    ServeProcess,
    TcpPeer,
    run_serve,
    scripted,
)
from websockets.exceptions import InvalidStatus

ALICE, BOB = "alice-secret", "bob-secret"


@pytest.fixture(scope="module")
def tenants() -> Iterator[ServeProcess]:
    args = ["--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--model", "scripted",
            "--token", f"alice={ALICE}", "--token", f"bob={BOB}", "--share-objects"]
    with ServeProcess(args) as process:
        yield process
        assert process.stop() == 0, process.stderr


# --- start-up -------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--tcp", "--ws"])
def test_listening_beyond_loopback_needs_a_token(flag: str) -> None:
    refused = run_serve([flag, "0.0.0.0:0"])
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert "0.0.0.0:0 (not loopback) requires a bearer token" in refused.stderr
    assert "--token" in refused.stderr


def test_a_listen_address_that_is_taken_fails_clearly(tenants: ServeProcess) -> None:
    assert tenants.tcp_address is not None
    refused = run_serve(["--tcp", f"127.0.0.1:{tenants.tcp_address[1]}"])
    assert refused.returncode == 2
    assert f"--tcp 127.0.0.1:{tenants.tcp_address[1]}: cannot listen there" in refused.stderr


# --- TCP authentication ---------------------------------------------------------------------------


def test_tcp_auth_request_names_the_tenant(tenants: ServeProcess) -> None:
    with tenants.tcp() as peer:
        assert peer.call("auth", {"token": ALICE}) == {"tenant": "alice"}
        assert peer.call("ping") == {}


def test_tcp_auth_as_a_notification_is_not_answered(tenants: ServeProcess) -> None:
    with tenants.tcp() as peer:
        peer.send({"jsonrpc": "2.0", "method": "auth", "params": {"token": BOB}})
        assert peer.call("ping") == {}
        assert len(peer.log) == 1


def test_tcp_wrong_token_is_answered_then_closed(tenants: ServeProcess) -> None:
    with tenants.tcp() as peer:
        error = peer.error(peer.request("auth", {"token": "guess"}))
        assert error == {
            "code": -32600,
            "message": "Authentication failed: the token is not valid.",
            "data": {"code": "invalid_message", "auth": "failed"},
        }
        peer.wait_closed()


def test_after_the_handshake_auth_is_not_a_method(tenants: ServeProcess) -> None:
    with tenants.tcp(ALICE) as peer:
        assert peer.error(peer.request("auth", {"token": ALICE}))["code"] == -32601


def test_a_server_without_tokens_accepts_auth_as_the_anonymous_tenant() -> None:
    """A client written for a server with tokens works against a development one."""
    with ServeProcess(["--tcp", "127.0.0.1:0", "--model", "scripted"]) as server, server.tcp() as peer:
        assert peer.call("auth", {"token": "whatever-the-production-token-is"}) == {"tenant": None}
        assert peer.call("auth", {}) == {"tenant": None}  # again, and any token: nothing to check
        peer.send({"jsonrpc": "2.0", "method": "auth", "params": {"token": "x"}})  # a notification: no answer
        assert peer.call("session/create", {"session": "s"}) == {"session": "s", "warnings": []}
        assert "auth" in peer.call("initialize")["capabilities"]["methods"]
        assert [m.get("id") for m in peer.log if "error" in m] == []


def test_tcp_request_before_auth_is_refused(tenants: ServeProcess) -> None:
    with tenants.tcp() as peer:
        error = peer.error(peer.request("ping"))
        assert (error["code"], error["data"]) == (-32600, {"code": "invalid_message", "auth": "required"})
        peer.wait_closed()


# --- WebSocket authentication and HTTP endpoints -------------------------------------------------


@pytest.mark.parametrize("token", [None, "guess"])
def test_websocket_without_a_valid_bearer_token_gets_401(tenants: ServeProcess, token: str | None) -> None:
    with pytest.raises(InvalidStatus) as refused:
        tenants.ws(token)
    assert refused.value.response.status_code == 401


def test_websocket_with_a_token(tenants: ServeProcess) -> None:
    with tenants.ws(BOB) as peer:
        assert peer.call("ping") == {}


def test_metrics_need_the_token_and_health_does_not(tenants: ServeProcess) -> None:
    assert tenants.get("/metrics")[0] == 401
    assert tenants.get("/metrics", "guess")[0] == 401
    status, content_type, body = tenants.get("/metrics", ALICE)
    assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
    assert 'oam_connections_refused_total{transport="ws",reason="auth"}' in body
    assert tenants.get("/health")[0] == 200


# --- tenants and shared objects -------------------------------------------------------------------


def test_a_tenant_shares_sessions_across_connections_and_transports(tenants: ServeProcess) -> None:
    with tenants.tcp(ALICE) as creator, tenants.ws(ALICE) as player, tenants.tcp(BOB) as stranger:
        creator.call("session/create", {"session": "shared", "tools": [OPEN_GATE], "model": scripted(TOOL_ROUND)})
        turn = player.request("session/respond", {"session": "shared", "prompt": "Open!"})
        call = player.tool_call()  # the tool call goes to the connection that sent the turn
        player.reply(call["id"], {"output": "opened"})
        assert player.result(turn)["text"] == "Done: opened"
        assert not any(m.get("method") == "tool/call" for m in creator.log)
        assert [s["session"] for s in creator.call("session/list")["sessions"]] == ["shared"]
        other = stranger.error(stranger.request("session/respond", {"session": "shared", "prompt": "?"}))
        assert other["data"] == {"code": "session_not_found", "session": "shared"}
        assert player.call("session/delete", {"session": "shared"}) == {"session": "shared", "deleted": True}


def test_a_sharing_client_leaving_mid_turn_cancels_only_its_turn(tenants: ServeProcess) -> None:
    with tenants.tcp(BOB) as keeper, tenants.tcp(BOB) as leaver:
        # The leaver's turn uses the first step (its tool call); the keeper's turn the rest.
        steps = [TOOL_ROUND[0], *TOOL_ROUND]
        keeper.call("session/create", {"session": "kept", "tools": [OPEN_GATE], "model": scripted(steps)})
        leaver.request("session/respond", {"session": "kept", "prompt": "Open!"})
        leaver.tool_call()
        later = keeper.request("session/respond", {"session": "kept", "prompt": "Open again!"})
        leaver.close()
        # The leaver's turn is cancelled, so the keeper's turn (queued behind it) runs; the session stays.
        call = keeper.tool_call()
        keeper.reply(call["id"], {"output": "opened"})
        assert keeper.result(later)["text"] == "Done: opened"
        transcript = keeper.call("session/transcript", {"session": "kept"})["transcript"]["transcript"]
        assert [e["text"] for e in transcript["entries"] if e["type"] == "prompt"] == ["Open again!"]


# --- limits -----------------------------------------------------------------------------------------


def test_connections_beyond_the_limit_are_refused() -> None:
    with ServeProcess(["--tcp", "127.0.0.1:0", "--ws", "127.0.0.1:0", "--max-connections", "2"]) as server:
        with server.tcp() as first, server.ws() as second:
            assert first.call("ping") == {} and second.call("ping") == {}
            for extra in (server.tcp(), server.ws()):
                assert extra.next() == {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32010, "message": "Too many connections (limit 2); try again later.",
                              "data": {"code": "busy", "limit": 2}},
                }
                extra.wait_closed()
                extra.close()
            assert server.get("/health")[2] == '{"status":"ok","connections":2,"sessions":0}'
        assert server.stop() == 0


def test_idle_connections_are_closed_but_busy_ones_are_not() -> None:
    with ServeProcess(["--tcp", "127.0.0.1:0", "--idle-timeout", "0.3"]) as server:
        with server.tcp() as idle, server.tcp() as busy:
            assert idle.call("ping") == {}
            busy.call("session/create", {"session": "g", "tools": [OPEN_GATE], "model": scripted(TOOL_ROUND)})
            turn = busy.request("session/respond", {"session": "g", "prompt": "Open!"})
            call = busy.tool_call()
            idle.wait_closed()
            time.sleep(0.9)  # three idle periods with a tool call outstanding: not idle
            busy.reply(call["id"], {"output": "opened"})
            assert busy.result(turn)["text"] == "Done: opened"
            assert isinstance(busy, TcpPeer)
        assert server.stop() == 0
