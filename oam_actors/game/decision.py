"""Choosing one of a fixed set of options with the model: :class:`DecisionEngine` (protocol-game §4.1,
§4.2, §6.13).

Contract:

- Every decision is a fresh one-off request (no history): the model writes a one-sentence
  ``reasoning``, then ``choice`` (an enum of the option ids), then ``confidence``.
- Validation happens before any model call and raises ``-32602 invalid_params`` with the
  protocol's messages: options non-empty with trimmed, non-empty, unique ids; the fallback among
  them; a named ``toolChoice`` among the tools; then the single-option shortcut (no model call);
  then ``maxToolRounds`` ≥ 0 and temperature ≥ 0.
- Unusable answers (``guardrail_violation``, ``refusal``, ``generation_failed``) become the
  fallback decision when ``fallback_option_id`` is set; so does a request whose
  ``budget`` (its deadline, counted from its arrival) ran out before the model could take a step (:class:`DeadlinePassed`), marked
  ``degraded: "deadline"``; other errors propagate as they are.
- :meth:`DecisionEngine.decide_many` runs requests with at most ``max_concurrency`` at once,
  started in request order, results in request order; a failed decision's slot holds its error.
  Cancelling the caller cancels them all.
- Client tools (definitions without handler) are announced on ``emit`` and answered through
  :meth:`DecisionEngine.submit_tool_result`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import msgspec

from ..agent.batch import ItemModel, may_coalesce
from ..agent.events import EventSink, TurnResult, TurnUsage
from ..agent.model import LanguageModel
from ..agent.policy import AgentOptions, ToolChoice, ToolChoiceKind
from ..agent.schema import Schema
from ..agent.tools import ToolCallRecord, ToolDefinition, compact_json
from ..clock import Budget
from ..errors import AgentError, DeadlinePassed, ErrorCode, OamError, invalid_params
from ._items import decision_item
from ._oneoff import OneOffEngine
from ._prompting import DEADLINE, UNUSABLE
from ._text import joined_list, sentence, trimmed_or_none
from .persona import Persona

__all__ = [
    "DEFAULT_DECISION_INSTRUCTIONS",
    "Decision",
    "DecisionEngine",
    "DecisionOption",
    "DecisionRequest",
    "check_request",
    "decisions_to_wire",
    "parse_decision_options",
]

DEFAULT_DECISION_INSTRUCTIONS = (
    "You make decisions for characters in a video game. "
    "Pick the option that best fits the character and the situation. "
    "Give one short reason, then the option id, then your confidence from 0 to 100."
)
_GAME_LABEL = "Game"
_DEFAULT_ACTOR_LABEL = "Character"
_AUTO = ToolChoice(ToolChoiceKind.AUTO)


class DecisionOption(msgspec.Struct, frozen=True):
    """One choice: a stable id (short snake_case works best) and what choosing it means."""

    id: str
    description: str = ""


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a decision (the ``decision/decide`` result)."""

    option_id: str
    reasoning: str = ""
    confidence: int = 50
    tool_calls: tuple[ToolCallRecord, ...] = ()
    usage: TurnUsage = msgspec.field(default_factory=TurnUsage)
    is_fallback: bool = False
    degraded: str | None = None  # why a fallback stands in ("deadline"); an extension key

    def to_wire(self, warnings: Sequence[str] = ()) -> dict[str, Any]:
        """``optionID, reasoning, confidence, toolCalls, usage, isFallback`` (+ ``degraded``, then
        ``warnings``, when any)."""
        wire: dict[str, Any] = {
            "optionID": self.option_id,
            "reasoning": self.reasoning,
            "confidence": self.confidence,
            "toolCalls": [record.to_wire() for record in self.tool_calls],
            "usage": self.usage.to_wire(),
            "isFallback": self.is_fallback,
        }
        if self.degraded is not None:
            wire["degraded"] = self.degraded
        if warnings:
            wire["warnings"] = list(warnings)
        return wire


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecisionRequest:
    """One decision to make; ``context`` is any JSON facts (``None`` for none)."""

    situation: str
    options: Sequence[DecisionOption]
    actor: Persona | None = None
    context: Any = None
    tools: Sequence[ToolDefinition] = ()
    tool_choice: ToolChoice = _AUTO
    fallback_option_id: str | None = None
    budget: Budget | None = None  # its deadline, from its arrival: how long each model step may wait for quota
    coalesce: bool = True  # a coalescing backend may answer it together with other decisions
    owner: str | None = None  # whose share of quota it spends (the actor NPC); None: the engine's


def parse_decision_options(value: Any, path: str = "options") -> tuple[DecisionOption, ...]:
    """Wire options: ``[{"id", "description"?}]`` or id strings; ids trimmed, non-empty, unique."""
    if not isinstance(value, list) or not value:
        raise invalid_params(f"'{path}' must be a non-empty array of {{\"id\", \"description\"}} objects.")
    options = [_parse_option(element, f"{path}[{i}]") for i, element in enumerate(value)]
    _check_ids([o.id for o in options], path)
    return tuple(DecisionOption(o.id.strip(), o.description) for o in options)


def _parse_option(element: Any, path: str) -> DecisionOption:
    if isinstance(element, str):
        return DecisionOption(element)
    if not isinstance(element, dict):
        raise invalid_params(f"'{path}' must be an object {{\"id\", \"description\"}} or an id string.")
    return DecisionOption(_string_member(element, "id", path, required=True), _string_member(element, "description", path))


def _string_member(element: dict[str, Any], name: str, path: str, *, required: bool = False) -> str:
    value = element.get(name)
    if value is None:
        if required:
            raise invalid_params(f"Missing required parameter '{path}.{name}'.")
        return ""
    if not isinstance(value, str):
        raise invalid_params(f"Parameter '{path}.{name}' must be a string; got {compact_json(value)}.")
    return value


def _check_ids(raw_ids: Sequence[str], path: str) -> list[str]:
    if not raw_ids:
        raise invalid_params(f"'{path}' must be a non-empty array of {{\"id\", \"description\"}} objects.")
    ids: list[str] = []
    for index, raw in enumerate(raw_ids):
        option_id = raw.strip()
        if not option_id:
            raise invalid_params(f"'{path}[{index}].id' must not be empty.")
        if option_id in ids:
            raise invalid_params(f"Duplicate option id '{option_id}' in '{path}'.")
        ids.append(option_id)
    return ids


def check_request(request: DecisionRequest) -> tuple[list[str], str | None]:
    """The request's trimmed option ids and fallback id; raises ``invalid_params`` for bad ids, a
    fallback that is not an option, or a named ``toolChoice`` missing from the tools. Callers that
    batch decisions check every request first, so one bad element fails the batch."""
    ids = _check_ids([o.id for o in request.options], "options")
    fallback = request.fallback_option_id.strip() if request.fallback_option_id is not None else None
    if fallback is not None and fallback not in ids:
        raise invalid_params(f"'fallbackOptionID' must be one of the option ids ({', '.join(ids)}); got '{fallback}'.")
    choice = request.tool_choice
    if choice.kind is ToolChoiceKind.TOOL and choice.tool not in {t.name for t in request.tools}:
        raise invalid_params(f"'toolChoice' names tool '{choice.tool}', which is not in 'tools'.")
    return ids, fallback


def decisions_to_wire(results: Sequence[Decision | OamError], warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The ``decision/decideMany`` result: each slot a decision or ``{"error": {…}}``."""
    wire: dict[str, Any] = {
        "results": [r.to_wire() if isinstance(r, Decision) else {"error": r.to_wire()} for r in results]
    }
    if warnings:
        wire["warnings"] = list(warnings)
    return wire


class DecisionEngine(OneOffEngine):
    """Decisions on one model. Stateless between calls except for the tool calls in flight."""

    def __init__(
        self,
        model: LanguageModel,
        *,
        instructions: str | None = None,
        temperature: float | None = None,
        max_tool_rounds: int = 2,
        tool_timeout: float | None = None,
        owner: str | None = None,
    ) -> None:
        super().__init__(model, instructions=instructions, temperature=temperature, tool_timeout=tool_timeout, owner=owner)
        self.max_tool_rounds = max_tool_rounds

    async def decide(self, request: DecisionRequest, *, emit: EventSink | None = None) -> Decision:
        """Choose one of ``request.options``; see the module docstring. Raises :class:`OamError`."""
        ids, fallback = check_request(request)
        if len(ids) == 1:
            return Decision(option_id=ids[0], reasoning="It is the only option.", confidence=100)
        self._check_settings()
        try:
            result = await self._respond(
                _prompt(request),
                _schema(ids),
                instructions=self._instructions(request.actor),
                tools=request.tools,
                options=self._decision_options(request),
                emit=emit,
                model=self._model_for(request, ids),
                owner=request.owner,
            )
            return _decision(result, ids)
        except DeadlinePassed:
            if fallback is None:
                raise
            return Decision(option_id=fallback, reasoning="", confidence=0, is_fallback=True, degraded=DEADLINE)
        except AgentError as error:
            if fallback is None or error.code not in UNUSABLE:
                raise
            return Decision(option_id=fallback, reasoning="", confidence=0, is_fallback=True)

    async def decide_many(
        self,
        requests: Sequence[DecisionRequest],
        *,
        max_concurrency: int = 2,
        emit_for: Callable[[int], EventSink | None] | None = None,
    ) -> list[Decision | OamError]:
        """Several independent decisions; ``emit_for(i)`` gives request ``i``'s event sink."""
        results: list[Decision | OamError | None] = [None] * len(requests)
        slots = anyio.Semaphore(max(1, max_concurrency))

        async def run(index: int, request: DecisionRequest) -> None:
            try:
                emit = emit_for(index) if emit_for is not None else None
                results[index] = await self.decide(request, emit=emit)
            except OamError as error:
                results[index] = error
            finally:
                slots.release()

        async with anyio.create_task_group() as group:
            for index, request in enumerate(requests):
                await slots.acquire()  # taken here, so decisions start in request order
                group.start_soon(run, index, request)
        return [r for r in results if r is not None]

    # --- checks and prompting ------------------------------------------------------------------

    def _model_for(self, request: DecisionRequest, ids: list[str]) -> LanguageModel:
        """The model, with the decision described as a batch item when it may be coalesced: a
        backend that coalesces, no tools (a tool never runs twice) and the standard instructions
        (a batch has its own)."""
        if not may_coalesce(self.model, request.coalesce) or request.tools \
                or self.instructions is not None:
            return self.model
        options = [(option_id, option.description) for option_id, option in zip(ids, request.options, strict=True)]
        return ItemModel(self.model, decision_item(request.actor, request.situation, request.context, options))

    def _check_settings(self) -> None:
        if self.max_tool_rounds < 0:
            raise invalid_params(f"Parameter 'maxToolRounds' must be at least 0; got {self.max_tool_rounds}.")
        self._check_temperature()

    def _decision_options(self, request: DecisionRequest) -> AgentOptions:
        actor_name = trimmed_or_none(request.actor.name) if request.actor is not None else None
        return self._agent_options(
            tool_choice=request.tool_choice if request.tools else ToolChoice(ToolChoiceKind.NONE),
            max_tool_rounds=self.max_tool_rounds,
            user_label=_GAME_LABEL,
            assistant_label=actor_name or _DEFAULT_ACTOR_LABEL,
            priority="decision",
            budget=request.budget,
        )

    def _instructions(self, actor: Persona | None) -> str:
        lines = [trimmed_or_none(self.instructions) or DEFAULT_DECISION_INSTRUCTIONS]
        if actor is not None:
            role = trimmed_or_none(actor.role)
            lines.append(f"You decide for {actor.name}, {role}." if role else f"You decide for {actor.name}.")
            if (personality := trimmed_or_none(actor.personality)) is not None:
                lines.append(f"Personality: {sentence(personality)}")
            if (goals := joined_list(actor.goals)) is not None:
                lines.append(f"Goals: {goals}")
        return "\n".join(lines)


def _prompt(request: DecisionRequest) -> str:
    lines = [f"Situation: {trimmed_or_none(request.situation) or '(none given)'}"]
    if request.context is not None and request.context != {}:
        lines.append(f"Facts: {compact_json(request.context)}")
    lines.append("Options:")
    for option in request.options:
        description = trimmed_or_none(option.description)
        lines.append(f"- {option.id.strip()}: {description}" if description else f"- {option.id.strip()}")
    return "\n".join(lines)


def _schema(ids: list[str]) -> Schema:
    # Confidence is described, not bounded: an out-of-range number is clamped, not repaired.
    properties = {
        "reasoning": {"type": "string", "description": "One short sentence explaining the choice."},
        "choice": {"type": "string", "description": "The id of the chosen option.", "enum": ids},
        "confidence": {"type": "integer", "description": "How sure you are, from 0 to 100."},
    }
    return Schema.compile({"type": "object", "properties": properties, "required": list(properties)})


def _decision(result: TurnResult, ids: list[str]) -> Decision:
    structured = result.structured if isinstance(result.structured, dict) else {}
    raw = structured.get("choice")
    raw = raw.strip() if isinstance(raw, str) else ""
    option_id = next((i for i in ids if i == raw), None) or next((i for i in ids if i.lower() == raw.lower()), None)
    if option_id is None:
        raise AgentError(ErrorCode.GENERATION_FAILED, f"The model chose '{raw}', which is not one of: {', '.join(ids)}.")
    reasoning = structured.get("reasoning")
    return Decision(
        option_id=option_id,
        reasoning=reasoning.strip() if isinstance(reasoning, str) else "",
        confidence=_confidence(structured.get("confidence")),
        tool_calls=tuple(result.tool_calls),
        usage=result.usage,
    )


def _confidence(value: Any) -> int:
    """Rounded half up (numeric strings accepted), 50 when unusable, clamped to 0–100."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        return 50
    return min(max(math.floor(number + 0.5), 0), 100)
