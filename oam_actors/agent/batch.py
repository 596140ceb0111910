"""Items a shared backend may answer together: what a step says about itself so that a coalescing
backend can pack it with others into one generation.

A short, independent step (an NPC's bark, a decision among options, the reply, plain or structured, of an
NPC talk, the tool choice of an NPC talk) carries a :data:`~oam_actors.agent.model.BatchItem` on its
:class:`~oam_actors.agent.model.GenerationRequest`: who it is for, the situation, and (for a
decision) the options. A backend that does not coalesce ignores it and runs the request as it is;
one that does (:class:`~oam_actors.models.coalesce.CoalescingModel`) answers the item from a
numbered batch and streams back exactly what the step itself would have been answered with (a
bark's line, a decision's JSON object, a reply), so the agent validates it as usual.

:class:`ItemModel` marks the one step of a one-off request that the item describes;
:func:`may_coalesce` says whether to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import msgspec

from .model import BatchItem, DelegatingModel, GenerationRequest, LanguageModel, StepKind, Usage

__all__ = ["Describe", "ItemModel", "may_coalesce"]

_DESCRIBED_STEPS = frozenset({StepKind.RESPOND, StepKind.STRUCTURED})
_DESCRIBED_BY_CALL = _DESCRIBED_STEPS | {StepKind.DECIDE}  # a talk's tool choice, too


Describe = Callable[[GenerationRequest], BatchItem | None]
"""The item of one step, built when the step is asked (``None``: it runs alone)."""


def may_coalesce(model: LanguageModel, asked: bool) -> bool:
    """Whether a step goes out with an item: its caller lets it be coalesced (``asked``) and
    ``model`` coalesces (only such a backend reads items; for any other, building one is waste)."""
    return asked and model.capabilities.coalesces


class ItemModel(DelegatingModel):
    """``model`` with an item on the step it describes: the first attempt of the reply or
    structured step (repairs and every other step go out as they are). ``item`` is the item
    itself (a one-off, tool-free request: a bark, a decision without tools) or a function of
    the step's request (a dialogue turn, whose decide and reply steps show what the turn did so
    far), which is asked for decide steps too."""

    def __init__(self, model: LanguageModel, item: BatchItem | Describe) -> None:
        super().__init__(model)
        self.item = item

    def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        described = _DESCRIBED_BY_CALL if callable(self.item) else _DESCRIBED_STEPS
        if request.kind in described and not request.is_repair and request.item is None:
            item = self.item(request) if callable(self.item) else self.item
            if item is not None:
                request = msgspec.structs.replace(request, item=item)
        return super().stream(request)
