"""A server's garbage collector (``runtime.tune_gc_for_servers``): objects that survive young
collections (a crowd just created, a burst of queued turns) move on to the old generation in small
steps, so no middle collection walks what a long stretch of earlier work left behind.

Run in a fresh interpreter: tuning freezes everything allocated so far, which a test process must
not do to itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

from oam_actors.runtime._tuning import GEN0_THRESHOLD

YOUNG_IN_A_ROW = 3
"""Young collections whose survivors a middle collection walks at once, at the most."""

PROGRAM = """
import gc, json
from oam_actors.runtime import tune_gc_for_servers
tune_gc_for_servers()
collected = []
gc.callbacks.append(lambda phase, info: phase == "stop" and collected.append(info["generation"]))
kept = [[] for _ in range({survivors})]  # survivors of many young collections, as a crowd's state
gc.callbacks.clear()
print(json.dumps(collected))
"""


def test_survivors_move_on_a_few_young_collections_at_a_time() -> None:
    survivors = 12 * GEN0_THRESHOLD
    run = subprocess.run([sys.executable, "-c", PROGRAM.format(survivors=survivors)],
                         capture_output=True, text=True, check=True, timeout=120)
    generations = json.loads(run.stdout)
    assert generations.count(0) > 2 * YOUNG_IN_A_ROW, generations  # many young collections happened
    young_in_a_row = 0
    for generation in generations:
        young_in_a_row = young_in_a_row + 1 if generation == 0 else 0
        # A middle (or full) collection comes after a few young ones, not after twenty.
        assert young_in_a_row <= YOUNG_IN_A_ROW, generations
