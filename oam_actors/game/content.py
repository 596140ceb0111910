"""Structured game content (items, quests, rumours) from a JSON Schema: :class:`ContentGenerator`
(protocol-game §4.3, §6.14).

Contract:

- One fresh request per call: the prompt, plus ``\\nFacts: <compact JSON>`` when ``context`` is
  given; tool choice ``auto`` when tools are given, else ``none``.
- The output goes through the agent's structured step: coerced (``"12"`` → 12, ``"Rare"`` →
  ``"rare"``), validated, repaired once, then ``generation_failed``; object keys come back in the
  schema's property order.
- A malformed schema raises ``-32007 invalid_schema`` (``data.path`` ``schema``); unsupported
  keywords become warnings on the result; a negative temperature raises ``-32602 invalid_params``
  (as the parameter check of ``content/generate`` and the decision engine do).
  Model errors (guardrail, refusal, …) propagate as they are.
- Client tools (definitions without handler) are announced on ``emit`` and answered through
  :meth:`ContentGenerator.submit_tool_result`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..agent.events import EventSink, TurnUsage
from ..agent.model import LanguageModel
from ..agent.policy import ToolChoice, ToolChoiceKind
from ..agent.schema import Schema
from ..agent.tools import ToolCallRecord, ToolDefinition, compact_json
from ..errors import AgentError, ErrorCode
from ._oneoff import OneOffEngine
from ._text import trimmed_or_none

__all__ = ["DEFAULT_CONTENT_INSTRUCTIONS", "ContentGenerator", "GeneratedContent"]

DEFAULT_CONTENT_INSTRUCTIONS = (
    "You write content for a video game. Follow the requested format exactly. "
    "Keep text short, vivid and consistent with the request."
)


class GeneratedContent(msgspec.Struct, frozen=True, kw_only=True):
    """Generated JSON plus how it was made; ``warnings`` are the schema's."""

    content: Any
    tool_calls: tuple[ToolCallRecord, ...] = ()
    usage: TurnUsage = msgspec.field(default_factory=TurnUsage)
    warnings: tuple[str, ...] = ()

    def to_wire(self, warnings: Sequence[str] = ()) -> dict[str, Any]:
        """``{"content"}`` plus ``warnings`` (``warnings`` given first, then the schema's) when any."""
        wire: dict[str, Any] = {"content": self.content}
        every = [*warnings, *self.warnings]
        if every:
            wire["warnings"] = every
        return wire


class ContentGenerator(OneOffEngine):
    """Content on one model; ``instructions`` is the default for calls that pass none."""

    def __init__(
        self,
        model: LanguageModel,
        *,
        instructions: str = DEFAULT_CONTENT_INSTRUCTIONS,
        temperature: float | None = None,
        tool_timeout: float | None = None,
        owner: str | None = None,
    ) -> None:
        super().__init__(model, instructions=instructions, temperature=temperature, tool_timeout=tool_timeout, owner=owner)

    async def generate(
        self,
        prompt: str,
        schema: Schema | Any,
        *,
        instructions: str | None = None,
        context: Any = None,
        tools: Sequence[ToolDefinition] = (),
        emit: EventSink | None = None,
    ) -> GeneratedContent:
        """Generate JSON matching ``schema`` (a compiled :class:`Schema`, or a raw one compiled
        here under the parameter name ``schema``). Raises :class:`OamError`."""
        self._check_temperature()
        compiled = schema if isinstance(schema, Schema) else Schema.compile(schema, path="schema")
        text = prompt if context is None else f"{prompt}\nFacts: {compact_json(context)}"
        result = await self._respond(
            text,
            compiled,
            instructions=trimmed_or_none(instructions) or self.instructions,
            tools=tools,
            options=self._agent_options(
                tool_choice=ToolChoice(ToolChoiceKind.AUTO if tools else ToolChoiceKind.NONE), priority="background"
            ),
            emit=emit,
        )
        if result.structured is msgspec.UNSET:
            raise AgentError(ErrorCode.GENERATION_FAILED, "The model produced no structured content.")
        return GeneratedContent(
            content=result.structured,
            tool_calls=tuple(result.tool_calls),
            usage=result.usage,
            warnings=compiled.warnings,
        )
