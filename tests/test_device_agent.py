"""End to end: the agent loop over a ``DeviceModel`` against a simulated phone, and the
``oam-actors device --simulate`` command as a real subprocess."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from oam_actors.agent import Agent, AgentOptions, Schema, parse_tool_definitions
from oam_actors import AgentError, ErrorCode
from oam_actors.models.device import DeviceModel, PhoneConfig, SimulatedPhone

GUARD = 20.0  # seconds; only so that a broken test fails instead of hanging the suite
ROOT = Path(__file__).resolve().parents[1]
MENU = {"ale": 3, "stew": 5}


class Kitchen:
    """The local tools of the turn; remembers every call it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

    async def check_menu(self, arguments: dict[str, Any]) -> Any:
        self.ran.append(("check_menu", arguments))
        return MENU

    def tools(self) -> list[Any]:
        definitions, _ = parse_tool_definitions([{"name": "check_menu", "description": "See the menu."}])
        return [dataclasses.replace(t, handler=self.check_menu) for t in definitions]


async def run_turns(config: PhoneConfig, *prompts: str, phone: list[SimulatedPhone] | None = None,
                    **respond: Any) -> tuple[list[Any], Kitchen]:
    """Run ``prompts`` as consecutive turns of one agent on one phone (appended to ``phone``)."""
    kitchen = Kitchen()
    with anyio.fail_after(GUARD):
        async with SimulatedPhone(config) as running, DeviceModel(running.url) as model:
            if phone is not None:
                phone.append(running)
            agent = Agent(model, instructions="You are Gorm, the innkeeper.", tools=kitchen.tools(),
                          options=AgentOptions())
            return [await agent.respond(prompt, **respond) for prompt in prompts], kitchen


async def run_turn(config: PhoneConfig, prompt: str, **respond: Any) -> tuple[Any, Kitchen]:
    [result], kitchen = await run_turns(config, prompt, **respond)
    return result, kitchen


async def test_an_agent_turn_with_a_local_tool_completes_on_a_simulated_phone() -> None:
    result, kitchen = await run_turn(PhoneConfig(time_scale=0.001, tool_call_rate=1.0), "What's on the menu tonight?")
    assert kitchen.ran == [("check_menu", {})]
    assert [s.kind.value for s in result.steps] == ["decide", "decide", "respond"]
    assert [(r.call.name, r.output.is_error) for r in result.tool_calls] == [("check_menu", False)]
    assert 'check_menu says {"ale":3,"stew":5}.' in result.text
    assert result.usage.input_tokens > 0 and result.usage.cached_input_tokens > 0


async def test_malformed_decisions_are_repaired_and_the_turn_still_completes() -> None:
    config = PhoneConfig(time_scale=0.001, tool_call_rate=1.0, malformed_rate=1.0)
    result, kitchen = await run_turn(config, "What's on the menu tonight?")
    assert [(s.kind.value, s.is_repair) for s in result.steps] == [
        ("decide", False), ("decide", True), ("decide", False), ("decide", True), ("respond", False)]
    assert kitchen.ran == [("check_menu", {})] and result.text


async def test_a_structured_turn_gets_a_value_of_its_schema() -> None:
    schema = Schema.compile({"type": "object", "properties": {
        "emotion": {"type": "string", "enum": ["happy", "wary"]},
        "line": {"type": "string"},
        "ends_conversation": {"type": "boolean"}}, "required": ["emotion", "line"]})
    result, _ = await run_turn(PhoneConfig(time_scale=0.001, tool_call_rate=0.0), "Who are you?", schema=schema)
    assert schema.validate(result.structured) == []
    assert result.structured["emotion"] in ("happy", "wary")


async def test_a_busy_phone_with_a_long_retry_delay_fails_the_turn_as_rate_limited() -> None:
    # A decide step and then a reply step: the reply step is over the quota of 1 per minute.
    config = PhoneConfig(quota_requests=1, tool_call_rate=0.0, first_token_latency_s=0.0, tokens_per_s=0.0)
    with pytest.raises(AgentError) as caught:
        await run_turn(config, "Hello there")
    assert caught.value.code is ErrorCode.RATE_LIMITED
    assert caught.value.data()["retryAfterSeconds"] == 60  # over the retry policy's 5 s: not retried


async def test_the_agent_waits_out_a_short_busy_delay_and_the_turn_succeeds() -> None:
    # Each turn is a decide and a reply step. 2 requests per 60 phone seconds at time_scale 0.005: the
    # second turn's first step is refused with a delay of about 0.3 s, which the retry policy honours.
    config = PhoneConfig(time_scale=0.005, quota_requests=2, tool_call_rate=0.0)
    phone: list[SimulatedPhone] = []
    results, _ = await run_turns(config, "Hello there", "Hello again", phone=phone)
    assert [bool(r.text) for r in results] == [True, True]
    assert phone[0].statistics().refused == {"BUSY": 1}


def test_the_device_command_serves_a_simulated_phone_and_prints_its_url() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "oam_actors", "device", "--simulate", "--port", "0", "--seed", "1",
         "--time-scale", "0.001"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        url = process.stdout.readline().strip() if process.stdout else ""
        assert url.startswith("http://127.0.0.1:"), process.stderr.read() if process.stderr else ""
        with httpx.Client(base_url=url, trust_env=False, timeout=GUARD) as client:
            status = client.get("/v1/availability").json()
            answer = client.post("/v1/generate", json={"prompt": "Hello"})
        assert (status["status"], status["features"]["modelName"]) == ("available", "nano-v3")
        lines = answer.text.splitlines()
        assert answer.headers["content-type"] == "application/x-ndjson"
        assert '"type":"done"' in lines[-1] and all('"type":"text"' in line for line in lines[:-1])
    finally:
        process.terminate()
        process.wait(timeout=GUARD)
