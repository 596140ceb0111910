"""Fairness when the phones are the bottleneck: ``oam-actors simulate`` on a farm that is
decode-bound (the phones generate most of the time, well under their quota).

The scenario (issue 31, item 5): ``simulate --phones 8 --npcs 3000 --sessions 1 --npc-mix
0.1,0.25,0.65 --duration 40 --think 1 --bark-deadline 5``, run as a subprocess. Printed from its
report: Jain's index over conversations' ok turns (goal >= 0.95) beside the most any order of
service could reach with that many ok turns (whole turns per conversation: with between one and
two a conversation, some get one and some two), the fewest and most ok turns of a conversation;
Jain's index if every conversation had exactly one ok turn besides its ok player dialogue (what
the run can give when dialogue, which goes first, takes the phones during the load); the turns
degraded; how the phones' generating time split by priority during the load and over the whole
run (what dialogue leaves is what NPC work can have); and the dialogue's queue wait p99 against
its deadline (goal: within it), with the talks degraded. ``--quick`` runs a shorter variant
(1,000 NPCs for 20 s, the same mix).

Run: python3 benchmarks/bench_fair_phones.py [--quick] [--npcs N] [--duration S] [--seed N]
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _profiling import load_average

DIALOGUE_DEADLINE = 20.0  # the server's default dialogue queue time (simulate --deadline dialogue=…)


def best_jain(ok: int, owners: int) -> float:
    """The highest Jain's index ``ok`` whole turns over ``owners`` can have: each gets the floor
    or the ceiling of the mean."""
    if not ok or not owners:
        return 0.0
    low, high = divmod(ok, owners)
    squares = (owners - high) * low * low + high * (low + 1) ** 2
    return ok * ok / (owners * squares)


def jain_one_npc_action_each(dialogue: dict[str, int]) -> float:
    """Jain's index if every conversation had exactly one ok turn besides its ok player dialogue
    (``dialogue``: conversations by their count of ok dialogue turns): what the run can give when
    dialogue, which goes first, takes the phones' time during the load, and NPC work is served
    only after it, one pending action an NPC."""
    levels = [(int(turns) + 1, count) for turns, count in dialogue.items()]
    owners = sum(count for _, count in levels)
    total = sum(turns * count for turns, count in levels)
    return total * total / (owners * sum(turns * turns * count for turns, count in levels)) if owners else 0.0


def _shares(seconds: dict[str, float]) -> str:
    total = sum(seconds.values()) or 1.0
    return ", ".join(f"{name} {value / total:.0%}" for name, value in seconds.items())


def simulate(npcs: int, duration: float, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "oam_actors", "simulate", "--phones", "8", "--npcs", str(npcs),
                   "--sessions", "1", "--npc-mix", "0.1,0.25,0.65", "--duration", str(duration), "--think", "1",
                   "--bark-deadline", "5", "--seed", str(seed), "--report-dir", folder, "--no-progress"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        return json.loads((Path(folder) / "report.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--quick", action="store_true", help="1,000 NPCs for 20 s instead of 3,000 for 40 s")
    parser.add_argument("--npcs", type=int)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    npcs = args.npcs or (1000 if args.quick else 3000)
    duration = args.duration or (20.0 if args.quick else 40.0)
    report = simulate(npcs, duration, args.seed)
    fairness, turns = report["fairness"], report["turns"]
    jain, owners = fairness["jainIndex"] or 0.0, fairness["owners"]
    generating = [d["generating"] for d in report.get("quotaUse") or []]
    print(f"phones the bottleneck: 8 phones, {npcs:,} NPCs + 1 session, mix 0.1,0.25,0.65, {duration:g} s, "
          f"bark deadline 5 s ({load_average()})")
    if generating:
        print(f"  phones generating {min(generating):.0%}-{max(generating):.0%} of the time")
    print(f"  fairness: Jain {jain:.3f} over {owners:,} conversations (goal >= 0.95); the most any order could "
          f"reach with {turns['ok']:,} ok turns: {best_jain(turns['ok'], owners):.3f}; ok turns per conversation "
          f"{fairness['okTurnsMin']}-{fairness['okTurnsMax']}")
    dialogue_ok = fairness.get("dialogueOkTurns")
    if dialogue_ok:
        talked = sum(int(n) * count for n, count in dialogue_ok.items())
        print(f"  {talked:,} ok player dialogue turns in {owners - dialogue_ok.get('0', 0):,} conversations; Jain if every "
              f"conversation had exactly one other ok turn besides its dialogue: {jain_one_npc_action_each(dialogue_ok):.3f}")
    degraded = sum(e["degraded"] for e in report["expiry"].values())
    print(f"  turns: {turns['total']:,}, ok {turns['ok']:,}, degraded {degraded:,}, failed {turns['failed']:,}")
    phone_time = report.get("phoneTime")
    if phone_time:
        print(f"  phone time generating, during the load: {_shares(phone_time['load'])}; over the run (the "
              f"turns in flight at its end drain after it): {_shares(phone_time['run'])}")
    dialogue = report["queueWait"]["dialogue"]
    talks = report["actions"]["talk"]
    print(f"  dialogue: queue wait p50 {dialogue['p50Ms'] / 1000:.1f} s, p99 {dialogue['p99Ms'] / 1000:.1f} s "
          f"(deadline {DIALOGUE_DEADLINE:g} s); talks {talks['total']:,}, ok {talks['ok']:,}, "
          f"degraded {talks['degraded']:,}")


if __name__ == "__main__":
    main()
