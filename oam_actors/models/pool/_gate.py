"""``ScheduledModel``: any :class:`~oam_actors.agent.LanguageModel` behind one QuotaScheduler.

For backends that are one quota each (a proxy's API key): every step queues by its owner and
priority, waits at most its queue time, and a ``rate_limited`` answer cools the scheduler down
(the proxy's ``scheduler_hook`` adds what its rate-limit headers say). Expiry in the queue, and a
``rate_limited`` answer whose retry delay outlasts the step's queue time, raise
:class:`~oam_actors.errors.DeadlinePassed`, which the game layer degrades.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from ...agent.model import DelegatingModel, GenerationRequest, LanguageModel, Usage, estimate_tokens
from ...errors import AgentError, DeadlinePassed, ErrorCode
from ..scheduler import PolicyStatistics, QuotaScheduler, Seat
from ._config import DEFAULT_QUEUE_SECONDS, priority_of, queue_limit, spent_before_the_model

__all__ = ["ScheduledModel"]


class ScheduledModel(DelegatingModel):
    """``model`` with admission by ``scheduler``; ``queue_seconds`` by priority as in
    :class:`~oam_actors.models.pool.PoolConfig`. Queue expiry raises ``rate_limited``."""

    def __init__(self, model: LanguageModel, scheduler: QuotaScheduler, *,
                 queue_seconds: tuple[float, float, float] = DEFAULT_QUEUE_SECONDS) -> None:
        super().__init__(model)
        self.scheduler = scheduler
        self._queue_seconds = queue_seconds

    @property
    def model(self) -> LanguageModel:
        """The backend behind the scheduler."""
        return self._model

    async def statistics(self) -> PolicyStatistics:
        """The scheduler's numbers (:class:`~oam_actors.models.SupportsStatistics`)."""
        return self.scheduler.statistics()

    def admission_wait(self, request: GenerationRequest) -> float:
        """The scheduler's :meth:`~QuotaScheduler.admission_wait` for ``request``'s step
        (:class:`~oam_actors.models.SupportsAdmissionWait`)."""
        return self.scheduler.admission_wait(estimate_tokens(request.system) + estimate_tokens(request.prompt))

    def service(self, owner: str) -> float:
        """``owner``'s place in fair queuing (the seam :class:`~oam_actors.models.coalesce.DefersRequest`)."""
        return self.scheduler.service(owner)

    def stream(self, request: GenerationRequest) -> AsyncIterator[str | Usage]:
        return self._stream(request, None, None)

    def stream_when_admitted(
        self, request: GenerationRequest, build: Callable[[], GenerationRequest], seat: Seat
    ) -> AsyncIterator[str | Usage]:
        """:meth:`stream`, queued as ``request`` at ``seat``, running what ``build()`` returns
        once admitted (the seam :class:`~oam_actors.models.coalesce.DefersRequest`). Raises
        :class:`~oam_actors.models.scheduler.SeatTaken` when the seat was taken."""
        return self._stream(request, build, seat)

    async def _stream(
        self, request: GenerationRequest, build: Callable[[], GenerationRequest] | None, seat: Seat | None
    ) -> AsyncIterator[str | Usage]:
        priority = priority_of(request.priority)
        tokens = estimate_tokens(request.system) + estimate_tokens(request.prompt)
        deadline = queue_limit(self._queue_seconds[priority], request)
        if deadline <= 0:
            raise spent_before_the_model()
        async with self.scheduler.admit(request.owner or "anonymous", priority, tokens=tokens,
                                        deadline_seconds=deadline, seat=seat,
                                        follow_up=request.follow_up) as admission:
            if build is not None:
                request = build()
            pieces = self._model.stream(request)
            try:
                async for piece in pieces:
                    if isinstance(piece, Usage):
                        admission.tokens_used = piece.input_tokens + piece.output_tokens
                    yield piece
            except AgentError as error:
                if error.code is ErrorCode.RATE_LIMITED:
                    self.scheduler.throttled(retry_after=error.retry_after)
                    if error.retry_after is not None and error.retry_after >= deadline - admission.waited:
                        # The backend will not take it again before the step's deadline.
                        raise DeadlinePassed(error.message, retry_after=error.retry_after) from error
                raise
            finally:
                aclose = getattr(pieces, "aclose", None)
                if aclose is not None:
                    await aclose()
