"""Structured game content (items, quests, rumours) from a JSON Schema: :class:`ContentGenerator`
(protocol-game §4.3, §6.14).

Contract:

- One fresh request per call: the prompt, plus ``\\nFacts: <compact JSON>`` when ``context`` is
  given; tool choice ``auto`` when tools are given, else ``none``.
- The output goes through the agent's structured step: coerced (``"12"`` → 12, ``"Rare"`` →
  ``"rare"``), validated, repaired once, then ``generation_failed``; object keys come back in the
  schema's property order.
- A malformed schema raises ``-32007 invalid_schema`` (``data.path`` ``schema``); unsupported
  keywords become warnings on the result; a negative temperature raises ``invalid_request``.
  Model errors (guardrail, refusal, …) propagate as they are.
- Client tools (definitions without handler) are announced on ``emit`` and answered through
  :meth:`ContentGenerator.submit_tool_result`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..agent.agent import Agent
from ..agent.events import EventSink, TurnUsage
from ..agent.model import LanguageModel
from ..agent.policy import AgentOptions, ToolChoice, ToolChoiceKind
from ..agent.schema import Schema
from ..agent.tools import ToolCallRecord, ToolDefinition, ToolOutput, compact_json
from ..errors import AgentError, ErrorCode
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


class ContentGenerator:
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
        self.model = model
        self.instructions = instructions
        self.temperature = temperature
        self.tool_timeout = tool_timeout
        self.owner = owner
        self._running: set[Agent] = set()

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
        here under the parameter name ``schema``). Raises :class:`AgentError`."""
        if self.temperature is not None and not self.temperature >= 0:
            raise AgentError(ErrorCode.INVALID_REQUEST, "temperature must not be negative.")
        compiled = schema if isinstance(schema, Schema) else Schema.compile(schema, path="schema")
        text = prompt if context is None else f"{prompt}\nFacts: {compact_json(context)}"
        agent = Agent(
            self.model,
            instructions=trimmed_or_none(instructions) or self.instructions,
            tools=tools,
            options=self._agent_options(bool(tools)),
            owner=self.owner,
        )
        self._running.add(agent)
        try:
            result = await agent.respond(text, schema=compiled, emit=emit)
        finally:
            self._running.discard(agent)
        if result.structured is msgspec.UNSET:
            raise AgentError(ErrorCode.GENERATION_FAILED, "The model produced no structured content.")
        return GeneratedContent(
            content=result.structured,
            tool_calls=tuple(result.tool_calls),
            usage=result.usage,
            warnings=compiled.warnings,
        )

    def submit_tool_result(self, call_id: str, output: ToolOutput) -> bool:
        """Deliver a client tool's output to the generation waiting for it."""
        for agent in list(self._running):
            if call_id in agent.pending_tool_calls:
                return agent.submit_tool_result(call_id, output)
        return False

    def _agent_options(self, has_tools: bool) -> AgentOptions:
        extra: dict[str, Any] = {} if self.tool_timeout is None else {"tool_timeout": self.tool_timeout}
        return AgentOptions(
            tool_choice=ToolChoice(ToolChoiceKind.AUTO if has_tools else ToolChoiceKind.NONE),
            temperature=self.temperature,
            priority="background",
            **extra,
        )
