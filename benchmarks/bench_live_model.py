"""The live eval's figures on a real local model (see ``tests/live/live_eval.py``).

Sessions run through ``oam-actors stdio`` against an OpenAI-compatible server: a gate guard with
three client tools answers ten player lines (one fresh session each), then three structured
replies. Printed: right action per line, decide envelopes valid on the first try and after a
repair, structured replies valid, latency per step kind and per turn, and every answer the model
wrote.

Run: python3 benchmarks/bench_live_model.py [--base-url http://127.0.0.1:PORT/v1] [--lines 10]
Without ``--base-url`` it starts ``scripts/local_model.py`` (first run: downloads ~1.1 GB) and
stops it at the end. Heavy: ~2 GB of memory, both cores, a few minutes.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "live"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _live import ServerDidNotStart, live_model  # noqa: E402
from live_eval import LINES, STRUCTURED_PROMPTS, run_eval  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="an OpenAI-compatible …/v1 (default: start scripts/local_model.py)")
    parser.add_argument("--model-name", default="qwen")
    parser.add_argument("--lines", type=int, default=len(LINES))
    parser.add_argument("--structured", type=int, default=len(STRUCTURED_PROMPTS))
    args = parser.parse_args()
    try:
        with live_model(args.base_url) as base_url:
            figures = run_eval(base_url, model_name=args.model_name, lines=args.lines, structured=args.structured)
    except ServerDidNotStart as exc:
        print(exc, file=sys.stderr)
        return 1
    summary = figures.summary()
    actions = summary.pop("actions")
    print(json.dumps(summary, indent=2))
    print("\nline → expected / chosen")
    for line, expected, chosen in actions:
        print(f"  {'ok ' if expected == chosen else 'XX '} {line!r}: {expected} / {chosen}")
    print("\nanswers (step kind | text)")
    for kind, text in figures.answers:
        print(f"  {kind:18} | {' '.join(text.split())[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
