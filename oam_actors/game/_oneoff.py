"""The request core shared by :class:`~oam_actors.game.DecisionEngine` and
:class:`~oam_actors.game.ContentGenerator` (private).

Both run one fresh, history-free agent turn per request on one model, with the same settings
(instructions, temperature, client-tool timeout, quota owner), the same check of those settings,
and client tool results routed to whichever request is waiting for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..agent.agent import Agent
from ..agent.events import EventSink, TurnResult
from ..agent.model import LanguageModel
from ..agent.policy import AgentOptions
from ..agent.schema import Schema
from ..agent.tools import ToolDefinition, ToolOutput
from ..errors import invalid_params

__all__ = ["OneOffEngine"]


class OneOffEngine:
    """One model and its request settings; stateless between requests except for the tool
    calls in flight."""

    def __init__(
        self,
        model: LanguageModel,
        *,
        instructions: str | None,
        temperature: float | None,
        tool_timeout: float | None,
        owner: str | None,
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.temperature = temperature
        self.tool_timeout = tool_timeout
        self.owner = owner
        self._running: set[Agent] = set()

    def submit_tool_result(self, call_id: str, output: ToolOutput) -> bool:
        """Deliver a client tool's output to the request waiting for it."""
        for agent in list(self._running):
            if call_id in agent.pending_tool_calls:
                return agent.submit_tool_result(call_id, output)
        return False

    def _check_temperature(self) -> None:
        # The same code as the protocol's parameter check of ``temperature`` (and the NPC's).
        if self.temperature is not None and not self.temperature >= 0:
            raise invalid_params(f"Parameter 'temperature' must be at least 0; got {self.temperature}.")

    def _agent_options(self, **fields: Any) -> AgentOptions:
        """The turn policy: ``fields`` plus the engine's temperature and client-tool timeout."""
        if self.tool_timeout is not None:
            fields["tool_timeout"] = self.tool_timeout
        return AgentOptions(temperature=self.temperature, **fields)

    async def _respond(
        self,
        prompt: str,
        schema: Schema,
        *,
        instructions: str | None,
        tools: Sequence[ToolDefinition],
        options: AgentOptions,
        emit: EventSink | None,
        model: LanguageModel | None = None,
        owner: str | None = None,
    ) -> TurnResult:
        """One fresh turn (on ``model``, default the engine's; for ``owner``, default the
        engine's); its client tool calls are answered through :meth:`submit_tool_result`."""
        agent = Agent(model or self.model, instructions=instructions, tools=tools, options=options,
                      owner=owner or self.owner)
        self._running.add(agent)
        try:
            return await agent.respond(prompt, schema=schema, emit=emit)
        finally:
            self._running.discard(agent)
