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

A backend whose quota state must survive its process (a model actor restarted by Ray) offers
:class:`SupportsQuotaState`: its schedulers' :class:`~oam_actors.models.scheduler.QuotaState` by
quota key, and a way to go on from them (:class:`~oam_actors.models.proxy.ProxyBackends` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from ..agent.model import GenerationRequest, LanguageModel

if TYPE_CHECKING:
    from .scheduler import QuotaState

__all__ = ["ModelWithStatistics", "SupportsAdmissionWait", "SupportsQuotaState", "SupportsStatistics"]


@runtime_checkable
class SupportsStatistics(Protocol):
    """A backend that keeps counters: :meth:`statistics` is a snapshot as of the call."""

    async def statistics(self) -> msgspec.Struct | None: ...


@runtime_checkable
class ModelWithStatistics(LanguageModel, SupportsStatistics, Protocol):
    """A :class:`~oam_actors.agent.LanguageModel` that also reports :meth:`statistics`
    (what ``model/status`` reports on)."""


@runtime_checkable
class SupportsQuotaState(Protocol):
    """A backend whose quota state can be taken out and put back (see the module docstring)."""

    def quota_state(self) -> dict[str, QuotaState]:
        """Each scheduler's state, by quota key, as of now."""
        ...

    def restore_quota_state(self, states: dict[str, QuotaState]) -> None:
        """Go on from ``states`` (taken as of now); before any step runs."""
        ...


@runtime_checkable
class SupportsAdmissionWait(Protocol):
    """A backend that can say how long a step would wait for its quota at least (a scheduled
    proxy, a device pool; a coalescing model passes the question on): what a router asks before
    it sends a step to a tier it may only hold for a while (:mod:`oam_actors.models.routing`)."""

    def admission_wait(self, request: GenerationRequest) -> float:
        """Seconds from now before ``request``'s step could be admitted at the earliest, from the
        backend's time-based limits (``math.inf``: no device could take it at all)."""
        ...
