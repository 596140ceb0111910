"""One turn of the envelope tool loop (the Android design, for models without native tools).

::

    rounds = calls = 0
    respond_now = choice is none, or no enabled tools and no forced tool
    while not respond_now and rounds < max_tool_rounds and calls < max_tool_calls:
        decision = first-round rule, else decide(enabled tools, respond allowed)
        respond → respond_now;  call → execute, rounds += 1, calls += 1
        failed  → a known tool: record the rejected call (round + call); respond_now
    then the structured step (schema turn) or the reply step; commit

Every model step is retried on transient errors (never the whole turn, so a tool never runs
twice); every invalid answer gets exactly one repair that quotes the problem. Nothing is added to
the agent's history until the commit at the very end, which is synchronous: a turn is either in
the history or cancelled, never both.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec

from ..clock import Clock
from ..errors import AgentError, DeadlinePassed, ErrorCode, OamError
from . import prompts
from .cancellation import cancel_scope
from .deadlines import deadlines_for
from .envelope import Invalid, Respond, argument_candidates, parse_envelope, quote_answer
from .events import (
    ModelStep,
    PartialValue,
    StepInfo,
    TextDelta,
    ToolCallAbandoned,
    ToolCallCompleted,
    ToolCallingMode,
    ToolCallStarted,
    TurnEvent,
    TurnResult,
    TurnUsage,
)
from .lenient_json import complete_prefix, find_json, has_complete_value
from .external import ExternalCalls
from .model import GenerationRequest, LanguageModel, StepKind, ToolSpec, Usage, estimate_tokens
from .policy import AgentOptions, ToolChoiceKind
from .reply import ReplyCleaner
from .schema import Schema, format_violations
from .tools import (
    ErrorOutput,
    JsonOutput,
    TextOutput,
    ToolCall,
    ToolCallRecord,
    ToolDefinition,
    ToolOutput,
    new_call_id,
    output_from_value,
)
from .transcript import Entry, PromptEntry, ResponseEntry, ToolUseEntry

__all__ = ["DecideOffer", "Turn", "TurnHost", "decide_offer", "format_duration"]

_log = logging.getLogger(__name__)

DecideOffer = tuple[tuple[str, str], tuple[str, ...], dict[str, ToolDefinition]]
"""A decide step's offer: the task's tool parts, the tools' names, the tools by name."""

# Shared by every agent offering the same tool objects (a crowd's NPCs, fresh agents over one
# tool list): keyed by their identities, each held by its entry so no other object takes an id
# while it is a key. The most recently used offers are kept.
_DECIDE_OFFERS: OrderedDict[tuple[Any, ...], tuple[tuple[ToolDefinition, ...], DecideOffer]] = OrderedDict()
_DECIDE_OFFERS_KEPT = 256


def decide_offer(tools: Sequence[ToolDefinition], *, allow_respond: bool) -> DecideOffer:
    """What a decide step offers ``tools`` with: the task's tool parts
    (:func:`prompts.decide_task_parts`), the names, the tools by name (not to be changed: shared)."""
    key = (allow_respond, *map(id, tools))
    kept = _DECIDE_OFFERS.get(key)
    if kept is not None:
        _DECIDE_OFFERS.move_to_end(key)
        return kept[1]
    offer = (
        prompts.decide_task_parts(tools, allow_respond=allow_respond),
        tuple(t.name for t in tools), {t.name: t for t in tools},
    )
    _DECIDE_OFFERS[key] = (tuple(tools), offer)
    if len(_DECIDE_OFFERS) > _DECIDE_OFFERS_KEPT:
        _DECIDE_OFFERS.popitem(last=False)
    return offer


def format_duration(seconds: float) -> str:
    """Kotlin-style short durations: ``200ms``, ``2s``, ``1.5s``, ``2m``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


@dataclass
class _Failed:
    problem: str
    tool: ToolDefinition | None = None
    arguments: Any = None


@dataclass
class _Decided:
    tool: ToolDefinition
    arguments: dict[str, Any]


_RESPOND = object()


@dataclass(slots=True)  # not frozen: a frozen init sets each field through object.__setattr__
class _Stable:
    system: str
    system_tokens: int
    fixed_tokens: int  # of the system text and the user's prompt
    budget: int  # input tokens a step may use


@dataclass(slots=True, eq=False)  # never changed once made (a turn makes a new one per tool use); shareable
class _ToolUses:
    count: int
    lines: tuple[str, ...]
    tokens: int
    outputs: tuple[str, ...]  # each output's model text


_NO_USES = _ToolUses(0, (), 0, ())


class TurnHost(Protocol):
    """What a turn reads of the agent running it (:class:`~.agent.Agent`)."""

    model: LanguageModel
    tools: list[ToolDefinition]
    history: list[Entry]
    owner: str | None
    clock: Clock
    external_calls: ExternalCalls

    @property
    def system_text(self) -> str: ...

    def step_lines(self, options: AgentOptions) -> prompts.HistoryLines: ...


@dataclass
class Turn:
    """The state of one running turn. Created and run by :meth:`Agent.respond`."""

    agent: TurnHost
    prompt: str
    schema: Schema | None
    options: AgentOptions
    emit: Callable[[TurnEvent], Any] | None
    partial_values: bool = True
    text_deltas: bool = True
    step_events: bool = True
    steps: list[StepInfo] = field(default_factory=list)
    records: list[ToolCallRecord] = field(default_factory=list)
    tool_uses: list[ToolUseEntry] = field(default_factory=list)
    usage: TurnUsage = field(default_factory=TurnUsage)
    rounds: int = 0
    calls: int = 0
    succeeded: list[tuple[str, Any]] = field(default_factory=list)
    _shown: prompts.HistoryLines | None = field(default=None, init=False, repr=False)
    _uses: _ToolUses = field(default=_NO_USES, init=False, repr=False)
    _specs: dict[str, ToolSpec] = field(default_factory=dict, init=False, repr=False)
    _decide_tasks: dict[bool, str] = field(default_factory=dict, init=False, repr=False)
    _stable: _Stable | None = field(default=None, init=False, repr=False)
    # The step prompts' text before the task, by (entries hidden, tool uses shown).
    _bodies: dict[tuple[int, int], str] = field(default_factory=dict, init=False, repr=False)
    _offered: tuple[list[ToolDefinition], tuple[ToolSpec, ...]] | None = field(default=None, init=False, repr=False)
    _base_requests: dict[bool, GenerationRequest] = field(default_factory=dict, init=False, repr=False)

    def resume(self, tool_uses: Sequence[ToolUseEntry]) -> None:
        """Continue a turn whose first tool rounds ran elsewhere (a stateless client sends their
        results back): they count towards the round and call budgets and the dedupe, and the
        step prompts show them as this turn's tool lines."""
        self.tool_uses = list(tool_uses)
        self.rounds = self.calls = len(self.tool_uses)
        self.succeeded = [(use.call.name, use.call.arguments) for use in self.tool_uses if not use.output.is_error]

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> tuple[TurnResult, list[Entry]]:
        """Run to the end; returns the result and the entries to commit. Raises AgentError."""
        tools = self._enabled_tools()
        choice = self.options.tool_choice
        forced = self._forced_tool()
        respond_now = choice.kind is ToolChoiceKind.NONE or (not tools and forced is None)
        first = True
        while not respond_now and self.rounds < self.options.max_tool_rounds and self.calls < self.options.max_tool_calls:
            decision = await self._first_decision(tools, forced) if first else await self._decide(tools, allow_respond=True)
            first = False
            if decision is _RESPOND:
                respond_now = True
            elif isinstance(decision, _Decided):
                await self._execute(decision.tool, decision.arguments)
            else:
                assert isinstance(decision, _Failed)
                if decision.tool is not None:
                    await self._reject(decision)
                respond_now = True
            # After a forced first call, later rounds decide among the enabled tools, if any.
            respond_now = respond_now or not tools
        if self.schema is not None:
            structured = await self._structured_step()
            text = msgspec.json.encode(structured).decode()
            response = ResponseEntry(text, structured)
        else:
            text = await self._respond_step()
            structured = msgspec.UNSET
            response = ResponseEntry(text)
        entries: list[Entry] = [PromptEntry(self.prompt), *self.tool_uses, response]
        result = TurnResult(text, list(self.records), self.usage, list(self.steps), structured)
        return result, entries

    def _enabled_tools(self) -> list[ToolDefinition]:
        enabled = self.options.enabled_tools
        return [t for t in self.agent.tools if enabled is None or t.name in enabled]

    def _forced_tool(self) -> ToolDefinition | None:
        choice = self.options.tool_choice
        if choice.kind is not ToolChoiceKind.TOOL:
            return None
        for tool in self.agent.tools:
            if tool.name == choice.tool:
                return tool
        raise AgentError(ErrorCode.INVALID_REQUEST, f"The forced tool '{choice.tool}' is not a tool of this session.")

    async def _first_decision(self, tools: list[ToolDefinition], forced: ToolDefinition | None) -> Any:
        kind = self.options.tool_choice.kind
        if forced is not None:
            if forced.schema.is_empty_object:
                return _Decided(forced, {})
            return await self._tool_arguments(forced)
        if kind is ToolChoiceKind.REQUIRED:
            if len(tools) == 1:
                return await self._tool_arguments(tools[0])
            return await self._decide(tools, allow_respond=False)
        return await self._decide(tools, allow_respond=True)

    # --- decide and toolArguments steps ------------------------------------------------------

    async def _decide(self, tools: list[ToolDefinition], *, allow_respond: bool) -> Any:
        mode = ToolCallingMode.ALLOWED if allow_respond else ToolCallingMode.REQUIRED
        # The same for every round of this turn (the tools and the prompt do not change).
        parts, names, by_name = decide_offer(tools, allow_respond=allow_respond)
        task = self._decide_tasks.get(allow_respond)
        if task is None:
            task = self._decide_tasks[allow_respond] = prompts.decide_task_with(parts, self.prompt)

        def interpret(text: str) -> Any:
            envelope = parse_envelope(text, names, allow_respond=allow_respond)
            if isinstance(envelope, Respond):
                return _RESPOND
            if isinstance(envelope, Invalid):
                return _Failed(envelope.problem)
            return self._conform(by_name[envelope.tool], envelope.candidates, dedupe=allow_respond or self.rounds > 0)

        return await self._with_repair(StepKind.DECIDE, mode, names, task, interpret, tools=tools)

    async def _tool_arguments(self, tool: ToolDefinition) -> Any:
        task = prompts.tool_arguments_task(tool)

        def interpret(text: str) -> Any:
            found = find_json(text)
            if not isinstance(found, dict):
                return _Failed("the answer was not a JSON object", tool, None)
            # The object as written nearly always is the arguments (the first candidate): the
            # envelope readings around it are worked out only when it is not.
            decided = self._conform(tool, (found,), dedupe=False)
            if isinstance(decided, _Decided):
                return decided
            return self._conform(tool, argument_candidates(found, tool.name), dedupe=False)

        return await self._with_repair(
            StepKind.TOOL_ARGUMENTS, ToolCallingMode.REQUIRED, (tool.name,), task, interpret, tools=[tool]
        )

    def _conform(self, tool: ToolDefinition, candidates: Any, *, dedupe: bool) -> Any:
        first: tuple[Any, list[Any]] | None = None
        for candidate in candidates:
            value, violations = tool.schema.conform(candidate)
            if not violations:
                if not isinstance(value, dict):
                    violations = []  # a non-object argument value is not callable; keep looking
                    continue
                if dedupe and self.options.dedupe_tool_calls and (tool.name, value) in self.succeeded:
                    return _RESPOND
                return _Decided(tool, value)
            if first is None:
                first = (value, violations)
        value, violations = first if first is not None else (candidates[0] if candidates else {}, [])
        problem = f"the arguments for {tool.name} are invalid: {format_violations(violations)}" if violations else (
            f"the arguments for {tool.name} must be a JSON object"
        )
        return _Failed(problem, tool, value)

    async def _with_repair(
        self,
        kind: StepKind,
        mode: ToolCallingMode,
        enabled: tuple[str, ...],
        task: str,
        interpret: Callable[[str], Any],
        *,
        tools: list[ToolDefinition],
    ) -> Any:
        outcome: Any = None
        previous = ""
        attempts = 2 if self.options.repairs_invalid_output else 1
        for attempt in range(attempts):
            step_task = task
            if attempt:
                step_task = prompts.repair_task(task, problem=outcome.problem, previous_answer=quote_answer(previous))
            text = await self._model_text(kind, mode, enabled, step_task, is_repair=attempt > 0, tools=tools)
            outcome = interpret(text)
            if not isinstance(outcome, _Failed):
                return outcome
            previous = text
        return outcome

    # --- tool execution ----------------------------------------------------------------------

    async def _execute(self, tool: ToolDefinition, arguments: dict[str, Any]) -> None:
        call = ToolCall(new_call_id(), tool.name, arguments)
        started = time.monotonic()
        if tool.is_local:
            await self._emit(ToolCallStarted(call, "local"))
            output = await self._run_local(tool, arguments)
            abandoned = None
        else:
            output, abandoned = await self._wait_external(tool, call)
        self.rounds += 1
        self.calls += 1
        if not output.is_error:
            self.succeeded.append((tool.name, arguments))
        await self._record(call, output, time.monotonic() - started)
        if abandoned is not None:
            await self._emit(ToolCallAbandoned(call, abandoned))

    async def _run_local(self, tool: ToolDefinition, arguments: dict[str, Any]) -> ToolOutput:
        assert tool.handler is not None
        timeout = tool.timeout if tool.timeout is not None else self.options.local_tool_timeout
        # Our own deadline, told apart from a TimeoutError the tool raises itself. It is a cancel
        # scope without a deadline of its own, cancelled when a future on the loop's shared
        # deadlines expires: an anyio deadline costs each tool a timer pushed and popped.
        scope = expired = expire = None
        if timeout:
            scope = cancel_scope()
            expired = asyncio.get_running_loop().create_future()
            expired.add_done_callback(expire := _canceller(scope))
            deadlines_for(expired.get_loop()).wake_after(expired, timeout)
        try:
            if scope is None:
                value = await tool.handler(arguments)
            else:
                with scope:
                    value = await tool.handler(arguments)
        except AgentError as exc:
            if exc.code is ErrorCode.TOOL_FAILED:
                raise
            return ErrorOutput(exc.message)
        except Exception as exc:  # a tool's failure is the model's information, not the turn's end
            _log.warning("local tool %s failed; the model is told", tool.name, exc_info=exc)
            return ErrorOutput(str(exc) or type(exc).__name__)
        finally:
            if expired is not None and not expired.done():
                expired.remove_done_callback(expire)  # type: ignore[arg-type]
                expired.cancel()  # leaves the deadlines' queue when it reaches the head
        if scope is not None and scope.cancelled_caught:
            return ErrorOutput(f"Tool '{tool.name}' timed out after {format_duration(timeout)}.")
        if isinstance(value, TextOutput | JsonOutput | ErrorOutput):
            return value
        return output_from_value(value)

    async def _wait_external(self, tool: ToolDefinition, call: ToolCall) -> tuple[ToolOutput, str | None]:
        timeout = tool.timeout if tool.timeout is not None else self.options.tool_timeout
        # Open the slot before the host hears of the call, so an immediate answer is not lost.
        slot = self.agent.external_calls.open(call.id)
        try:
            await self._emit(ToolCallStarted(call, "client"))
            answered = slot.answered
            if answered.done():
                await anyio.lowlevel.checkpoint()
            else:
                # The deadline wakes the turn as an answer would (one timer for the loop's waits,
                # no cancel scope per wait); a cancelled turn stops waiting where it awaits.
                if timeout:
                    deadlines_for(answered.get_loop()).wake_after(answered, timeout)
                await answered
            if slot.output is not None:
                return slot.output, None
            message = f"Tool '{tool.name}' timed out after {format_duration(timeout)}."
            output = ErrorOutput(message)
            return output, output.model_text()
        finally:
            self.agent.external_calls.close(call.id)

    async def _reject(self, failed: _Failed) -> None:
        assert failed.tool is not None
        arguments = failed.arguments if isinstance(failed.arguments, dict) else {}
        call = ToolCall(new_call_id(), failed.tool.name, arguments)
        self.rounds += 1
        self.calls += 1
        await self._record(call, ErrorOutput(f"The call was not made: {failed.problem}."), 0.0)

    async def _record(self, call: ToolCall, output: ToolOutput, duration: float) -> None:
        record = ToolCallRecord(call, output, duration)
        self.records.append(record)
        self.tool_uses.append(ToolUseEntry(call, output))
        await self._emit(ToolCallCompleted(record))

    # --- reply steps -------------------------------------------------------------------------

    async def _respond_step(self) -> str:
        task = prompts.respond_task(used_tools=bool(self.tool_uses), assistant_label=self.options.assistant_label)
        return await self._model_text(
            StepKind.RESPOND, ToolCallingMode.DISALLOWED, (), task, is_repair=False, tools=[], stream_reply=True
        )

    async def _structured_step(self) -> Any:
        assert self.schema is not None
        schema = self.schema
        later = bool(self.agent.history)
        task = prompts.structured_task(schema, last_message=self.prompt, later_turn=later)
        problem = ""
        previous = ""
        attempts = 2 if self.options.repairs_invalid_output else 1
        for attempt in range(attempts):
            step_task = task if not attempt else prompts.repair_task(
                task, problem=problem, previous_answer=quote_answer(previous)
            )
            text = await self._model_text(
                StepKind.STRUCTURED, ToolCallingMode.DISALLOWED, (), step_task,
                is_repair=attempt > 0, tools=[], stream_partial=self.partial_values,
            )
            found = find_json(text, allow_array=schema.root_is_array)
            if found is None:
                problem = "the answer did not contain JSON"
            else:
                value, violations = schema.conform(found)
                if not violations:
                    await self._emit(PartialValue(value))
                    return value
                problem = f"the JSON does not match the required form: {format_violations(violations)}"
            previous = text
        raise AgentError(
            ErrorCode.GENERATION_FAILED,
            f"The model's structured output stayed invalid after a repair attempt: {problem}",
        )

    # --- one model step, with retries --------------------------------------------------------

    async def _model_text(
        self,
        kind: StepKind,
        mode: ToolCallingMode,
        enabled: tuple[str, ...],
        task: str,
        *,
        is_repair: bool,
        tools: list[ToolDefinition],
        stream_reply: bool = False,
        stream_partial: bool = False,
    ) -> str:
        """Run one model step (emitting ``modelStep`` first), retrying transient failures."""
        # Whether anyone watches the pieces as they come (a backend may stream them differently).
        streamed = self.emit is not None and ((stream_reply and self.text_deltas) or stream_partial)
        request, trimmed = self._request(kind, task, is_repair=is_repair, tools=tools, streamed=streamed)
        step = StepInfo(len(self.steps), self.rounds, mode, enabled, trimmed, kind, is_repair)
        self.steps.append(step)
        if self.emit is not None and self.step_events:
            await self.emit(ModelStep(step))
        retry = self.options.retry
        display = _ReplyDisplay(self._emit) if stream_reply and streamed else None
        attempt = 0
        while True:
            attempt += 1
            try:
                text, usage = await self._generate(request, self._reader(request, display, stream_reply, streamed))
            except AgentError as exc:
                error = exc
            except (anyio.get_cancelled_exc_class(), OamError):
                raise
            except Exception as exc:  # a backend bug or an untranslated transport failure
                error = _unexpected_model_error(exc, request, attempt)
            else:
                self._add_usage(request, text, usage)
                return text
            # A spent deadline is not retried: waiting again would only be later still.
            if isinstance(error, DeadlinePassed) or not retry.should_retry(error.code, error.retry_after, attempt):
                raise error
            clock = self.agent.clock
            await clock.sleep_until(clock.now() + retry.delay(attempt, error.retry_after))
            if display is not None:
                display.restart()

    def _reader(
        self, request: GenerationRequest, display: _ReplyDisplay | None, stream_reply: bool, streamed: bool
    ) -> _Reader | _Watched:
        """How one attempt's text is shown while it streams: as the reply (on ``display``, or
        cleaned only at the end without one), as partial JSON values, or not at all (decide
        steps stop at the first complete JSON value)."""
        if stream_reply:
            cleaner = ReplyCleaner(self.options.assistant_label)
            return _ReplyReader(display, cleaner) if display is not None else _CleanReader(cleaner)
        if streamed:
            return _PartialReader(self._emit)
        return _Reader(stop_at_json=request.stop_at_json)

    async def _generate(self, request: GenerationRequest, reader: _Reader | _Watched) -> tuple[str, Usage | None]:
        """One attempt: read the model's stream; returns the (cleaned, for replies) text."""
        usage: Usage | None = None
        stream = self.agent.model.stream(request)
        # Only a watched reader emits (awaits) as it reads; a plain one is called, not awaited.
        watched = isinstance(reader, _Watched)
        ended = False
        try:
            async for piece in stream:
                if isinstance(piece, Usage):
                    usage = piece
                elif await reader.show(piece) if watched else reader.push(piece):
                    break
            else:
                ended = True  # an exhausted stream has nothing left to release
        finally:
            if not ended:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        return await reader.end() if watched else reader.finish(), usage

    def _add_usage(self, request: GenerationRequest, text: str, usage: Usage | None) -> None:
        total = self.usage
        if usage is None:
            stable = self._stable or self._stable_parts()
            # estimate_tokens, inlined: three steps a turn, each counting three texts.
            total.input_tokens += stable.system_tokens + (len(request.prompt) + 3) // 4
            total.output_tokens += (len(text) + 3) // 4
            return
        total.input_tokens += usage.input_tokens
        total.cached_input_tokens += usage.cached_input_tokens
        total.output_tokens += usage.output_tokens

    def _request(
        self, kind: StepKind, task: str, *, is_repair: bool, tools: list[ToolDefinition], streamed: bool
    ) -> tuple[GenerationRequest, int]:
        options = self.options
        # Each of these is made once per turn (or tool use): the cached ones are read inline.
        stable = self._stable or self._stable_parts()
        history = self._shown or self._history_lines()
        uses = self._uses if self._uses.count == len(self.tool_uses) else self._tool_uses()
        offered = self._offered
        specs = offered[1] if offered is not None and offered[0] is tools else self._tool_specs(tools)
        entries = history.count
        trimmed = 0
        if options.trim_history and entries:
            fixed = stable.fixed_tokens + (len(task) + 3) // 4 + uses.tokens  # estimate_tokens(task)
            trimmed = history.hidden(
                fixed_tokens=fixed, budget=stable.budget, minimum_recent_turns=options.minimum_recent_turns
            )
        deciding = kind is StepKind.DECIDE or kind is StepKind.TOOL_ARGUMENTS
        # What the step itself decides, on the turn's request for its kind of step.
        request = msgspec.structs.replace(
            self._base_requests.get(deciding) or self._base_request(deciding, stable),
            kind=kind,
            prompt=self._prompt_text(kind, task, history, entries - trimmed, trimmed, uses),
            is_repair=is_repair,
            tool_outputs=uses.outputs,
            tools=specs,
            tool_name=tools[0].name if kind is StepKind.TOOL_ARGUMENTS else None,
            schema=self.schema.generation_schema if self.schema is not None and kind is StepKind.STRUCTURED else None,
            follow_up=bool(self.steps),
            streamed=streamed,
        )
        return request, trimmed

    def _base_request(self, deciding: bool, stable: _Stable) -> GenerationRequest:
        """The fields every decide (``deciding``) or reply step of this turn shares, made once per
        turn: a step replaces only its own, fewer fields than building its request whole."""
        options = self.options
        base = self._base_requests[deciding] = GenerationRequest(
            kind=StepKind.DECIDE if deciding else StepKind.RESPOND,
            system=stable.system,
            prompt="",
            temperature=options.decision_temperature if deciding else options.temperature,
            max_output_tokens=options.decision_max_tokens if deciding else options.max_response_tokens,
            sampling=options.sampling,
            stop_at_json=deciding,
            user_prompt=self.prompt,
            owner=self.agent.owner,
            priority=options.priority,
            queue_seconds=options.queue_seconds,
            budget=options.budget,
        )
        return base

    def _prompt_text(
        self, kind: StepKind, task: str, history: prompts.HistoryLines, shown: int, trimmed: int, uses: _ToolUses
    ) -> str:
        """The step prompt, as :func:`prompts.build_prompt` lays it out: the part before the task
        (conversation, this prompt, this turn's tool lines) is joined once for all the steps
        that show the same entries (``shown`` history entries after ``trimmed``), and each step
        adds only its task."""
        plain = kind is StepKind.STRUCTURED or kind is StepKind.RESPOND  # the plain first request allowed
        if plain and not shown and not uses.count and self.prompt.strip():
            return prompts.plain_prompt(self.prompt, task if kind is StepKind.STRUCTURED else "")
        key = (trimmed, uses.count)
        body = self._bodies.get(key)
        if body is None:
            body = self._bodies[key] = prompts.prompt_body(
                history_text=history.text(trimmed) if shown else "", prompt=self.prompt,
                labels=history.labels, tool_lines=uses.lines,
            )
        return body + task

    def _stable_parts(self) -> _Stable:
        """What every step of this turn shares: the system text, the tokens of it and the
        prompt, and the input budget (the agent's settings do not change while a turn runs)."""
        stable = self._stable
        if stable is None:
            agent, options = self.agent, self.options
            system = agent.system_text
            budget = (options.max_input_tokens or agent.model.capabilities.context_size) - options.reserved_response_tokens
            system_tokens = estimate_tokens(system)
            stable = self._stable = _Stable(system, system_tokens, system_tokens + estimate_tokens(self.prompt), budget)
        return stable

    def _history_lines(self) -> prompts.HistoryLines:
        """The agent's history as this turn's steps show it (caught up once per turn: the history
        does not change while a turn runs)."""
        lines = self._shown
        if lines is None:
            lines = self._shown = self.agent.step_lines(self.options)
        return lines

    def _tool_uses(self) -> _ToolUses:
        """This turn's tool uses as the steps show them (rendered again only when one is added)."""
        uses = self._uses
        if uses.count != len(self.tool_uses):
            shown = self._history_lines()
            lines = tuple(shown.line(u) or "" for u in self.tool_uses)
            uses = self._uses = _ToolUses(
                len(lines), lines, sum(estimate_tokens(line) for line in lines),
                tuple(u.output.model_text() for u in self.tool_uses),
            )
        return uses

    def _tool_specs(self, tools: list[ToolDefinition]) -> tuple[ToolSpec, ...]:
        """The offered tools as a request carries them; each tool's spec is built once per turn,
        and the tuple once per list of tools (every decide step of a turn offers the same one)."""
        if not tools:
            return ()
        offered = self._offered
        if offered is not None and offered[0] is tools:
            return offered[1]
        specs = self._specs
        spec_tuple = tuple(
            specs.get(t.name) or specs.setdefault(t.name, ToolSpec(t.name, t.description, t.schema.generation_schema))
            for t in tools
        )
        self._offered = (tools, spec_tuple)
        return spec_tuple

    async def _emit(self, event: TurnEvent) -> None:
        if self.emit is not None:
            await self.emit(event)


class _ReplyDisplay:
    """The reply text the client has been shown, across retries of one reply step.

    Deltas extend what was shown; anything else (a retry's fresh text, a cleaned final text that
    is not an extension) is sent with ``isReset`` so the client replaces its display.
    """

    def __init__(self, emit: Callable[[TurnEvent], Any]) -> None:
        self._emit = emit
        self._shown = ""
        self._reset_next = False

    def restart(self) -> None:
        if self._shown:
            self._reset_next = True
            self._shown = ""

    async def show(self, visible: str) -> None:
        if visible == self._shown and not self._reset_next:
            return
        if not visible and self._reset_next:
            return
        if self._reset_next or not visible.startswith(self._shown):
            self._reset_next = False
            await self._emit(TextDelta(visible, visible, True))
        else:
            await self._emit(TextDelta(visible[len(self._shown):], visible))
        self._shown = visible


class _Reader:
    """Collects one attempt's text pieces; :meth:`push` says whether to stop reading."""

    def __init__(self, *, stop_at_json: bool = False) -> None:
        self.pieces: list[str] = []
        self._stop_at_json = stop_at_json

    @property
    def text(self) -> str:
        pieces = self.pieces
        return pieces[0] if len(pieces) == 1 else "".join(pieces)

    def push(self, piece: str) -> bool:
        pieces = self.pieces
        pieces.append(piece)
        return self._stop_at_json and has_complete_value(piece if len(pieces) == 1 else "".join(pieces))

    def finish(self) -> str:
        return self.text


class _CleanReader(_Reader):
    """A reply step nobody watches: the text is cleaned once, at the end."""

    def __init__(self, cleaner: ReplyCleaner) -> None:
        super().__init__()
        self._cleaner = cleaner

    def finish(self) -> str:
        self._cleaner.add(self.text)
        return self._cleaner.final()


class _Watched:
    """A reader whose pieces are shown as they come: :meth:`show` says whether to stop reading."""

    async def show(self, piece: str) -> bool:
        raise NotImplementedError

    async def end(self) -> str:
        raise NotImplementedError


class _PartialReader(_Watched):
    """A structured step: each new complete prefix of the JSON value is emitted as it grows."""

    def __init__(self, emit: Callable[[TurnEvent], Any]) -> None:
        self._read = _Reader()
        self._emit = emit
        self._last: Any = None

    async def show(self, piece: str) -> bool:
        read = self._read
        read.push(piece)
        partial = complete_prefix(read.text)
        if partial is not None and partial != self._last:
            self._last = partial
            await self._emit(PartialValue(partial))
        return False

    async def end(self) -> str:
        return self._read.text


class _ReplyReader(_Watched):
    """A reply step: the cleaned text so far is shown as it grows; the result is the cleaned text."""

    def __init__(self, display: _ReplyDisplay, cleaner: ReplyCleaner) -> None:
        self._display = display
        self._cleaner = cleaner

    async def show(self, piece: str) -> bool:
        await self._display.show(self._cleaner.push(piece))
        return False

    async def end(self) -> str:
        final = self._cleaner.final()
        await self._display.show(final)
        return final


def _canceller(scope: anyio.CancelScope) -> Callable[[asyncio.Future[None]], None]:
    """A deadline future's callback: the scope it bounds is cancelled when it expires."""
    return lambda _expired: scope.cancel()


def _unexpected_model_error(exc: Exception, request: GenerationRequest, attempt: int) -> AgentError:
    """A model exception that is not an :class:`AgentError`: logged with its traceback, and the
    cause of the ``generation_failed`` that is retried or raised (the client never sees its text)."""
    _log.error(
        "model step %s of %s failed unexpectedly (attempt %d)", request.kind, request.owner, attempt, exc_info=exc
    )
    error = AgentError(ErrorCode.GENERATION_FAILED, f"The model failed unexpectedly ({type(exc).__name__}).")
    error.__cause__ = exc  # as ``raise … from exc`` would: the error is raised later, after retries
    return error
