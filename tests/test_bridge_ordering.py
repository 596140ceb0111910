"""Ordering, concurrency, cancellation and shutdown through the real ``oam-actors stdio`` process
(reference §1.5-§1.7 and §9 items 38-40, 49-52).

Every assertion is about the order of messages on stdout, never about elapsed time: concurrency is
shown by one session finishing while another is provably still busy (waiting on a client tool or
on a long scripted delay that only a cancel ends).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bridge_process import OPEN_GATE, BridgeProcess, check_order, is_response, scripted

FOREVER = 60000  # ms; a scripted delay that only a cancel ends within the test
TURN_ENDED = "The turn ended before the tool finished."


@pytest.fixture(scope="module")
def bridge() -> Iterator[BridgeProcess]:
    """One process for the tests that use their own sessions and ids."""
    with BridgeProcess() as process:
        yield process
        check_order(process.log)
        assert process.close() == 0


@pytest.fixture
def fresh() -> Iterator[BridgeProcess]:
    """A process of its own, for the tests that end it."""
    with BridgeProcess() as process:
        yield process
        check_order(process.log)


def listed(bridge: BridgeProcess, session: str) -> dict[str, Any]:
    [entry] = [s for s in bridge.call("session/list")["sessions"] if s["session"] == session]
    return entry


def index_of_response(bridge: BridgeProcess, request_id: Any) -> int:
    return bridge.index_of(lambda m: m.get("id") == request_id and is_response(m))


def wait_running(bridge: BridgeProcess, request_id: Any) -> None:
    """Wait until a streamed turn has started a model step (it is running, not queued)."""
    bridge.index_of(
        lambda m: (
            m.get("method") == "session/event"
            and m["params"]["requestId"] == request_id
            and m["params"]["event"]["type"] == "modelStep"
        )
    )


def cancelled(bridge: BridgeProcess, request_id: Any) -> bool:
    error = bridge.error(request_id)
    return (error["code"], error["data"]["code"]) == (-32009, "cancelled")


def respond(bridge: BridgeProcess, session: str, prompt: str, **extra: Any) -> Any:
    return bridge.request("session/respond", {"session": session, "prompt": prompt, **extra})


# --- concurrency and per-session order --------------------------------------------------------------


def test_immediate_requests_overtake_delayed_turns(bridge: BridgeProcess) -> None:
    for name in ("a", "b"):
        bridge.call("session/create", {"session": name, "model": scripted([{"text": "slow", "delayMs": FOREVER}])})
    turns = [respond(bridge, "a", "go"), respond(bridge, "b", "go")]
    create = bridge.request("session/create", {"session": "c", "model": "scripted"})
    listing = bridge.request("session/list")
    assert bridge.result(create)["session"] == "c"
    busy = {s["session"]: s["busy"] for s in bridge.result(listing)["sessions"] if s["session"] in ("a", "b", "c")}
    assert busy == {"a": True, "b": True, "c": False}
    assert not any(is_response(m) and m["id"] in turns for m in bridge.since(0))
    for name in ("a", "b"):
        assert bridge.call("session/cancel", {"session": name})["cancelled"] == 1
    assert all(cancelled(bridge, turn) for turn in turns)
    assert index_of_response(bridge, listing) < min(index_of_response(bridge, turn) for turn in turns)


def test_delayed_turns_of_two_sessions_run_concurrently(bridge: BridgeProcess) -> None:
    bridge.call("session/create", {"session": "long", "model": scripted([{"text": "slow", "delayMs": FOREVER}])})
    bridge.call("session/create", {"session": "short", "model": scripted([{"text": "quick", "delayMs": 200}])})
    slow = respond(bridge, "long", "go", stream=True)
    wait_running(bridge, slow)
    quick = respond(bridge, "short", "go")
    assert bridge.result(quick)["text"] == "quick"  # answered while the other turn still runs
    assert bridge.call("session/cancel", {"session": "long"})["cancelled"] == 1
    assert cancelled(bridge, slow)
    assert index_of_response(bridge, quick) < index_of_response(bridge, slow)


def test_a_session_finishes_while_another_waits_on_its_tool(bridge: BridgeProcess) -> None:
    bridge.call(
        "session/create",
        {
            "session": "waiting",
            "tools": [OPEN_GATE],
            "model": scripted(
                [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"text": "Opened."}]
            ),
        },
    )
    bridge.call("session/create", {"session": "other", "model": scripted([{"text": "Meanwhile.", "delayMs": 50}])})
    blocked = respond(bridge, "waiting", "open")
    call = bridge.tool_call(blocked)
    meanwhile = respond(bridge, "other", "talk")
    assert bridge.result(meanwhile)["text"] == "Meanwhile."
    assert not any(m.get("id") == blocked for m in bridge.log)  # still waiting on the client
    bridge.reply(call["id"], {"output": "ok"})
    assert bridge.result(blocked)["text"] == "Opened."
    assert index_of_response(bridge, meanwhile) < index_of_response(bridge, blocked)


def test_pipelined_requests_keep_arrival_order(bridge: BridgeProcess) -> None:
    lines = [
        {
            "jsonrpc": "2.0",
            "id": "pipe-1",
            "method": "session/create",
            "params": {
                "session": "pipe",
                "model": scripted([{"template": "A:{prompt}", "delayMs": 50}, {"template": "B:{prompt}"}]),
            },
        },
        {
            "jsonrpc": "2.0",
            "id": "pipe-2",
            "method": "session/respond",
            "params": {"session": "pipe", "prompt": "first"},
        },
        {
            "jsonrpc": "2.0",
            "id": "pipe-3",
            "method": "session/respond",
            "params": {"session": "pipe", "prompt": "second"},
        },
        {
            "jsonrpc": "2.0",
            "id": "pipe-4",
            "method": "session/setInstructions",
            "params": {"session": "pipe", "instructions": "Later."},
        },
    ]
    bridge.send_raw("".join(json.dumps(line) + "\n" for line in lines))
    assert bridge.result("pipe-2")["text"] == "A:first"
    assert bridge.result("pipe-3")["text"] == "B:second"
    assert bridge.result("pipe-4") == {"session": "pipe"}
    assert [index_of_response(bridge, i) for i in ("pipe-1", "pipe-2", "pipe-3", "pipe-4")] == sorted(
        index_of_response(bridge, i) for i in ("pipe-1", "pipe-2", "pipe-3", "pipe-4")
    )
    entry = listed(bridge, "pipe")
    assert (entry["instructions"], entry["entries"]) == ("Later.", 4)


def test_turns_of_one_session_answer_in_request_order(bridge: BridgeProcess) -> None:
    steps = [{"template": f"{n}:{{prompt}}", "delayMs": 50 * (6 - n)} for n in range(1, 6)]
    bridge.call("session/create", {"session": "five", "model": scripted(steps)})
    requests = [respond(bridge, "five", f"p{n}") for n in range(1, 6)]
    assert [bridge.result(r)["text"] for r in requests] == [f"{n}:p{n}" for n in range(1, 6)]
    positions = [index_of_response(bridge, r) for r in requests]
    assert positions == sorted(positions)


# --- cancel and delete ------------------------------------------------------------------------------


def test_cancel_ends_the_running_turn_and_the_queued_ones(bridge: BridgeProcess) -> None:
    steps = [{"text": "slow", "delayMs": FOREVER}, {"text": "after the cancel"}]
    bridge.call("session/create", {"session": "slow", "model": scripted(steps)})
    running = respond(bridge, "slow", "one", stream=True)
    wait_running(bridge, running)
    queued = respond(bridge, "slow", "two")
    assert bridge.call("session/cancel", {"session": "slow"}) == {"session": "slow", "cancelled": 2}
    assert cancelled(bridge, running) and cancelled(bridge, queued)
    assert index_of_response(bridge, running) < index_of_response(bridge, queued)
    entry = listed(bridge, "slow")
    assert (entry["entries"], entry["busy"], entry["pendingOperations"]) == (0, False, 0)
    # The queued turn used no model step: the next turn plays the script's second step.
    assert bridge.call("session/respond", {"session": "slow", "prompt": "three"})["text"] == "after the cancel"
    assert bridge.call("session/cancel", {"session": "slow"}) == {"session": "slow", "cancelled": 0}


def test_a_cancelled_queue_does_not_let_later_work_overtake(bridge: BridgeProcess) -> None:
    bridge.call(
        "session/create", {"session": "q", "model": scripted([{"text": "slow", "delayMs": FOREVER}, {"text": "next"}])}
    )
    running = respond(bridge, "q", "one", stream=True)
    wait_running(bridge, running)
    queued = [
        respond(bridge, "q", "two"),
        bridge.request("session/setInstructions", {"session": "q", "instructions": "x"}),
    ]
    bridge.notify("session/cancel", {"session": "q"})
    later = respond(bridge, "q", "three")
    assert cancelled(bridge, running) and all(cancelled(bridge, r) for r in queued)
    assert bridge.result(later)["text"] == "next"
    positions = [index_of_response(bridge, r) for r in (running, *queued, later)]
    assert positions == sorted(positions)
    entry = listed(bridge, "q")
    assert "instructions" not in entry and entry["entries"] == 2


def test_cancel_while_a_tool_call_is_outstanding(bridge: BridgeProcess) -> None:
    bridge.call(
        "session/create",
        {
            "session": "tool",
            "tools": [OPEN_GATE],
            "model": scripted(
                [{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "north"}}]}, {"text": "never"}]
            ),
        },
    )
    request = respond(bridge, "tool", "open")
    call = bridge.tool_call(request)
    bridge.notify("session/cancel", {"session": "tool"})
    assert cancelled(bridge, request)
    _, related = bridge.response(request)
    [cancel] = [m for m in related if m.get("method") == "tool/cancel"]
    assert cancel["params"] == {
        "session": "tool",
        "requestId": request,
        "id": call["id"],
        "callId": call["params"]["call"]["id"],
        "reason": TURN_ENDED,
    }
    assert bridge.exchange(json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": {"output": "late"}})) == []
    assert bridge.call("session/transcript", {"session": "tool"})["transcript"]["transcript"]["entries"] == []


def test_delete_cancels_work_and_frees_the_id(bridge: BridgeProcess) -> None:
    bridge.call("session/create", {"session": "gorm", "model": scripted([{"text": "slow", "delayMs": FOREVER}])})
    running = respond(bridge, "gorm", "one", stream=True)
    wait_running(bridge, running)
    queued = respond(bridge, "gorm", "two")
    assert bridge.call("session/delete", {"session": "gorm"}) == {"session": "gorm", "deleted": True}
    assert cancelled(bridge, running) and cancelled(bridge, queued)
    error = bridge.error(respond(bridge, "gorm", "three"))
    assert (error["code"], error["data"]) == (-32020, {"code": "session_not_found", "session": "gorm"})
    assert bridge.error(bridge.request("session/delete", {"session": "gorm"}))["code"] == -32020
    assert "gorm" not in [s["session"] for s in bridge.call("session/list")["sessions"]]
    assert bridge.call("session/create", {"session": "gorm", "model": "scripted"})["session"] == "gorm"


def test_a_turn_waiting_on_a_tool_is_cancelled_by_delete(bridge: BridgeProcess) -> None:
    bridge.call(
        "session/create",
        {
            "session": "door",
            "tools": [OPEN_GATE],
            "model": scripted([{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "west"}}]}]),
        },
    )
    request = respond(bridge, "door", "open")
    call = bridge.tool_call(request)
    bridge.call("session/delete", {"session": "door"})
    assert cancelled(bridge, request)
    _, related = bridge.response(request)
    assert [m["params"]["id"] for m in related if m.get("method") == "tool/cancel"] == [call["id"]]


# --- shutdown and exit --------------------------------------------------------------------------------


def test_shutdown_answers_everything_before_its_own_answer() -> None:
    with BridgeProcess() as bridge:
        bridge.call("session/create", {"session": "long", "model": scripted([{"text": "slow", "delayMs": FOREVER}])})
        bridge.call(
            "session/create",
            {
                "session": "tool",
                "tools": [OPEN_GATE],
                "model": scripted([{"toolCalls": [{"name": "open_gate", "arguments": {"gate": "south"}}]}]),
            },
        )
        running = respond(bridge, "long", "one", stream=True)
        wait_running(bridge, running)
        queued = respond(bridge, "long", "two")
        waiting = respond(bridge, "tool", "open")
        call = bridge.tool_call(waiting)
        shutdown_line = {"jsonrpc": "2.0", "id": "bye", "method": "shutdown"}
        after = [
            {"jsonrpc": "2.0", "method": "ping"},
            {"jsonrpc": "2.0", "id": "late", "method": "ping"},
            {"jsonrpc": "2.0", "id": "later", "method": "session/list"},
        ]
        # One write: the lines after shutdown are already read when it is answered.
        bridge.send_raw("".join(json.dumps(m) + "\n" for m in (shutdown_line, *after)))
        assert bridge.wait_exit() == 0
        assert all(cancelled(bridge, r) for r in (running, queued, waiting))
        done = index_of_response(bridge, "bye")
        assert bridge.log[done] == {"jsonrpc": "2.0", "id": "bye", "result": {}}
        assert max(index_of_response(bridge, r) for r in (running, queued, waiting)) < done
        cancel = bridge.index_of(lambda m: m.get("method") == "tool/cancel")
        assert bridge.log[cancel]["params"]["id"] == call["id"] and cancel < index_of_response(bridge, waiting)
        tail = [m for m in bridge.log[done + 1 :]]
        assert [(m["id"], m["error"]["code"], m["error"]["data"]["code"]) for m in tail] == [
            ("late", -32023, "shut_down"),
            ("later", -32023, "shut_down"),
        ]
        check_order(bridge.log)


def test_the_process_exits_after_shutdown_with_nothing_pending(fresh: BridgeProcess) -> None:
    assert fresh.call("shutdown") == {}
    assert fresh.wait_exit() == 0


def test_end_of_input_lets_pending_turns_answer_then_exits(fresh: BridgeProcess) -> None:
    fresh.call(
        "session/create", {"session": "piped", "model": scripted([{"text": "one", "delayMs": 100}, {"text": "two"}])}
    )
    requests = [respond(fresh, "piped", "a"), respond(fresh, "piped", "b")]
    fresh.close_input()
    assert fresh.wait_exit() == 0
    assert [fresh.result(r)["text"] for r in requests] == ["one", "two"]


def test_end_of_input_fails_outstanding_and_later_tool_calls(fresh: BridgeProcess) -> None:
    calls = [{"name": "open_gate", "arguments": {"gate": "n"}}, {"name": "open_gate", "arguments": {"gate": "s"}}]
    fresh.call(
        "session/create",
        {
            "session": "orphan",
            "tools": [OPEN_GATE],
            "options": {"toolTimeoutSeconds": 0},
            "model": scripted([{"toolCalls": calls}, {"template": "T:{toolOutputs}"}]),
        },
    )
    request = respond(fresh, "orphan", "open")
    fresh.tool_call(request)
    fresh.close_input()
    assert fresh.wait_exit() == 0
    result = fresh.result(request)
    gone = "Error: The client closed its input before answering."
    assert result["text"] == f"T:{gone}\n{gone}"
    assert [r["isError"] for r in result["toolCalls"]] == [True, True]
