"""Items a shared backend may answer together: what a step says about itself so that a coalescing
backend can pack it with others into one generation.

A short, independent, tool-free step (an NPC's bark, a decision among options) carries a
:data:`~oam_actors.agent.model.BatchItem` on its
:class:`~oam_actors.agent.model.GenerationRequest`: who it is for, the situation, and (for a
decision) the options. A backend that does not coalesce ignores it and runs the request as it is;
one that does (:class:`~oam_actors.models.coalesce.CoalescingModel`) answers the item from a
numbered batch and streams back exactly what the step itself would have been answered with (a
bark's line, a decision's JSON object), so the agent validates it as usual.

:class:`ItemModel` marks the one step of a one-off request that the item describes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from .model import Availability, BatchItem, GenerationRequest, LanguageModel, ModelCapabilities, StepKind, Usage

__all__ = ["ItemModel"]

_DESCRIBED_STEPS = frozenset({StepKind.RESPOND, StepKind.STRUCTURED})


class ItemModel:
    """``model`` with ``item`` on the step it describes: the first attempt of the reply or
    structured step (repairs and every other step go out as they are). Wrap the model of a
    one-off, tool-free request only: a bark, a decision without tools."""

    def __init__(self, model: LanguageModel, item: BatchItem) -> None:
        self.model = model
        self.item = item

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.model.capabilities

    async def availability(self) -> Availability:
        return await self.model.availability()

    def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        if request.kind in _DESCRIBED_STEPS and not request.is_repair and request.item is None:
            request = msgspec.structs.replace(request, item=self.item)
        return self.model.stream(request)
