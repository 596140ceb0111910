"""What a model reports about itself: one ``statistics()`` for every backend that keeps any.

``statistics()`` is async on every model, because some models are somewhere else: a model hosted
as a Ray model actor (:class:`~oam_actors.cluster.RemoteModel`) must be asked over the network.
It returns the backend's own frozen record (a device pool's
:class:`~oam_actors.models.pool.PoolStatistics`, a scheduled model's
:class:`~oam_actors.models.scheduler.PolicyStatistics`), the same record wherever the model
runs; ``None`` when the model keeps none (a remote model whose hosted backend keeps none).
``msgspec.to_builtins`` of it is its wire form (``model/status``).

A model whose numbers are local may offer ``statistics_nowait()`` too, for callers that cannot
await (a live display refreshed from a timer): :class:`~oam_actors.models.pool.DevicePool` does.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec

from ..agent.model import LanguageModel

__all__ = ["ModelWithStatistics", "SupportsStatistics"]


@runtime_checkable
class SupportsStatistics(Protocol):
    """A backend that keeps counters: :meth:`statistics` is a snapshot as of the call."""

    async def statistics(self) -> msgspec.Struct | None: ...


@runtime_checkable
class ModelWithStatistics(LanguageModel, SupportsStatistics, Protocol):
    """A :class:`~oam_actors.agent.LanguageModel` that also reports :meth:`statistics`
    (what ``model/status`` reports on)."""
