"""One chat completion as one agent turn over a :class:`LanguageModel` (no HTTP here).

OpenAI tool calling is stateless: a request either answers, or asks the client to run tools and
ends. So the turn runs with the request's tools as client tools; when the agent starts one (its
arguments already valid against the schema, after at most one repair), the turn is cancelled and
the call returned. A call still invalid after the repair is not made: the agent goes on to reply,
as on the bridge. The envelope loop decides one call per round, so a response carries one call.

Usage counts every model step of the request (the backend's counts, or about four characters a
token), whether the turn finished or stopped at a tool call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import msgspec

from ...agent import (
    Agent,
    DelegatingModel,
    GenerationRequest,
    LanguageModel,
    TextDelta,
    ToolCall,
    ToolCallStarted,
    TurnEvent,
    TurnUsage,
    Usage,
    estimate_tokens,
)
from .stream import Reply
from .translate import Plan

__all__ = ["ReplySink", "run_turn"]

ReplySink = Callable[[str], Awaitable[None]]
"""Receives the visible reply text so far, each time it changes (for streaming)."""


async def run_turn(plan: Plan, model: LanguageModel, *, owner: str, on_reply: ReplySink | None = None) -> Reply:
    """Run the request's turn; raises the agent's :class:`~oam_actors.errors.AgentError`."""
    metered = _Metered(model)
    conversation = plan.conversation
    agent = Agent(
        metered,
        instructions=conversation.instructions,
        tools=plan.tools,
        options=plan.options,
        history=conversation.history,
        owner=owner,
    )
    calls: list[ToolCall] = []

    async def on_event(event: TurnEvent) -> None:
        if isinstance(event, ToolCallStarted):
            calls.append(event.call)
            scope.cancel()  # the client runs it; this request ends here
        elif isinstance(event, TextDelta) and on_reply is not None:
            await on_reply(event.text)

    with anyio.CancelScope() as scope:
        result = await agent.respond(conversation.prompt, schema=plan.schema, emit=on_event,
                                     tool_uses=conversation.tool_uses)
        if plan.schema is not None:
            return Reply(msgspec.json.encode(result.structured).decode(), usage=metered.usage)
        return Reply(result.text, usage=metered.usage)
    return Reply(None, calls, metered.usage)


class _Metered(DelegatingModel):
    """The model, counting the tokens of every step of one request."""

    def __init__(self, model: LanguageModel) -> None:
        super().__init__(model)
        self.usage = TurnUsage()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        reported: Usage | None = None
        written: list[str] = []
        pieces = self._model.stream(request)
        try:
            async for piece in pieces:
                if isinstance(piece, Usage):
                    reported = piece
                else:
                    written.append(piece)
                yield piece
        finally:
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()
            if reported is None:
                # The agent's own estimate when a backend reports nothing.
                reported = Usage(estimate_tokens(request.system) + estimate_tokens(request.prompt), 0,
                                 estimate_tokens("".join(written)))
            self.usage.input_tokens += reported.input_tokens
            self.usage.cached_input_tokens += reported.cached_input_tokens
            self.usage.output_tokens += reported.output_tokens
