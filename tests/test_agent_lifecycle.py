"""Agent lifecycle: cancellation, the commit point, retries, tool execution and compaction.

protocol-core §1.6 (cancellation, commit point), §3.4 (tool timeouts), §4.4 (retries), §2.14
(compaction), §6.6 (tool execution) and §9 items 43, 58-60, 80. Cancellation is driven from inside
the turn (the event sink or the model cancels the caller's scope at a known point), so every test
is deterministic; timeouts are small and only outcomes are asserted.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from oam_actors.agent import (
    DEFAULT_SUMMARY_INSTRUCTIONS,
    Agent,
    AgentOptions,
    Availability,
    ErrorOutput,
    GenerationRequest,
    JsonOutput,
    ModelCapabilities,
    PartialValue,
    RetryPolicy,
    Schema,
    StepKind,
    TextDelta,
    TextOutput,
    ToolCallAbandoned,
    ToolCallCompleted,
    ToolCallStarted,
    ToolDefinition,
    TurnEvent,
    Usage,
    parse_tool_definitions,
)
from oam_actors.agent.transcript import PromptEntry, ResponseEntry, ToolUseEntry
from oam_actors.agent.turn import format_duration
from oam_actors import AgentError, ErrorCode, ManualClock, ScriptStep, ScriptStyle, ScriptedModel

OPEN_GATE = {
    "name": "open_gate",
    "description": "Ask the game to open a gate.",
    "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]},
}
FAST_RETRIES = AgentOptions(retry=RetryPolicy(initial_backoff=0.0))


def gate_tool(**changes: Any) -> ToolDefinition:
    """The external (client) tool ``open_gate``."""
    [tool], _ = parse_tool_definitions([OPEN_GATE])
    return dataclasses.replace(tool, **changes)


def local_tool(handler: Callable[[dict[str, Any]], Any], **changes: Any) -> ToolDefinition:
    return gate_tool(handler=handler, **changes)


def envelope(*steps: ScriptStep) -> ScriptedModel:
    return ScriptedModel(steps, style=ScriptStyle.ENVELOPE)


def open_north() -> ScriptStep:
    return ScriptStep.call("open_gate", {"gate": "north"})


def cancelling(scope: anyio.CancelScope, then: ScriptStep) -> ScriptStep:
    """A step that cancels ``scope`` while the model is serving the request."""

    def play(request: GenerationRequest) -> ScriptStep:
        scope.cancel()
        return then

    return ScriptStep.from_function(play)


async def one_turn(agent: Agent, prompt: str = "Hi") -> None:
    await agent.respond(prompt)


async def cancelled_turn(agent: Agent, when: Callable[[TurnEvent], bool], prompt: str = "Go") -> list[TurnEvent]:
    """Run a turn whose caller cancels it as soon as an event satisfies ``when``."""
    seen: list[TurnEvent] = []
    with anyio.CancelScope() as scope:

        async def sink(event: TurnEvent) -> None:
            seen.append(event)
            if when(event):
                scope.cancel()

        await agent.respond(prompt, emit=sink, on_commit=pytest.fail)
    assert scope.cancelled_caught
    return seen


def assert_no_trace(agent: Agent, history: list[Any]) -> None:
    assert agent.history == history
    assert agent.transcript().entries == history
    assert agent.pending_tool_calls == []


# --- cancellation at each point of a turn ----------------------------------------------------


async def test_cancel_before_the_first_step_uses_no_model_step() -> None:
    model = envelope(ScriptStep.say("One."), ScriptStep.say("Two."))
    agent = Agent(model)
    await one_turn(agent, "a")
    history = list(agent.history)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await agent.respond("b", on_commit=pytest.fail)
    assert scope.cancelled_caught
    assert_no_trace(agent, history)
    assert len(model.requests) == 1
    assert (await agent.respond("c")).text == "Two."  # the third turn gets the second step


async def test_cancel_during_a_model_step() -> None:
    scope = anyio.CancelScope()
    model = envelope(ScriptStep.say("Before."), cancelling(scope, ScriptStep.say("Never shown.")))
    agent = Agent(model)
    await one_turn(agent)
    history = list(agent.history)
    with scope:
        await agent.respond("Again", on_commit=pytest.fail)
    assert scope.cancelled_caught
    assert_no_trace(agent, history)
    assert len(model.requests) == 2


async def test_cancel_while_waiting_on_an_external_tool() -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.say("Open."))
    agent = Agent(model, tools=[gate_tool()])
    started: list[ToolCallStarted] = []
    asked = anyio.Event()

    async def sink(event: TurnEvent) -> None:
        if isinstance(event, ToolCallStarted):
            started.append(event)
            asked.set()

    scope = anyio.CancelScope()

    async def turn() -> None:
        with scope:
            await agent.respond("Open the gate", emit=sink, on_commit=pytest.fail)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(turn)
            await asked.wait()
            call = started[0].call
            assert started[0].execution == "client"
            assert agent.pending_tool_calls == [call.id]
            assert agent.transcript().entries == [PromptEntry("Open the gate")]  # in progress
            assert agent.transcript(include_in_progress=False).entries == []
            scope.cancel()
    assert scope.cancelled_caught
    assert_no_trace(agent, [])
    assert agent.submit_tool_result(call.id, TextOutput("Too late.")) is False


async def test_cancel_after_a_tool_completed() -> None:
    opened: list[dict[str, Any]] = []

    async def open_gate(arguments: dict[str, Any]) -> str:
        opened.append(arguments)
        return "The gate opened."

    model = envelope(ScriptStep.say("Hello."), open_north(), ScriptStep.respond(), ScriptStep.say("Open."))
    agent = Agent(model, tools=[local_tool(open_gate)], options=AgentOptions(max_tool_rounds=0))
    await one_turn(agent)
    history = list(agent.history)
    agent.options = AgentOptions()
    seen = await cancelled_turn(agent, lambda e: isinstance(e, ToolCallCompleted))
    assert opened == [{"gate": "north"}]
    assert sum(isinstance(e, ToolCallCompleted) for e in seen) == 1
    assert not any(isinstance(e, TextDelta) for e in seen)
    assert_no_trace(agent, history)


async def test_cancel_during_the_reply() -> None:
    model = envelope(ScriptStep.say("A long and winding reply.", chunks=5))
    agent = Agent(model)
    seen = await cancelled_turn(agent, lambda e: isinstance(e, TextDelta))
    assert sum(isinstance(e, TextDelta) for e in seen) == 1
    assert_no_trace(agent, [])


async def test_cancel_during_a_structured_step() -> None:
    schema = Schema.compile({"type": "object", "properties": {"a": {"type": "string"}}})
    model = envelope(ScriptStep.say('{"a": "some text here"}', chunks=4))
    agent = Agent(model)
    with anyio.CancelScope() as scope:

        async def sink(event: TurnEvent) -> None:
            if isinstance(event, PartialValue):
                scope.cancel()

        await agent.respond("Go", schema=schema, emit=sink, on_commit=pytest.fail)
    assert scope.cancelled_caught
    assert_no_trace(agent, [])


async def test_after_the_commit_point_the_turn_is_immune() -> None:
    model = envelope(ScriptStep.say("Done."))
    agent = Agent(model)
    with anyio.CancelScope() as scope:
        result = await agent.respond("Go", on_commit=scope.cancel)
        committed = result.text
        await anyio.lowlevel.checkpoint()
        pytest.fail("the scope was cancelled at the commit")
    assert committed == "Done."
    assert agent.history == [PromptEntry("Go"), ResponseEntry("Done.")]


async def test_a_failed_turn_leaves_no_trace_and_does_not_commit() -> None:
    model = envelope(open_north(), ScriptStep.fail(ErrorCode.REFUSAL, "No."))
    agent = Agent(model, tools=[local_tool(lambda _: anyio.lowlevel.checkpoint())])
    with pytest.raises(AgentError) as caught:
        await agent.respond("Go", on_commit=pytest.fail)
    assert (caught.value.code, caught.value.message) == (ErrorCode.REFUSAL, "No.")
    assert_no_trace(agent, [])


# --- retries (§4.4, §9 items 43, 80) ---------------------------------------------------------


def _raise(exc: Exception) -> Callable[[GenerationRequest], ScriptStep]:
    def play(request: GenerationRequest) -> ScriptStep:
        raise exc

    return play


async def test_transient_failures_retry_the_step_not_the_turn() -> None:
    ran: list[dict[str, Any]] = []

    async def open_gate(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        return "Opened."

    model = envelope(
        ScriptStep.fail(ErrorCode.BUSY, "Busy."),
        ScriptStep.from_function(_raise(RuntimeError("socket closed"))),
        open_north(),
        ScriptStep.respond(),
        ScriptStep.say("Open."),
    )
    agent = Agent(model, tools=[local_tool(open_gate)], options=FAST_RETRIES)
    result = await agent.respond("Open")
    assert len(model.requests) == 5
    assert [s.kind.value for s in result.steps] == ["decide", "decide", "respond"]
    assert ran == [{"gate": "north"}]


async def test_cancel_during_a_retry_backoff_makes_no_further_request() -> None:
    scope = anyio.CancelScope()
    model = envelope(cancelling(scope, ScriptStep.fail(ErrorCode.BUSY)), ScriptStep.say("Never."))
    agent = Agent(model, options=AgentOptions(retry=RetryPolicy(initial_backoff=60.0)))
    with scope:
        await agent.respond("Go", on_commit=pytest.fail)
    assert scope.cancelled_caught
    assert len(model.requests) == 1
    assert_no_trace(agent, [])


async def test_a_guardrail_violation_is_not_retried() -> None:
    model = envelope(ScriptStep.fail(ErrorCode.GUARDRAIL_VIOLATION, "Unsafe content."), ScriptStep.say("Hi."))
    with pytest.raises(AgentError) as caught:
        await Agent(model, options=FAST_RETRIES).respond("Go")
    assert caught.value.code is ErrorCode.GUARDRAIL_VIOLATION
    assert len(model.requests) == 1


async def test_guardrail_retries_are_opt_in() -> None:
    model = envelope(ScriptStep.fail(ErrorCode.GUARDRAIL_VIOLATION), ScriptStep.say("Hi."))
    options = AgentOptions(retry=RetryPolicy(initial_backoff=0.0, retries_guardrail_violations=True))
    assert (await Agent(model, options=options).respond("Go")).text == "Hi."


async def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    model = envelope(ScriptStep.fail(ErrorCode.BUSY, "First."), ScriptStep.fail(ErrorCode.BUSY, "Second."), ScriptStep.say("Hi."))
    options = AgentOptions(retry=RetryPolicy(max_attempts=2, initial_backoff=0.0))
    agent = Agent(model, options=options)
    with pytest.raises(AgentError) as caught:
        await agent.respond("Go")
    assert (caught.value.code, caught.value.message) == (ErrorCode.BUSY, "Second.")
    assert len(model.requests) == 2
    assert agent.history == []


async def test_a_backend_bug_is_generation_failed_after_the_retries(caplog: pytest.LogCaptureFixture) -> None:
    boom = ScriptStep.from_function(_raise(RuntimeError("boom")))
    model = envelope(boom, boom, boom, ScriptStep.say("Never."))
    with caplog.at_level(logging.ERROR, logger="oam_actors.agent"), pytest.raises(AgentError) as caught:
        await Agent(model, options=FAST_RETRIES).respond("Go")
    assert caught.value.code is ErrorCode.GENERATION_FAILED
    assert caught.value.message == "The model failed unexpectedly (RuntimeError)."  # its text stays in the log
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert len(model.requests) == 3
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [RuntimeError] * 3


async def test_a_model_bug_is_logged_chained_and_retried_when_the_clock_says() -> None:
    boom = ScriptStep.from_function(_raise(ZeroDivisionError("division by zero")))
    model = envelope(boom, boom, ScriptStep.say("Never."))
    clock = ManualClock()
    agent = Agent(model, options=AgentOptions(retry=RetryPolicy(max_attempts=2, initial_backoff=0.3)), clock=clock)
    failures: list[AgentError] = []

    async def turn() -> None:
        with pytest.raises(AgentError) as caught:
            await agent.respond("Go")
        failures.append(caught.value)

    async with anyio.create_task_group() as group:
        group.start_soon(turn)
        await anyio.wait_all_tasks_blocked()
        clock.advance(0.29)
        await anyio.wait_all_tasks_blocked()
        assert len(model.requests) == 1  # the backoff has not passed yet
        clock.advance(0.01)
    assert len(model.requests) == 2
    [error] = failures
    assert error.code is ErrorCode.GENERATION_FAILED
    assert isinstance(error.__cause__, ZeroDivisionError) and error.__cause__.__traceback__ is not None


async def test_a_retried_model_bug_leaves_its_traceback_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    model = envelope(ScriptStep.from_function(_raise(ZeroDivisionError("division by zero"))), ScriptStep.say("Hi."))
    with caplog.at_level(logging.ERROR, logger="oam_actors.agent"):
        result = await Agent(model, options=FAST_RETRIES, owner="gorm").respond("Go")
    assert result.text == "Hi."
    [record] = [r for r in caplog.records if r.exc_info]
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
    assert "gorm" in record.getMessage() and "ZeroDivisionError: division by zero" in caplog.text


async def test_a_long_rate_limit_is_not_retried() -> None:
    class Limited(ScriptedModel):
        async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
            self.requests.append(request)
            raise AgentError(ErrorCode.RATE_LIMITED, "Quota.", retry_after=30)
            yield ""

    model = Limited(style=ScriptStyle.ENVELOPE)
    with pytest.raises(AgentError) as caught:
        await Agent(model, options=FAST_RETRIES).respond("Go")
    assert caught.value.code is ErrorCode.RATE_LIMITED
    assert caught.value.data()["retryAfterSeconds"] == 30
    assert len(model.requests) == 1


class _StaleThenFresh:
    """A reply step that streams two pieces and fails once, then answers afresh."""

    capabilities = ModelCapabilities()

    def __init__(self) -> None:
        self.calls = 0

    async def availability(self) -> Availability:
        return Availability(available=True)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        self.calls += 1
        if self.calls == 1:
            yield "Stale "
            yield "answer"
            raise AgentError(ErrorCode.BUSY)
        yield "Fresh answer."


async def test_a_retried_reply_restarts_the_text_with_a_reset() -> None:
    texts: list[TextDelta] = []

    async def sink(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            texts.append(event)

    model = _StaleThenFresh()
    result = await Agent(model, options=FAST_RETRIES).respond("Go", emit=sink)
    assert result.text == "Fresh answer."
    assert len(result.steps) == 1  # retries are not new steps
    assert texts == [
        TextDelta("Stale ", "Stale "),
        TextDelta("answer", "Stale answer"),
        TextDelta("Fresh answer.", "Fresh answer.", True),
    ]


async def test_scripted_errors_fail_or_recover_per_code() -> None:
    """§9 item 43 (native script): non-transient errors fail at once and consume one step each."""
    model = ScriptedModel([
        ScriptStep.fail(ErrorCode.GUARDRAIL_VIOLATION, "Unsafe content."),
        ScriptStep.fail(ErrorCode.CONTEXT_SIZE_EXCEEDED),
        ScriptStep.say("Recovered."),
    ])
    agent = Agent(model, options=FAST_RETRIES)
    with pytest.raises(AgentError) as first:
        await agent.respond("a")
    with pytest.raises(AgentError) as second:
        await agent.respond("b")
    assert (first.value.code, first.value.message) == (ErrorCode.GUARDRAIL_VIOLATION, "Unsafe content.")
    assert second.value.code is ErrorCode.CONTEXT_SIZE_EXCEEDED
    assert (await agent.respond("c")).text == "Recovered."
    assert len(agent.history) == 2


async def test_a_scripted_transient_error_consumes_the_next_step() -> None:
    model = ScriptedModel([ScriptStep.fail(ErrorCode.GENERATION_FAILED), ScriptStep.say("Recovered.")])
    result = await Agent(model, options=FAST_RETRIES).respond("Go")
    assert result.text == "Recovered."
    assert len(model.requests) == 2
    assert model.remaining == 0


@pytest.mark.parametrize(
    ("code", "retry_after", "attempt", "expected"),
    [
        (ErrorCode.GENERATION_FAILED, None, 1, True),
        (ErrorCode.BUSY, None, 2, True),
        (ErrorCode.BUSY, None, 3, False),
        (ErrorCode.RATE_LIMITED, None, 1, True),
        (ErrorCode.RATE_LIMITED, 5.0, 1, True),
        (ErrorCode.RATE_LIMITED, 5.5, 1, False),
        (ErrorCode.GUARDRAIL_VIOLATION, None, 1, False),
        (ErrorCode.REFUSAL, None, 1, False),
        (ErrorCode.CONTEXT_SIZE_EXCEEDED, None, 1, False),
        (ErrorCode.CANCELLED, None, 1, False),
    ],
)
def test_retry_policy_decides_per_code(code: ErrorCode, retry_after: float | None, attempt: int, expected: bool) -> None:
    assert RetryPolicy().should_retry(code, retry_after, attempt) is expected


def test_retry_backoff_doubles_and_honours_retry_after() -> None:
    policy = RetryPolicy()
    assert [policy.delay(n, None) for n in (1, 2, 3)] == pytest.approx([0.3, 0.6, 1.2])
    assert policy.delay(1, 2.0) == 2.0
    assert policy.delay(2, 0.1) == pytest.approx(0.6)


# --- external (client) tools (§3.2, §3.4) ----------------------------------------------------


async def external_turn(
    agent: Agent, answer: Callable[[ToolCallStarted], Any] | None
) -> tuple[Any, list[TurnEvent]]:
    """Run a turn; the sink answers each client call at once with ``answer(event)`` (if any)."""
    seen: list[TurnEvent] = []

    async def sink(event: TurnEvent) -> None:
        seen.append(event)
        if isinstance(event, ToolCallStarted) and answer is not None:
            assert agent.submit_tool_result(event.call.id, answer(event)) is True

    with anyio.fail_after(5):
        result = await agent.respond("Open the gate", emit=sink)
    return result, seen


@pytest.mark.parametrize(
    ("output", "model_text", "wire"),
    [
        (TextOutput("The gate opened."), "The gate opened.", ("The gate opened.", False)),
        (JsonOutput({"opened": True}), '{"opened":true}', ({"opened": True}, False)),
        (ErrorOutput("Chain jammed."), "Error: Chain jammed.", ("Chain jammed.", True)),
    ],
)
async def test_an_external_result_reaches_the_record_and_the_model(output: Any, model_text: str, wire: tuple[Any, bool]) -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.template("Saw: {toolOutput}"))
    agent = Agent(model, tools=[gate_tool()])
    result, seen = await external_turn(agent, lambda _: output)
    [record] = result.tool_calls
    assert record.output == output
    assert (record.to_wire()["output"], record.to_wire()["isError"]) == wire
    assert result.text == f"Saw: {model_text}"
    assert agent.history[1] == ToolUseEntry(record.call, output)
    assert agent.pending_tool_calls == []
    assert [type(e) for e in seen if not isinstance(e, TextDelta)].count(ToolCallAbandoned) == 0


async def test_a_result_is_delivered_once_and_only_to_a_waiting_call() -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.say("Open."))
    agent = Agent(model, tools=[gate_tool()])
    assert agent.submit_tool_result("call_unknown", TextOutput("x")) is False

    second: list[bool] = []

    async def sink(event: TurnEvent) -> None:
        if isinstance(event, ToolCallStarted):
            assert agent.submit_tool_result(event.call.id, TextOutput("first"))
            second.append(agent.submit_tool_result(event.call.id, TextOutput("second")))

    result = await agent.respond("Open", emit=sink)
    assert second == [False]
    assert result.tool_calls[0].output == TextOutput("first")


async def test_an_external_tool_times_out_and_the_turn_continues() -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.template("Saw: {toolOutput}"))
    agent = Agent(model, tools=[gate_tool(timeout=0.05)])
    result, seen = await external_turn(agent, None)
    [record] = result.tool_calls
    assert record.output == ErrorOutput("Tool 'open_gate' timed out after 50ms.")
    assert result.text == "Saw: Error: Tool 'open_gate' timed out after 50ms."
    kinds = [type(e).__name__ for e in seen if isinstance(e, ToolCallStarted | ToolCallCompleted | ToolCallAbandoned)]
    assert kinds == ["ToolCallStarted", "ToolCallCompleted", "ToolCallAbandoned"]
    [abandoned] = [e for e in seen if isinstance(e, ToolCallAbandoned)]
    assert abandoned.call == record.call
    assert abandoned.reason == "Error: Tool 'open_gate' timed out after 50ms."
    assert agent.submit_tool_result(record.call.id, TextOutput("late")) is False


async def test_the_session_tool_timeout_applies_when_the_tool_has_none() -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.say("Hm."))
    agent = Agent(model, tools=[gate_tool()], options=AgentOptions(tool_timeout=0.05))
    result, _ = await external_turn(agent, None)
    assert "timed out" in result.tool_calls[0].output.model_text()


async def test_a_zero_timeout_waits_for_the_answer() -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.say("Open."))
    agent = Agent(model, tools=[gate_tool(timeout=0)], options=AgentOptions(tool_timeout=0.01))
    asked = anyio.Event()

    async def sink(event: TurnEvent) -> None:
        if isinstance(event, ToolCallStarted):
            asked.set()

    results: list[Any] = []

    async def turn() -> None:
        results.append(await agent.respond("Open", emit=sink))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(turn)
            await asked.wait()
            await anyio.sleep(0.05)  # longer than the session default, which must not apply
            [call_id] = agent.pending_tool_calls
            assert agent.submit_tool_result(call_id, TextOutput("Opened."))
    assert results[0].tool_calls[0].output == TextOutput("Opened.")


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.05, "50ms"), (0.2, "200ms"), (2, "2s"), (1.5, "1.5s"), (120, "2m"), (90, "90s")]
)
def test_durations_are_written_like_kotlin(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


# --- local tools -----------------------------------------------------------------------------


async def _text(arguments: dict[str, Any]) -> Any:
    return f"Opened {arguments['gate']}."


async def _json(arguments: dict[str, Any]) -> Any:
    return {"opened": True}


async def _error_output(arguments: dict[str, Any]) -> Any:
    return ErrorOutput("Chain jammed.")


async def _raises(arguments: dict[str, Any]) -> Any:
    raise ValueError("Gate subsystem offline")


async def _raises_bare(arguments: dict[str, Any]) -> Any:
    raise KeyError


async def _raises_its_own_timeout(arguments: dict[str, Any]) -> Any:
    raise TimeoutError("The gate controller did not answer.")


async def _raises_agent_error(arguments: dict[str, Any]) -> Any:
    raise AgentError(ErrorCode.BUSY, "Gate busy.")


@pytest.mark.parametrize(
    ("handler", "output"),
    [
        (_text, TextOutput("Opened north.")),
        (_json, JsonOutput({"opened": True})),
        (_error_output, ErrorOutput("Chain jammed.")),
        (_raises, ErrorOutput("Gate subsystem offline")),
        (_raises_bare, ErrorOutput("KeyError")),
        (_raises_its_own_timeout, ErrorOutput("The gate controller did not answer.")),
        (_raises_agent_error, ErrorOutput("Gate busy.")),
    ],
)
async def test_local_tool_outputs(handler: Any, output: Any) -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.say("Done."))
    agent = Agent(model, tools=[local_tool(handler)])
    started: list[str] = []

    async def sink(event: TurnEvent) -> None:
        if isinstance(event, ToolCallStarted):
            started.append(event.execution)

    result = await agent.respond("Open", emit=sink)
    assert result.tool_calls[0].output == output
    assert result.text == "Done."  # a tool's failure never fails the turn
    assert started == ["local"]


async def test_a_local_tool_may_abort_the_turn_with_tool_failed() -> None:
    async def fatal(arguments: dict[str, Any]) -> Any:
        raise AgentError(ErrorCode.TOOL_FAILED, "The gate exploded.")

    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.say("Done."))
    agent = Agent(model, tools=[local_tool(fatal)])
    with pytest.raises(AgentError) as caught:
        await agent.respond("Open")
    assert (caught.value.code, caught.value.message) == (ErrorCode.TOOL_FAILED, "The gate exploded.")
    assert_no_trace(agent, [])


async def _forever(arguments: dict[str, Any]) -> Any:
    await anyio.sleep_forever()


@pytest.mark.parametrize(
    ("tool_timeout", "local_default"), [(0.05, 60.0), (None, 0.05)]
)
async def test_a_local_tool_times_out(tool_timeout: float | None, local_default: float) -> None:
    model = envelope(open_north(), ScriptStep.respond(), ScriptStep.say("Done."))
    options = AgentOptions(local_tool_timeout=local_default)
    agent = Agent(model, tools=[local_tool(_forever, timeout=tool_timeout)], options=options)
    with anyio.fail_after(5):
        result = await agent.respond("Open")
    assert result.tool_calls[0].output == ErrorOutput("Tool 'open_gate' timed out after 50ms.")


# --- compaction (§2.14, §9 items 58-60) ------------------------------------------------------


async def three_turns(model: ScriptedModel, **kwargs: Any) -> Agent:
    agent = Agent(model, **kwargs)
    for prompt in ("a", "b", "c"):
        await agent.respond(prompt)
    return agent


def answers(*texts: str) -> ScriptedModel:
    return ScriptedModel([ScriptStep.say(t) for t in texts])


async def test_compaction_summarises_older_turns_into_the_context_note() -> None:
    model = answers("A.", "B.", "C.", "The player asked three things.")
    agent = await three_turns(model, instructions="You are Mira.")
    committed: list[bool] = []
    summary = await agent.compact(keep_recent_turns=1, on_commit=lambda: committed.append(True))
    assert summary == "The player asked three things."
    assert committed == [True]
    assert agent.history == [PromptEntry("c"), ResponseEntry("C.")]
    assert agent.context_note == summary
    assert agent.system_text == "You are Mira.\n\nThe player asked three things."
    request = model.requests[-1]
    assert request.kind is StepKind.SUMMARY
    assert (request.temperature, request.max_output_tokens) == (0.0, 400)
    assert request.system == DEFAULT_SUMMARY_INSTRUCTIONS
    assert request.prompt == "Conversation:\nUser: a\nAssistant: A.\nUser: b\nAssistant: B."


async def test_compaction_merges_the_previous_note_and_custom_instructions() -> None:
    model = answers("A.", "B.", "C.", "New summary.")
    agent = await three_turns(model, context_note="Old note.")
    assert await agent.compact(keep_recent_turns=0, summary_instructions=" Be brief. ") == "New summary."
    assert agent.history == []
    request = model.requests[-1]
    assert request.system == "Be brief."
    assert request.prompt.startswith("Summary so far:\nOld note.\n\nConversation:\nUser: a\n")


@pytest.mark.parametrize("keep", [3, 5])
async def test_nothing_to_compact_returns_none_without_a_model_call(keep: int) -> None:
    model = answers("A.", "B.", "C.")
    agent = await three_turns(model)
    before = list(agent.history)
    assert await agent.compact(keep_recent_turns=keep) is None
    assert agent.history == before
    assert len(model.requests) == 3
    assert await Agent(answers()).compact(keep_recent_turns=0) is None


async def test_an_empty_summary_fails_and_changes_nothing() -> None:
    model = answers("A.", "B.", "C.", "   ")
    agent = await three_turns(model, context_note="Old note.")
    before = list(agent.history)
    with pytest.raises(AgentError) as caught:
        await agent.compact(keep_recent_turns=1, on_commit=pytest.fail)
    assert caught.value.code is ErrorCode.GENERATION_FAILED
    assert (agent.history, agent.context_note) == (before, "Old note.")


async def test_compaction_is_not_retried() -> None:
    model = ScriptedModel([*(ScriptStep.say(t) for t in "ABC"), ScriptStep.fail(ErrorCode.BUSY), ScriptStep.say("S.")])
    agent = await three_turns(model, options=FAST_RETRIES)
    with pytest.raises(AgentError) as caught:
        await agent.compact(keep_recent_turns=1)
    assert caught.value.code is ErrorCode.BUSY
    assert len(model.requests) == 4
    assert len(agent.history) == 6


async def test_compaction_cancelled_before_it_starts_uses_no_model_step() -> None:
    model = answers("A.", "B.", "C.", "Summary.")
    agent = await three_turns(model)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await agent.compact(keep_recent_turns=1, on_commit=pytest.fail)
    assert scope.cancelled_caught
    assert (len(model.requests), len(agent.history), agent.context_note) == (3, 6, None)


async def test_cancelling_compaction_before_commit_changes_nothing() -> None:
    scope = anyio.CancelScope()
    model = envelope(*(ScriptStep.say(t) for t in "ABC"), cancelling(scope, ScriptStep.say("Summary.")))
    agent = await three_turns(model)
    before = list(agent.history)
    with scope:
        await agent.compact(keep_recent_turns=1, on_commit=pytest.fail)
    assert scope.cancelled_caught
    assert len(model.requests) == 4
    assert (agent.history, agent.context_note) == (before, None)
