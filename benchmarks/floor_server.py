"""The floor for bench_stdio: a bare msgspec JSON-lines server, no runtime, no agent.

It answers what bench_stdio sends, with the same messages the bridge would write: ``ping``;
``session/create``; ``session/respond`` as one ``tool/call`` to the client, then the response once
the client's reply arrives. One blocking loop: read a chunk of stdin, handle its lines, write all
their output in one ``os.write``. A figure divided by this one is the share of the bare protocol
traffic's speed that the real server reaches.

Run by bench_stdio.py (``python3 benchmarks/floor_server.py`` reads stdin until it closes).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def handle(message: dict[str, Any], pending: dict[str, tuple[Any, str]], out: list[bytes]) -> None:
    method = message.get("method")
    request_id = message.get("id")
    if method == "ping":
        out.append(_encode({"jsonrpc": "2.0", "id": request_id, "result": {}}))
    elif method == "session/create":
        out.append(_encode({"jsonrpc": "2.0", "id": request_id, "result": {"session": message["params"]["session"]}}))
    elif method == "session/respond":
        session = message["params"]["session"]
        tool_id = f"t-{len(pending)}-{request_id}"
        pending[tool_id] = (request_id, session)
        call = {"id": f"call_{request_id}", "name": "open_gate", "arguments": {"gate": "north"}}
        out.append(_encode({"jsonrpc": "2.0", "id": tool_id, "method": "tool/call",
                            "params": {"session": session, "requestId": request_id, "call": call}}))
    elif method is None and request_id in pending:
        turn_id, session = pending.pop(request_id)
        output = message["result"]["output"]
        result = {"session": session, "text": f"Done: {_encode(output).decode()}", "toolCalls": [
            {"call": {"name": "open_gate", "arguments": {"gate": "north"}}, "output": output}]}
        out.append(_encode({"jsonrpc": "2.0", "id": turn_id, "result": result}))


def main() -> None:
    pending: dict[str, tuple[Any, str]] = {}
    buffer = b""
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    while chunk := os.read(stdin, 1 << 16):
        *lines, buffer = (buffer + chunk).split(b"\n")
        out: list[bytes] = []
        for line in lines:
            if line.strip():
                handle(_decode(line), pending, out)
        if out:
            payload = memoryview(b"\n".join(out) + b"\n")
            while payload:
                payload = payload[os.write(stdout, payload):]


if __name__ == "__main__":
    main()
