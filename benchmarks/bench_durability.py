"""Durable objects (``--state-store``): what a crash keeps, and what the store costs.

1. Crash run: ``oam-actors stdio --state-store`` under a load of session turns, NPC talks and
   world updates (interleaved, all in flight), killed with SIGKILL after a random number of
   answers, restarted on the same file, ``--kills`` times. After each restart the session's turns,
   the NPC's turn count and the world's version are read back: each must be at least what was
   acknowledged so far, and the transcript whole turns only. Prints acknowledged vs recovered
   commits (recovered may be more: commits durable whose answer the kill cut off).
2. Throughput: ``--sessions`` sessions × ``--turns-each`` scripted tool-round turns over stdio,
   without and with a store (bench_stdio's client); the ratio (goal >= 0.8).
3. A crowd of ``--npcs`` NPCs (create + one grounded turn each) over stdio with a store (goal:
   under 8 s, as without), bench_crowd's run.

Run: python3 benchmarks/bench_durability.py [--kills 20] [--sessions 100] [--turns-each 10]
     [--rounds 5] [--npcs 10000] [--seed 1]. Not a test.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from typing import Any

from _profiling import load_average
from bench_crowd import over_stdio
from bench_stdio import bench_turns, bridge_command
from oam_actors.cli.runtime import DEFAULT_MAX_RUNNING_TURNS

LINE = {"json": {"emotion": "neutral", "line": "Aye.", "player_options": ["Bye."], "ends_conversation": False}}
PERSONA = {"name": "Gorm", "role": "smith", "personality": "gruff", "speakingStyle": "short"}
BURST = 60  # requests in flight per round: 20 turns, 20 talks, 20 world updates


class Server:
    """``oam-actors stdio --state-store PATH`` with a reader thread collecting every answer."""

    def __init__(self, path: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "oam_actors", "stdio", "--state-store", path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        self.answers: dict[Any, dict[str, Any]] = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "id" in message and "method" not in message:
                with self._cond:
                    self.answers[message["id"]] = message
                    self._cond.notify_all()

    def send(self, *requests: tuple[Any, str, dict[str, Any]]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(
            json.dumps({"jsonrpc": "2.0", "id": i, "method": m, "params": p}).encode() + b"\n" for i, m, p in requests))

    def wait(self, count: int) -> None:
        with self._cond:
            while len(self.answers) < count:
                if not self._cond.wait(timeout=120):
                    raise TimeoutError("the server stopped answering")

    def call(self, method: str, params: dict[str, Any]) -> Any:
        key = f"call-{len(self.answers)}-{method}"
        self.send((key, method, params))
        with self._cond:
            while key not in self.answers:
                if not self._cond.wait(timeout=120):
                    raise TimeoutError("the server stopped answering")
        return self.answers.pop(key)["result"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


def crash_run(kills: int, rng: random.Random) -> None:
    folder = tempfile.mkdtemp(prefix="oam-durability-")
    path = os.path.join(folder, "crash.db")
    acknowledged = {"turns": 0, "talks": 0, "updates": 0}
    recovered = dict(acknowledged)
    torn = 0
    server = Server(path)
    server.call("session/create", {"session": "s", "model": {"type": "scripted", "steps": [{"text": "ok"}] * (BURST * kills)}})
    # No compaction: the NPC's turn count is then every talk it committed.
    server.call("npc/create", {"npc": "n", "persona": PERSONA, "options": {"compactAfterTurns": 0},
                               "model": {"type": "scripted", "steps": [LINE] * (BURST * kills)}})
    server.call("world/create", {"world": "w", "state": {"n": 0}})
    for round_number in range(kills):
        requests = []
        for i in range(BURST // 3):
            requests += [(f"t{i}", "session/respond", {"session": "s", "prompt": f"p{round_number}.{i}"}),
                         (f"k{i}", "npc/talk", {"npc": "n", "line": "hi"}),
                         (f"u{i}", "world/set", {"world": "w", "path": "n", "value": f"{round_number}.{i}"})]
        server.answers.clear()
        server.send(*requests)
        server.wait(rng.randint(1, BURST - 1))
        server.kill()
        ok = [key for key, message in server.answers.items() if "result" in message]
        acknowledged["turns"] += sum(key.startswith("t") for key in ok)
        acknowledged["talks"] += sum(key.startswith("k") for key in ok)
        acknowledged["updates"] += sum(key.startswith("u") for key in ok)
        server = Server(path)
        entries = server.call("session/transcript", {"session": "s"})["transcript"]["transcript"]["entries"]
        torn += [e["type"] for e in entries] != ["prompt", "response"] * (len(entries) // 2)
        [npc] = server.call("npc/list", {})["npcs"]
        recovered = {"turns": len(entries) // 2, "talks": npc["turnCount"],
                     "updates": server.call("world/list", {})["worlds"][0]["version"]}
        lost = {kind: acknowledged[kind] - recovered[kind] for kind in acknowledged if recovered[kind] < acknowledged[kind]}
        if lost:
            print(f"  round {round_number + 1}: LOST {lost}")
        acknowledged = {kind: max(acknowledged[kind], recovered[kind]) for kind in acknowledged}  # durable counts from now
    server.close()
    print(f"crash run: {kills} SIGKILLs under a burst of {BURST} (turns, NPC talks, world updates) ({load_average()})")
    for kind in acknowledged:
        print(f"  {kind:8} acknowledged-or-durable {acknowledged[kind]:>5}, recovered {recovered[kind]:>5}")
    print(f"  torn transcripts: {torn}; lost acknowledged commits: "
          f"{sum(max(0, acknowledged[k] - recovered[k]) for k in acknowledged)}")


def throughput(sessions: int, turns_each: int, rounds: int) -> None:
    """Alternating runs without and with a store (a new file each), medians of ``rounds``: one
    run is a third of a second, which the machine's other load moves by more than the store."""
    folder = tempfile.mkdtemp(prefix="oam-durability-")
    turns = sessions * turns_each
    runs: dict[str, list[dict[str, float]]] = {"without a store": [], "with a store   ": []}
    for n in range(rounds):
        runs["without a store"].append(bench_turns(sessions, turns, bridge_command()))
        store = [*bridge_command(), "--state-store", os.path.join(folder, f"turns{n}.db")]
        runs["with a store   "].append(bench_turns(sessions, turns, store))
    print(f"tool-round turns over stdio, {sessions} sessions x {turns_each}, median of {rounds} runs ({load_average()}):")
    medians = {}
    for label, figures in runs.items():
        rate = statistics.median(f["turns_per_s"] for f in figures)
        cpu = statistics.median(f["server_cpu_us_per_turn"] for f in figures)
        medians[label] = rate, cpu
        print(f"  {label} {rate:>8,.0f} turns/s, server CPU {cpu:>5,.0f} µs per turn")
    (rate_without, cpu_without), (rate_with, cpu_with) = medians.values()
    print(f"  ratio with / without: {rate_with / rate_without:.2f} in turns/s, {cpu_without / cpu_with:.2f} in CPU "
          "per turn (steadier on a shared machine) (goal >= 0.8)")


def crowd(npcs: int) -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="oam-durability-"), "crowd.db")
    report = over_stdio(npcs, DEFAULT_MAX_RUNNING_TURNS, extra=["--state-store", path])
    report.print("crowd over stdio with a store", DEFAULT_MAX_RUNNING_TURNS)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns-each", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5, help="runs of the throughput comparison (medians)")
    parser.add_argument("--npcs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    crash_run(args.kills, random.Random(args.seed))
    throughput(args.sessions, args.turns_each, args.rounds)
    crowd(args.npcs)


if __name__ == "__main__":
    main()
