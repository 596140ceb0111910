"""``ActorStatistics``: a frozen snapshot of one actor's mailbox."""

from __future__ import annotations

import msgspec

__all__ = ["ActorStatistics"]


class ActorStatistics(msgspec.Struct, frozen=True):
    """Counters of one actor's ordered lane at one instant.

    ``queued``: messages waiting (cancelled ones count until they reach the head).
    ``running``: 1 while a handler runs, else 0. ``processed``: handlers that returned.
    ``failed``: handlers that raised. ``cancelled``: messages resolved as cancelled or dropped
    because the actor stopped. ``max_queue``: the bound on ``queued``.
    """

    queued: int
    running: int
    processed: int
    failed: int
    cancelled: int
    max_queue: int
