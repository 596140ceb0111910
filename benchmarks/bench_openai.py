"""The OpenAI front door next to the bridge over TCP, on one `oam-actors serve` process.

1. The same scripted turn (one reply step of the `--model scripted` system model), one at a time:
   over TCP as `session/respond` on one session, over HTTP as `POST /v1/chat/completions` on one
   keep-alive connection. Per-turn p50 / p99 and the ratio of the two p50s (front door / bridge).
2. N concurrent streaming clients (`"stream": true`, a scripted 8-chunk reply), each on its own
   keep-alive connection: completions and SSE frames per second, p50 / p99 per completion.

Run: python3 benchmarks/bench_openai.py [--turns 500] [--clients 1,10,50] [--requests 20]
The server is pinned to one core with taskset when available, as in bench_tcp.py; the clients are
one asyncio loop in this process with minimal HTTP/1.1 and JSON-lines code.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (first: the oam_actors of this checkout, not an installed one)

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from urllib.parse import urlsplit

REPLY = {"text": "Well met, traveller. The forge is hot and the axes are sharp today.", "chunks": 8}


class Server:
    """`oam-actors serve --tcp … --openai … --model scripted`."""

    def __init__(self) -> None:
        command = [sys.executable, "-m", "oam_actors", "serve", "--tcp", "127.0.0.1:0", "--openai", "127.0.0.1:0",
                   "--model", "scripted", "--max-sessions", "100000", "--max-connections", "100000"]
        if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
            command = ["taskset", "-c", "0", *command]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        tcp = urlsplit(self.proc.stdout.readline().decode().strip())
        http = urlsplit(self.proc.stdout.readline().decode().strip())
        self.tcp = (tcp.hostname or "", tcp.port or 0)
        self.http = (http.hostname or "", http.port or 0)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Http:
    """One keep-alive HTTP/1.1 connection (just enough of it for these answers)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, address: tuple[str, int]) -> Http:
        return cls(*await asyncio.open_connection(*address))

    async def post(self, body: dict[str, object]) -> tuple[bytes, int]:
        """The response body (chunked or not) and how many SSE frames it held."""
        data = json.dumps(body).encode()
        self.writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        head = await self.reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        headers = head.lower()
        if b"transfer-encoding: chunked" not in headers:
            length = int(headers.split(b"content-length: ")[1].split(b"\r\n")[0])
            return await self.reader.readexactly(length), 0
        body_parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                break
            body_parts.append(await self.reader.readexactly(size + 2))
        whole = b"".join(body_parts)
        return whole, whole.count(b"data: ")

    def close(self) -> None:
        self.writer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bridge_turns(server: Server, turns: int) -> list[float]:
    reader, writer = await asyncio.open_connection(*server.tcp)

    async def call(n: int, method: str, params: dict[str, object]) -> dict[str, object]:
        writer.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}).encode() + b"\n")
        while True:
            message = json.loads(await reader.readline())
            if message.get("id") == n:
                return message

    await call(0, "session/create", {"session": "bench"})
    latencies = []
    for n in range(1, turns + 1):
        started = time.perf_counter()
        answer = await call(n, "session/respond", {"session": "bench", "prompt": "Hello"})
        latencies.append(time.perf_counter() - started)
        assert "result" in answer, answer
    writer.close()
    return latencies


async def openai_turns(server: Server, turns: int) -> list[float]:
    http = await Http.open(server.http)
    body = {"model": "system", "messages": [{"role": "user", "content": "Hello"}]}
    latencies = []
    for _ in range(turns):
        started = time.perf_counter()
        answer, _ = await http.post(body)
        latencies.append(time.perf_counter() - started)
        assert b'"finish_reason":"stop"' in answer
    http.close()
    return latencies


async def streaming_clients(server: Server, clients: int, requests: int) -> tuple[float, float, list[float]]:
    body = {"model": "scripted", "stream": True, "script": [REPLY], "messages": [{"role": "user", "content": "Hi"}]}
    latencies: list[float] = []
    frames = 0

    async def client() -> None:
        nonlocal frames
        http = await Http.open(server.http)
        for _ in range(requests):
            started = time.perf_counter()
            answer, count = await http.post(body)
            latencies.append(time.perf_counter() - started)
            assert answer.rstrip().endswith(b"data: [DONE]"), answer[-80:]
            frames += count
        http.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, frames / elapsed, latencies


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


async def main_async(args: argparse.Namespace) -> None:
    server = Server()
    try:
        await openai_turns(server, 20)  # warm-up: imports, first connections
        await bridge_turns(server, 20)
        bridge = await bridge_turns(server, args.turns)
        front = await openai_turns(server, args.turns)
        ratio = statistics.median(front) / statistics.median(bridge)
        print(f"same scripted turn, one at a time ({args.turns} turns each):")
        print(f"  bridge over TCP (session/respond):   p50 {ms(statistics.median(bridge))}, p99 {ms(percentile(bridge, 0.99))}")
        print(f"  front door (POST chat/completions):  p50 {ms(statistics.median(front))}, p99 {ms(percentile(front, 0.99))}")
        print(f"  ratio front door / bridge (p50):     {ratio:.2f}")
        print(f"streaming clients ({args.requests} streamed completions each, {REPLY['chunks']} text chunks):")
        for clients in args.clients:
            rate, frames, latencies = await streaming_clients(server, clients, args.requests)
            print(f"  {clients:>4} clients: {rate:8.1f} completions/s, {frames:9.0f} SSE frames/s, "
                  f"p50 {ms(statistics.median(latencies))}, p99 {ms(percentile(latencies, 0.99))}")
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--clients", type=lambda text: [int(n) for n in text.split(",")], default=[1, 10, 50])
    parser.add_argument("--requests", type=int, default=20)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
