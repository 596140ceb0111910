"""One scripted agent turn with one tool round: turns per second, and where a step's time goes.

A turn here is decide (the model calls `take_order`) → the local tool runs → decide (respond) →
the reply step: three model steps. The scripted model costs nearly nothing, so the figures are the
agent engine's own overhead. The per-step parts are timed separately:

- parse: reading the model's envelope (`parse_envelope`) from its text;
- validate: coercing and validating the arguments against the tool's schema (`Schema.conform`);
- render: building the decide step's task and prompt (`decide_task` + `build_prompt`).

A second figure runs one agent for ``--conversation`` turns, so each turn shows a longer history.

Run: python3 benchmarks/bench_agent.py [--turns 3000] [--conversation 300] [--profile agent.prof]
(with ``--profile`` the turns run under cProfile, their figure is not the benchmark's, and the top
entries are printed).
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import time
from collections.abc import Callable

import anyio
from _profiling import load_average, print_top, profiled

from oam_actors.agent import Agent, Schema, ToolDefinition
from oam_actors.agent import prompts
from oam_actors.agent.envelope import parse_envelope
from oam_actors.agent.transcript import PromptEntry, ResponseEntry
from oam_actors.models import ScriptCall, ScriptedModel, ScriptStep

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "item": {"type": "string", "enum": ["ale", "stew", "bread"], "description": "menu item"},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["item", "quantity"],
}


async def take_order(arguments: dict) -> dict:
    return {"ok": True, **arguments}


def make_tools() -> list[ToolDefinition]:
    return [
        ToolDefinition("take_order", "Order food.", Schema.compile(ORDER_SCHEMA), handler=take_order),
        ToolDefinition("check_menu", "List the menu.", Schema.empty_object(), handler=take_order),
    ]


async def run_turns(count: int) -> float:
    tools = make_tools()
    started = time.perf_counter()
    for _ in range(count):
        model = ScriptedModel([
            ScriptStep.tool_calls(ScriptCall("take_order", {"item": "Ale", "quantity": "2"})),
            ScriptStep.template("Coming right up: {toolOutput}"),
        ])
        agent = Agent(model, instructions="You are Mira, the innkeeper.", tools=tools)
        await agent.respond("Two ales, please.")
    return count / (time.perf_counter() - started)


async def run_conversation(count: int) -> float:
    """``count`` turns of one agent: the history grows by four entries a turn."""
    tools = make_tools()
    steps = [
        ScriptStep.tool_calls(ScriptCall("take_order", {"item": "Ale", "quantity": "2"})),
        ScriptStep.template("Coming right up: {toolOutput}"),
    ]
    agent = Agent(ScriptedModel(steps * count), instructions="You are Mira, the innkeeper.", tools=tools)
    started = time.perf_counter()
    for _ in range(count):
        await agent.respond("Two ales, please.")
    return count / (time.perf_counter() - started)


def per_call(fn: Callable[[], object], repeat: int) -> float:
    """Microseconds per call."""
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--conversation", type=int, default=300, help="turns of the one long conversation")
    parser.add_argument("--profile", metavar="PATH", help="profile the turns into PATH and print the top entries")
    args = parser.parse_args()
    with profiled(args.profile):
        turns_per_second = anyio.run(run_turns, args.turns)
    if args.profile:
        print(f"profiled run ({load_average()}): {turns_per_second:,.0f} turns/s")
        print_top(args.profile)
        return
    conversation = anyio.run(run_conversation, args.conversation)
    tools = make_tools()
    schema = tools[0].schema
    text = 'Sure! {"action": "take_order", "arguments": {"item": "Ale", "quantity": "2"}}'
    names = [t.name for t in tools]
    history = [PromptEntry("Hello"), ResponseEntry("Welcome to the inn!")] * 3
    labels = prompts.Labels()

    def render() -> str:
        task = prompts.decide_task(tools, allow_respond=True, last_message="Two ales, please.")
        return prompts.build_prompt(history=history, prompt="Two ales, please.", turn_tool_uses=[], task=task, labels=labels)

    parse_us = per_call(lambda: parse_envelope(text, names, allow_respond=True), 20000)
    validate_us = per_call(lambda: schema.conform({"item": "Ale", "quantity": "2"}), 20000)
    render_us = per_call(render, 20000)
    print(f"scripted turns with one tool round (3 model steps): {turns_per_second:,.0f} turns/s "
          f"({1e6 / turns_per_second:,.0f} µs per turn; {load_average()})")
    print(f"one conversation of {args.conversation} such turns (history trimmed to the context): "
          f"{conversation:,.0f} turns/s ({1e6 / conversation:,.0f} µs per turn)")
    print(f"per decide step: parse {parse_us:.1f} µs, validate {validate_us:.1f} µs, render {render_us:.1f} µs")


if __name__ == "__main__":
    main()
