"""Added latency of the proxy layer per model step, side by side with the ``openai`` SDK.

A loopback fake OpenAI server (``tests/provider_servers.py``, in its own process so it does not
share our GIL) answers every request with the same recorded-style stream: N text deltas, a finish
chunk, a usage chunk and ``[DONE]``. Three clients read whole steps from it, interleaved:

- ``raw httpx``: POST and read the body bytes, no parsing (the floor);
- ``openai SDK``: ``AsyncOpenAI(...).chat.completions.create(stream=True)``, collecting the text;
- ``ProxyModel``: ``stream(GenerationRequest)`` (codec encode, SSE decode, events → text pieces).

Prints median / p90 per step and the ratio ProxyModel / SDK; "added" is each client's median
minus the raw floor. The SDK part is skipped when ``openai`` is not installed.

Run: python3 benchmarks/bench_proxy.py [--steps 300] [--deltas 40]
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]

from oam_actors.agent.model import GenerationRequest, StepKind
from oam_actors.models.proxy import Provider, ProxyConfig, ProxyModel, new_client

SERVER = """
import sys, time
sys.path.insert(0, {tests!r})
from provider_servers import ProviderServer, openai_text, stream
with ProviderServer() as server:
    server.always = stream(openai_text(*["word%d " % i for i in range({deltas})]), size=1 << 16)
    print(server.url, flush=True)
    sys.stdin.read()
"""
PROMPT = "You guard the north gate. A traveller asks to pass. Answer in one sentence."


def start_server(deltas: int) -> tuple[subprocess.Popen[str], str]:
    code = SERVER.format(tests=str(ROOT / "tests"), deltas=deltas)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


async def timed(step: Callable[[], Awaitable[int]], samples: list[float]) -> None:
    began = time.perf_counter()
    await step()
    samples.append(time.perf_counter() - began)


def summary(name: str, samples: list[float], floor: float | None) -> str:
    ordered = sorted(samples)
    median = statistics.median(ordered)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    added = f"   added {1000 * (median - floor):6.3f} ms" if floor is not None else ""
    return f"{name:12} median {1000 * median:7.3f} ms   p90 {1000 * p90:7.3f} ms{added}"


async def main(steps: int, deltas: int) -> None:
    proc, url = start_server(deltas)
    try:
        async with new_client() as client:
            config = ProxyConfig(provider=Provider.OPENAI, model="m", base_url=url + "/v1")
            model = ProxyModel(config, client=client, environ={})
            request = GenerationRequest(kind=StepKind.RESPOND, system="You are Gorm.", prompt=PROMPT)
            body = {"model": "m", "stream": True, "messages": [{"role": "system", "content": "You are Gorm."},
                                                                {"role": "user", "content": PROMPT}]}

            async def raw() -> int:
                async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
                    return sum([len(chunk) async for chunk in response.aiter_bytes()])

            async def proxy() -> int:
                return len([piece async for piece in model.stream(request)])

            clients: dict[str, Callable[[], Awaitable[int]]] = {"raw httpx": raw, "ProxyModel": proxy}
            try:
                import openai

                sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)

                async def via_sdk() -> int:
                    chunks = await sdk.chat.completions.create(model="m", messages=body["messages"], stream=True)
                    return len([c async for c in chunks if c.choices and c.choices[0].delta.content])

                clients["openai SDK"] = via_sdk
            except ImportError:
                print("openai is not installed: SDK comparison skipped")
            samples: dict[str, list[float]] = {name: [] for name in clients}
            for _ in range(20):  # warm up connections and caches
                for step in clients.values():
                    await step()
            for _ in range(steps):
                for name, step in clients.items():
                    await timed(step, samples[name])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
    floor = statistics.median(samples["raw httpx"])
    print(f"{steps} steps of {deltas} text deltas each, loopback fake OpenAI server (separate process)")
    for name, values in samples.items():
        print(summary(name, values, None if name == "raw httpx" else floor))
    if "openai SDK" in samples:
        ratio = statistics.median(samples["ProxyModel"]) / statistics.median(samples["openai SDK"])
        added_ratio = (statistics.median(samples["ProxyModel"]) - floor) / (
            statistics.median(samples["openai SDK"]) - floor)
        print(f"ratio ProxyModel / openai SDK per step: {ratio:.2f}  (added latency over raw: {added_ratio:.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--deltas", type=int, default=40)
    args = parser.parse_args()
    anyio.run(main, args.steps, args.deltas)
