"""The pool as the agent's model and as the system model of a real ``oam-actors stdio`` process:
a rerouted step never runs a tool twice; ``model/status`` and ``model/availability``; clear
errors for a misconfigured pool on the command line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import anyio

from bridge_process import BridgeProcess
from oam_actors.agent import Agent, AgentOptions, parse_tool_definitions
from oam_actors import ErrorCode
from oam_actors.models.device import SimulatedPhone

from test_pool_errors import farm, phone

GUARD = 20.0


async def test_a_step_rerouted_after_a_tool_ran_does_not_run_the_tool_again() -> None:
    ran: list[dict[str, Any]] = []

    async def check_menu(arguments: dict[str, Any]) -> Any:
        ran.append(arguments)
        return {"ale": 3, "stew": 5}

    [tool], _ = parse_tool_definitions([{"name": "check_menu", "description": "See the menu."}])
    # Phone 1 allows one generation: the decide step that calls the tool runs there, the next
    # decide step (after the tool ran) is refused BUSY and moves to phone 2, and so does the reply.
    async with farm(phone(quota_requests=1, tool_call_rate=1.0), phone(tool_call_rate=1.0)) as f:
        agent = Agent(f.pool, instructions="You are Gorm, the innkeeper.",
                      tools=[dataclasses.replace(tool, handler=check_menu)], options=AgentOptions())
        result = await agent.respond("What's on the menu tonight?")
        stats = f.pool.statistics_nowait()
    assert ran == [{}]
    assert [s.kind.value for s in result.steps] == ["decide", "decide", "respond"]
    assert [(r.call.name, r.output.is_error) for r in result.tool_calls] == [("check_menu", False)]
    assert 'check_menu says {"ale":3,"stew":5}.' in result.text
    assert (stats.quota_events_absorbed, stats.rerouted, f.admitted()) == (1, 1, [1, 2])


def test_model_status_and_availability_of_a_farm_through_stdio() -> None:
    with BridgeProcess(["--model", "farm:2", "--farm-time-scale", "0.01"]) as bridge:
        methods = bridge.call("initialize", {})["capabilities"]["methods"]
        availability = bridge.call("model/availability")
        bridge.call("session/create", {"session": "guard"})
        reply = bridge.call("session/respond", {"session": "guard", "prompt": "Good morning!"})
        status = bridge.call("model/status")
        assert bridge.close() == 0
    assert "model/status" in methods
    assert availability["available"] is True and availability["contextSize"] == 4000
    assert availability["detail"] == "2 of 2 devices ready, 0 cooling down, 0 dead."
    assert reply["text"]
    stats = status["statistics"]
    assert status["availability"] == availability
    assert [(d["name"], d["state"]) for d in stats["devices"]] == [("phone1", "ready"), ("phone2", "ready")]
    assert stats["stepsOk"] == sum(d["ok"] for d in stats["devices"]) >= 1
    assert (stats["quotaEventsSurfaced"], stats["dead"]) == (0, 0)
    assert set(stats["queueWait"]) == {"dialogue", "decision", "background"}


async def closed_port() -> int:
    phone_ = SimulatedPhone(phone())
    async with phone_:
        return phone_.port


def test_an_unreachable_device_is_reported_and_each_turn_fails_model_unavailable() -> None:
    port = anyio.run(closed_port)
    with BridgeProcess(["--device", f"http://127.0.0.1:{port}"]) as bridge:
        availability = bridge.call("model/availability")
        bridge.call("session/create", {"session": "guard"})
        error = bridge.error(bridge.request("session/respond", {"session": "guard", "prompt": "Hello"}))
        status = bridge.call("model/status")
        assert bridge.close() == 0
    assert (availability["available"], availability["reason"]) == (False, "unknown")
    assert availability["detail"] == "0 of 1 devices ready, 0 cooling down, 1 dead."
    assert error["data"]["code"] == ErrorCode.MODEL_UNAVAILABLE.wire
    assert "device1: status check failed" in error["message"]
    assert status["statistics"]["devices"][0]["state"] == "dead"
    assert f"127.0.0.1:{port}" in bridge.stderr  # logged at start-up


def run_stdio(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "oam_actors", "stdio", *args], input="", capture_output=True,
                          text=True, timeout=GUARD)


def test_a_misconfigured_pool_refuses_to_start_with_a_clear_message() -> None:
    cases = {
        ("--model", "farm:0"): "a farm needs at least one phone",
        ("--model", "farm"): "write farm:N",
        ("--device", "http://127.0.0.1:9", "--device", "HTTP://127.0.0.1:9/"): "is listed twice",
        ("--device", "ftp://phone:9"): "must look like http://HOST:PORT",
        ("--device", "http://127.0.0.1:9", "--model", "scripted"): "not both",
    }
    for args, message in cases.items():
        completed = run_stdio(*args)
        assert completed.returncode != 0 and message in completed.stderr, (args, completed.stderr)
        assert completed.stdout == ""


def test_simulate_on_the_farm_reports_devices_queue_waits_and_quota_events(tmp_path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "oam_actors", "simulate", "--phones", "2", "--sessions", "4", "--npcs", "3",
         "--duration", "4", "--think", "0.2", "--report-dir", str(tmp_path), "--progress-interval", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    backend = report["backend"]
    # The live display (its last plain line), the summary line and the report name each quota
    # figure the same way, with the same value.
    quota = report["quota"]
    [summary] = [line for line in completed.stdout.splitlines() if "Jain" in line]
    final = [line for line in completed.stderr.splitlines() if line.startswith("simulate: done")][-1]
    for words, value in (("pool quota refusals absorbed", quota["refusalsAbsorbedByPool"]),
                         ("pool steps given up (queue time ran out)", quota["stepsGivenUpByPool"]),
                         ("turns failed rate_limited", quota["rateLimitedTurns"])):
        assert f"{words} {value}" in summary and f"{words} {value}" in final, (words, summary, final)
    assert "surfaced" not in summary + final
    assert summary.startswith(f"{report['turns']['total']} turns in {report['elapsedSeconds']:.0f} s")
    assert report["config"]["backend"] == "farm" and report["fairness"]["owners"] == 7
    assert report["turns"]["byOutcome"].get("ok", 0) > 0
    assert [d["name"] for d in backend["devices"]] == ["phone1", "phone2"]
    assert all(0 < d["utilisation"] <= 1 for d in backend["devices"])
    assert backend["stepsOk"] == sum(d["ok"] for d in backend["devices"])
    assert report["quota"]["refusalsAbsorbedByPool"] == backend["quotaEventsAbsorbed"]
    assert report["quota"]["stepsGivenUpByPool"] == backend["quotaEventsSurfaced"]
    assert set(report["queueWait"]) == {"dialogue", "decision", "background"}
    assert report["queueWait"]["dialogue"]["count"] > 0
    html = (tmp_path / "report.html").read_text()
    assert "Device utilisation" in html and "Queue wait for a device" in html
