"""Which queued ticket of one backend goes next (pure).

The policy keeps two queues over one :class:`Ledger`: player dialogue, which always goes first,
and NPC work (decisions and background), ordered here.

- **Fairness across classes.** Start-time fair queuing (SFQ) over owners, with one ledger per
  backend (or per device pool, shared by its phones): an owner's finish tag grows with every admission it gets, dialogue, decision or
  background alike, so an owner whose dialogue was just served waits behind the others for its
  NPC work. A queued head whose owner was served in the other queue meanwhile is re-tagged when
  it reaches the top.
- **Tags.** An owner's head gets the start tag ``max(virtual time - credit, owner's finish tag)``;
  virtual time becomes the tag of each admission, and the owner's finish tag ``start + cost``.
  Dialogue goes first whatever its tag, so a dialogue admission moves virtual time no further
  than the tag of the NPC work waiting (an NPC served much that speaks to a player would
  otherwise drag virtual time up to its own tag and put every NPC served less behind the
  credit's floor alike, forgetting who was served how much); nor does an item a coalesced
  batch takes out of its queue.
  The cost is the ticket's dominant share (one request, or its tokens in request equivalents when
  more). The credit (:data:`IDLE_CREDIT` requests) is how far behind an owner may be when it comes
  back: one whose requests expired unserved, or that asks rarely, goes first among owners served
  more, but can never claim more than that for its idle time.
- **Dialogue near its deadline goes by deadline.** Dialogue is banded like NPC work (fair shares
  between conversations, which matter while player dialogue keeps a phone busy), except that
  the dialogue queue keeps its tickets in deadline order too (:meth:`ClassQueue.urgent`): when
  the tickets due no later than one, itself included, served one per expected admission
  interval of the backend, would leave it less than :data:`URGENCY_MARGIN` intervals of slack,
  the earliest-due ticket goes next, whatever its owner's band. Banded alone, a line of an NPC
  served much waited behind the newer lines of NPCs served less, on a phone whose dialogue was
  backlogged for a moment, until its deadline passed, though every line could have started in
  time. Earliest deadline first for all dialogue (tried) serves lines in arrival order under the
  server's common queue time and costs the fair shares: a conversation that asks more gets
  more. An urgent admission charges its owner like any other, but moves virtual time no
  further than the band order's head.
- **Bands.** Start tags are grouped in bands (one request wide, :data:`NPC_WORK_BAND`). The lowest
  band goes first; within it the ticket that may wait least (the shortest queue budget: deadline
  less queueing time; tickets without a deadline last) goes first, then a decision before
  background work, then the earliest deadline, then the lower tag, then arrival. An admission
  moves its owner's next tag at least one band on, so no owner is served twice within a band:
  two backlogged owners stay within about two ticket costs of each other. Why the budget before
  the class: with the phones decode-bound, a decision (a minute's budget) of every NPC not yet
  served went before any bark (five seconds), so the barks of those NPCs all expired unserved,
  and an NPC whose actions were barks got nothing in the run (176 of 3,000 in ``simulate
  --npcs 3000 --npc-mix 0.1,0.25,0.65 --bark-deadline 5``); the decisions can still start after
  the barks. Within one owner: priority, then earliest deadline, then arrival.
- **Follow-ups first.** A follow-up ticket (the next step of an action whose first step was
  admitted and charged: a tool round's next step, a repair) goes before every band of its class
  and moves virtual time no further: half an action serves nobody, and a player's line waited
  behind the first steps of every NPC served less than its speaker (talks took 41 s at p99).

Why not strict classes with fairness inside each (as before): over a short overloaded run each
NPC gets two or three admissions, and how many depends on the mix of its requests: one whose work
was mostly barks got a fraction of what one with dialogue and decisions got (Jain's index 0.86 to
0.89 over ten quota windows at 2x load). Classic SFQ's "no credit for idle time" made it worse:
an NPC whose barks expired unserved counted as idle, so the order among such NPCs was mere
arrival order and some got nothing in the run.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math

from .tickets import Ticket

__all__ = ["IDLE_CREDIT", "URGENCY_MARGIN", "ClassQueue", "Ledger", "QueueEntry"]

_NO_DEADLINE = math.inf
NPC_WORK_BAND = 1.0
"""Request equivalents of service within which a decision goes before another owner's background work."""
IDLE_CREDIT = 3.0
"""Request equivalents an owner may be behind virtual time when its ticket is tagged."""
URGENCY_MARGIN = 2.0
"""Admissions of slack beyond the tickets due first that a ticket of a queue kept by deadline
(dialogue) keeps before it goes earliest deadline first: the admission in progress, and a little
jitter of the event loop."""


class QueueEntry:
    """A queued ticket; ``live`` goes False when it leaves the queue (lazy removal)."""

    __slots__ = ("cost", "key", "live", "ticket")

    def __init__(self, ticket: Ticket, cost: float, serial: int) -> None:
        self.ticket = ticket
        self.cost = cost
        self.live = True
        deadline = ticket.deadline if ticket.deadline is not None else _NO_DEADLINE
        self.key = (int(ticket.priority), deadline, serial)


class _Account:
    __slots__ = ("finish", "held", "version")

    def __init__(self) -> None:
        self.finish = -math.inf
        self.held = 0  # tickets of this owner queued in any class
        self.version = 0  # bumped at each admission, to spot stale tags


class Ledger:
    """Every owner's service on one backend, or on the phones of one pool (whose policies share
    it, so an NPC served on one phone waits its turn on the others): SFQ finish tags on one
    virtual clock."""

    def __init__(self, credit: float = IDLE_CREDIT) -> None:
        self.credit = credit
        self.vtime = 0.0
        self._accounts: dict[str, _Account] = {}
        self._sweep_at = 64

    def __len__(self) -> int:
        return len(self._accounts)

    def start_tag(self, owner: str) -> float:
        floor = self.vtime - self.credit
        account = self._accounts.get(owner)
        return floor if account is None else max(floor, account.finish)

    def version(self, owner: str) -> int:
        account = self._accounts.get(owner)
        return 0 if account is None else account.version

    def finish(self, owner: str) -> float:
        account = self._accounts.get(owner)
        return -math.inf if account is None else account.finish

    def hold(self, owner: str) -> None:
        account = self._accounts.get(owner)
        if account is None:
            self._forget_idle()
            account = self._accounts[owner] = _Account()
        account.held += 1

    def release(self, owner: str) -> None:
        account = self._accounts[owner]
        account.held -= 1
        if not account.held and account.finish <= self.vtime - self.credit:
            del self._accounts[owner]

    def charge(self, owner: str, start: float, cost: float, *, vtime: float | None = None) -> None:
        """``owner`` was admitted at start tag ``start`` (it still holds the ticket); virtual time
        moves on to ``vtime`` (``start`` by default) if that is later."""
        self.vtime = max(self.vtime, start if vtime is None else vtime)
        account = self._accounts[owner]
        account.finish = start + cost
        account.version += 1

    def _forget_idle(self) -> None:
        # An idle owner whose finish tag virtual time has passed is the same as a new one. Sweep
        # them whenever the table has doubled since the last sweep: memory follows the owners
        # that matter, not every owner ever seen, at amortised constant cost.
        if len(self._accounts) < self._sweep_at:
            return
        floor = self.vtime - self.credit
        idle = [n for n, a in self._accounts.items() if not a.held and a.finish <= floor]
        for name in idle:
            del self._accounts[name]
        self._sweep_at = 2 * len(self._accounts) + 64


class _Lane:
    """One owner's tickets in one class, earliest deadline first; ``scheduled`` is the one in the
    class heap (the lane's first live entry, or a removed one not yet surfaced)."""

    __slots__ = ("entries", "scheduled", "token")

    def __init__(self) -> None:
        self.entries: list[tuple[tuple[int, float, int], QueueEntry]] = []
        self.scheduled: QueueEntry | None = None
        self.token = -1  # the serial of the lane's current class-heap item; others are stale


# A heap item: (band, budget, priority, deadline, start tag, arrival, token, owner, entry, ledger version).
_Item = tuple[float, float, int, float, float, int, int, str, QueueEntry, int]


class ClassQueue:
    """One priority class over a shared :class:`Ledger`; see the module docstring."""

    def __init__(self, ledger: Ledger, band: float = 1.0, *, by_deadline: bool = False) -> None:
        """``by_deadline``: keep the queued tickets in deadline order too, for :meth:`urgent`."""
        self._ledger = ledger
        self._band = band
        self._lanes: dict[str, _Lane] = {}
        self._heap: list[_Item] = []
        self._serial = itertools.count()
        self._counts = [0, 0, 0]  # queued, by priority value
        # (deadline, arrival, entry) of the queued tickets with a deadline, when kept by deadline;
        # left entries are dropped lazily, all at once when they are half of the list.
        self._due: list[tuple[float, int, QueueEntry]] | None = [] if by_deadline else None
        self._due_live = 0

    def __len__(self) -> int:
        return sum(self._counts)

    def queued(self, priority: int) -> int:
        return self._counts[priority]

    def push(self, entry: QueueEntry) -> None:
        name = entry.ticket.owner
        self._ledger.hold(name)
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = _Lane()
        heapq.heappush(lane.entries, (entry.key, entry))
        self._counts[entry.ticket.priority] += 1
        if self._due is not None and entry.ticket.deadline is not None:
            bisect.insort(self._due, (entry.key[1], entry.key[2], entry), key=_due_key)
            self._due_live += 1
        scheduled = lane.scheduled
        if scheduled is None or entry.key < scheduled.key:
            # A new head (first, or due earlier than the owner's current one): the old item goes
            # stale and its ticket is scheduled again when it is the lane's first.
            self._schedule(name, lane, entry, self._ledger.start_tag(name))

    def remove(self, entry: QueueEntry) -> None:
        """Take a queued entry out (cancelled or expired); lazily dropped from the heaps."""
        entry.live = False
        self._counts[entry.ticket.priority] -= 1
        self._ledger.release(entry.ticket.owner)
        if self._due is not None and entry.ticket.deadline is not None:
            self._due_live -= 1

    @property
    def due(self) -> int:
        """Queued tickets kept in deadline order (0 unless the queue is kept by deadline)."""
        return self._due_live

    def urgent(self, now: float, service: float) -> QueueEntry | None:
        """The earliest-due ticket of a queue kept by deadline when band order could make a ticket
        miss its deadline: when the tickets due no later than one, itself included, served one
        per ``service`` seconds from ``now``, leave it less than :data:`URGENCY_MARGIN` services
        of slack. ``None`` otherwise (band order meets every deadline with room to spare)."""
        due = self._due
        if not self._due_live or service <= 0:
            return None
        if len(due) > 2 * self._due_live + 16:
            due[:] = [item for item in due if item[2].live]
        horizon = (self._due_live + URGENCY_MARGIN) * service  # no later ticket can be urgent
        rank, first = 0, None
        for deadline, _, entry in due:
            if not entry.live:
                continue
            if first is None:
                first = entry
            rank += 1
            slack = deadline - now
            if slack > horizon:
                return None
            if slack < (rank + URGENCY_MARGIN) * service:
                return first
        return None

    def head(self) -> QueueEntry | None:
        heap, ledger = self._heap, self._ledger
        while heap:
            _, _, _, _, start, _, token, name, entry, version = heap[0]
            lane = self._lanes.get(name)
            if lane is None or token != lane.token:
                heapq.heappop(heap)  # superseded: re-tagged, or an earlier-due head came
            elif not entry.live:
                heapq.heappop(heap)
                self._advance(name, lane)
            elif version != ledger.version(name):
                # The owner was served in another class since this tag was set.
                heapq.heappop(heap)
                self._schedule(name, lane, entry, max(start, ledger.finish(name)))
            else:
                return entry
        return None

    def take(self, entry: QueueEntry) -> None:
        """Take a queued entry out as served by another's admission (an item of a coalesced
        batch): its owner is charged at the tag it holds now, as if it had been admitted."""
        name = entry.ticket.owner
        # Virtual time stays: the admission that answers it moved it already, and this item was
        # chosen out of the queue's order.
        self._ledger.charge(name, self._ledger.start_tag(name), entry.cost, vtime=-math.inf)
        self.remove(entry)

    def head_tag(self) -> float:
        """The start tag of :meth:`head` (infinity when the queue is empty)."""
        return math.inf if self.head() is None else self._heap[0][4]

    def pop(self, entry: QueueEntry, behind: float = math.inf) -> None:
        """Take ``entry`` (:meth:`head`, or :meth:`urgent`) out as admitted and charge its owner;
        virtual time moves to its tag, or only to ``behind`` when that is lower (the head of a
        queue served before it)."""
        if self.head() is entry:
            self._pop_head(behind)
            return
        # Out of band order (an urgent ticket): charged at its owner's tag, like any admission,
        # but virtual time moves no further than the band order's head, so an owner served much
        # does not drag it up and put every owner served less behind the credit's floor alike.
        name = entry.ticket.owner
        start = self._ledger.start_tag(name)
        self._ledger.charge(name, start, entry.cost, vtime=min(start, behind, self.head_tag()))
        self.remove(entry)  # its item in the heap, if it has one, is dropped when it surfaces

    def _pop_head(self, behind: float) -> None:
        _, _, _, _, start, _, _, name, entry, _ = heapq.heappop(self._heap)
        lane = self._lanes[name]
        ledger = self._ledger
        # A follow-up continues an action admitted before: it moves virtual time no more than an
        # item a batch takes (its owner's tag may be far ahead of the others').
        ledger.charge(name, start, entry.cost, vtime=-math.inf if entry.ticket.follow_up else min(start, behind))
        self.remove(entry)
        self._advance(name, lane)

    def _advance(self, name: str, lane: _Lane) -> None:
        entries = lane.entries
        while entries and not entries[0][1].live:
            heapq.heappop(entries)
        if entries:
            self._schedule(name, lane, entries[0][1], self._ledger.start_tag(name))
        else:
            del self._lanes[name]

    def _schedule(self, name: str, lane: _Lane, entry: QueueEntry, start: float) -> None:
        lane.scheduled = entry
        lane.token = token = next(self._serial)
        priority, deadline, arrival = entry.key
        ticket = entry.ticket
        budget = _NO_DEADLINE if ticket.deadline is None else ticket.deadline - ticket.enqueued_at
        # A follow-up (the next step of an action under way) goes before every band: the action
        # was charged when it began, and half an action serves nobody.
        band = -math.inf if ticket.follow_up else math.floor(start / self._band)
        heapq.heappush(self._heap, (band, budget, priority, deadline, start, arrival, token,
                                    name, entry, self._ledger.version(name)))


def _due_key(item: tuple[float, int, QueueEntry]) -> tuple[float, int]:
    return item[0], item[1]
