"""RequestActor: one concurrent one-off request — a decision, a batch of decisions or generated content.

Contract
--------
- The bridge spawns one actor per request and stops it after the reply: the actor exists so the
  request's client tools have an address. Its ordered lane runs exactly one of :class:`Decide`,
  :class:`DecideMany` or :class:`Generate`; its control lane takes
  :class:`~oam_actors.objects.messages.ToolResult` for the calls in flight.
- Client tools are forwarded as ``tool/call`` to the request's outlet with the context ``{}``
  (``{"index": i}`` for element ``i`` of a batch); a call that times out or is still open when
  the request ends gets ``tool/cancel`` with :data:`FORWARDED_TOOL_REASON`, before the reply.
- Replies are protocol results (``warnings`` of the message first); library errors propagate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..agent import Schema, ToolDefinition
from ..game import ContentGenerator, DecisionEngine, DecisionRequest, decisions_to_wire
from ..runtime import Actor
from .messages import ToolResult
from .outlet import Outlet, RequestId
from .relay import TurnRelay

__all__ = ["FORWARDED_TOOL_REASON", "Decide", "DecideMany", "Generate", "RequestActor"]

FORWARDED_TOOL_REASON = "The tool call timed out or its request was cancelled."


class Decide(msgspec.Struct, frozen=True, kw_only=True):
    request_id: RequestId
    request: DecisionRequest
    outlet: Outlet
    warnings: list[str] = msgspec.field(default_factory=list)


class DecideMany(msgspec.Struct, frozen=True, kw_only=True):
    request_id: RequestId
    requests: list[DecisionRequest]
    max_concurrency: int
    outlet: Outlet
    warnings: list[str] = msgspec.field(default_factory=list)


class Generate(msgspec.Struct, frozen=True, kw_only=True):
    request_id: RequestId
    prompt: str
    schema: Schema
    outlet: Outlet
    instructions: str | None = None
    context: Any = None
    tools: list[ToolDefinition] = msgspec.field(default_factory=list)
    warnings: list[str] = msgspec.field(default_factory=list)


class RequestActor(Actor):
    """Runs one request on ``worker`` (a :class:`DecisionEngine` or :class:`ContentGenerator`)."""

    def __init__(self, worker: DecisionEngine | ContentGenerator) -> None:
        self.worker = worker

    async def handle(self, message: Any) -> Any:
        relays: list[TurnRelay] = []

        def relay(head: dict[str, Any]) -> TurnRelay:
            sink = TurnRelay(
                message.outlet,
                head=head,
                request_id=message.request_id,
                stream=False,
                target=self.address,
                abandon_reason=FORWARDED_TOOL_REASON,
            )
            relays.append(sink)
            return sink

        try:
            return await self._run(message, relay)
        finally:
            for sink in relays:
                sink.close()

    async def _run(self, message: Any, relay: Callable[[dict[str, Any]], TurnRelay]) -> dict[str, Any]:
        worker = self.worker
        match message:
            case Decide() if isinstance(worker, DecisionEngine):
                decision = await worker.decide(message.request, emit=relay({}))
                return decision.to_wire(message.warnings)
            case DecideMany() if isinstance(worker, DecisionEngine):
                results = await worker.decide_many(
                    message.requests,
                    max_concurrency=message.max_concurrency,
                    emit_for=lambda index: relay({"index": index}),
                )
                return decisions_to_wire(results, message.warnings)
            case Generate() if isinstance(worker, ContentGenerator):
                content = await worker.generate(
                    message.prompt,
                    message.schema,
                    instructions=message.instructions,
                    context=message.context,
                    tools=message.tools,
                    emit=relay({}),
                )
                return content.to_wire(message.warnings)
        raise TypeError(f"RequestActor cannot run {type(message).__name__} on {type(worker).__name__}")

    async def handle_control(self, message: Any) -> Any:
        if isinstance(message, ToolResult):
            return self.worker.submit_tool_result(message.call_id, message.output)
        raise TypeError(f"RequestActor cannot handle {type(message).__name__} on the control lane")
