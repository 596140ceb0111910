"""What a request for a turn at a backend is: its scheduling class and its ticket.

Kept apart from the policy (:mod:`.policy`) so that the queues (:mod:`.ordering`) can hold tickets
without importing the policy that owns them.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ["Priority", "Ticket"]


class Priority(enum.IntEnum):
    """A scheduling class: dialogue always first; a decision before background work among owners
    served alike that may wait alike (see :mod:`.policy`)."""

    DIALOGUE = 0  # a player is waiting for this line
    DECISION = 1  # NPC decisions and tool rounds
    BACKGROUND = 2  # barks, compaction, generated content


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """One request for a turn at the backend. ``id`` must be unique among live tickets."""

    id: int
    owner: str  # fairness unit: an NPC, a session
    priority: Priority
    tokens: int = 0  # estimated tokens this request will use
    enqueued_at: float = 0.0
    deadline: float | None = None  # latest admission time; after it the ticket expires
    follow_up: bool = False  # a later step of an action its owner was charged for: costs nothing
