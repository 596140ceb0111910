"""Coalescing: several short, independent steps waiting for one backend share one generation.

Contract
--------
- ``CoalescingModel(backend, CoalesceSettings(max_items=10))`` is a
  :class:`~oam_actors.agent.LanguageModel` over a shared backend (a device pool, a scheduled
  proxy). Steps whose request carries a combinable :data:`~oam_actors.agent.model.BatchItem`
  (barks, tool-free decisions, the decide steps and replies of NPC talks; see
  :mod:`oam_actors.agent.batch`) may be answered together; every other step goes to the
  backend as it is.
- Only steps that are already waiting are packed: every step queues at the backend on its own
  ticket (its priority, deadline and place in fair queuing), and the step admitted first takes
  the others of its kind still waiting, in the order the backend would admit them, out of their
  queues (:class:`DefersRequest`); under pressure batches grow by themselves, up to ``max_items``
  and the backend's context and output limits. NPC work (barks, decisions) lingers for company
  before it queues only while quota is short: while recent steps of its priority had to queue at
  the backend, or did within the last half quota window (:data:`PRESSURE_HOLD`),
  :data:`ADAPTIVE_LINGER` (one second of the backend's time: ``time_scale`` real seconds on a
  simulated farm); after half a window of free capacity nothing waits, so nothing is delayed.
  ``linger_seconds`` fixes the linger instead (0: never); player dialogue lingers only with
  ``dialogue_linger_seconds``.
- One batch is one generation: one shared instruction block, the items numbered, an answer of
  numbered lines read leniently per item. Each item is checked on its own (a bark or a reply is
  one line that neither speaks as nor names another character of the batch; a decision names one of its
  own options; a structured reply fits its own NPC's reply schema); what its step receives is
  exactly what it would have received alone (the line, the decision's or structured reply's
  JSON object), so the agent validates it as usual.
- An item the batch did not answer (missing, invalid, misattributed, cut off) runs alone as the
  normal step, with its usual repair: one extra attempt per affected item, never a wrong answer
  for another character. A batch that fails for a reason every item shares (rate limit, device
  fault) gives each item that error; any other failure runs each item alone. A batch only
  chooses (a talk's decide step answers with its envelope, and its own turn runs the tool
  once); no tool runs inside a batch, so a tool never runs twice.
- Each step gets exactly one outcome. Cancelling a waiting step removes it from its batch;
  cancelling the step whose caller leads a batch queues its other members again.
- ``statistics()`` is the backend's record, with :class:`CoalescingStatistics` in its
  ``coalescing`` field when it has one (a device pool's: ``model/status``).
"""

from ._model import CoalescingModel, CoalescingStatistics, DefersRequest, open_coalesced
from ._policy import (
    ADAPTIVE_LINGER,
    BARK_TASK,
    DECISION_TASK,
    LINE_TASK,
    PRESSURE_HOLD,
    REPLY_ITEM_TOKENS,
    REPLY_TASK,
    STRUCTURED_REPLY_TASK,
    TOOL_CHOICE_TASK,
    Answer,
    CoalesceSettings,
    QueuePressure,
    Unanswered,
    Why,
    apart,
    batch_key,
    batch_request,
    combinable,
    pack,
    read_batch,
)

__all__ = [
    "ADAPTIVE_LINGER",
    "BARK_TASK",
    "DECISION_TASK",
    "LINE_TASK",
    "REPLY_ITEM_TOKENS",
    "REPLY_TASK",
    "STRUCTURED_REPLY_TASK",
    "TOOL_CHOICE_TASK",
    "Answer",
    "CoalesceSettings",
    "CoalescingModel",
    "CoalescingStatistics",
    "DefersRequest",
    "PRESSURE_HOLD",
    "QueuePressure",
    "Unanswered",
    "Why",
    "apart",
    "batch_key",
    "batch_request",
    "combinable",
    "open_coalesced",
    "pack",
    "read_batch",
]
