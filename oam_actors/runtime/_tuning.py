"""Process-level tuning for long-running servers (a CLI server, and every shard process of a
remote runtime).

An actor server holds many long-lived objects (agents, transcripts, mailboxes: about 16 KB per
idle NPC) and makes little cyclic garbage (most of it is freed by reference counting). CPython's
default thresholds then spend much of a busy crowd in full collections that walk every live
object: 2.8 s of a 10,000-NPC crowd run in the profile. Freezing what exists at start-up and
collecting the young generation less often cut that run from 21.5 s to 17.2 s
(`benchmarks/bench_crowd.py`), with the same memory per NPC.

The middle generation is collected after :data:`GEN1_THRESHOLD` young collections, not twenty:
a young collection's survivors (a crowd just created, a burst of queued turns) then move on to the
old generation in small steps. With twenty, one middle collection walked the survivors of a
million allocations at once: after 10,000 NPCs were created, a pause of 0.4-0.7 s fell into the
next burst of talks, before its first answer (`benchmarks/bench_burst.py`: collection in the burst
40-50 µs a turn, 17-21 µs now). The price: an object that outlives a few young collections and
then dies (a long turn's) is walked once more, where the middle collection used to come after it
was gone (a burst that escaped the big pause: 16-20 µs a turn then, 30 µs now). Full collections
come after about as many young ones as before.
"""

from __future__ import annotations

import gc

__all__ = ["tune_gc_for_servers"]

GEN0_THRESHOLD = 50_000
GEN1_THRESHOLD = 2
GEN2_THRESHOLD = 350
"""Middle collections before a full one: one every 1,053 young collections (3 x 351), as with (20, 50) (21 x 51)."""


def tune_gc_for_servers() -> None:
    """Move everything allocated so far out of the collector's way and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
