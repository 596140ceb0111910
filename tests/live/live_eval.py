"""The live eval: real sessions through ``oam-actors stdio`` against a real OpenAI-compatible
model server (``scripts/local_model.py``), measured.

Between the bridge and the model sits a recording relay on loopback (:class:`Relay`): it forwards
every request byte for byte, streams the answer back, and keeps each request, the raw answer and
its timing. That gives, per model step, the exact text the model wrote (judged with the same
envelope parser the agent uses) and the step's latency; the protocol's ``steps`` say which kind
each request was.

Figures (:class:`Figures`): right action per player line; decide envelopes valid on the first try,
and after a repair; structured replies valid (first try, after repair); latency per step kind
(median and max, seconds) and per turn. Used by ``tests/live/test_live_eval.py`` (opt-in) and
``benchmarks/bench_live_model.py``.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: bridge_process

import bridge_process
from bridge_process import BridgeProcess

from oam_actors.agent.envelope import Call, Invalid, Respond, parse_envelope
from oam_actors.models.codecs import CodecError, TextDelta, codec_for

GUARD = (
    "You are Gorm, the gate guard of Oakvale. You speak in short, gruff sentences. "
    "You open gates, check the pass list and sound the alarm when the town is in danger."
)
TOOLS = [
    {"name": "open_gate", "description": "Open one of the town gates for the player.",
     "parameters": {"type": "object", "properties": {"gate": {"type": "string", "enum": ["north", "south"]}},
                    "required": ["gate"]}},
    {"name": "check_pass", "description": "Look up whether a named traveller is on the pass list.",
     "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    {"name": "ring_alarm", "description": "Ring the alarm bell when the town is attacked.",
     "parameters": {"type": "object", "properties": {}}},
]
# (player line, expected action, expected arguments subset)
LINES: list[tuple[str, str, dict[str, Any]]] = [
    ("Good morning, guard!", "respond", {}),
    ("Please open the north gate for me.", "open_gate", {"gate": "north"}),
    ("Is Elda Brook on the pass list?", "check_pass", {"name": "Elda Brook"}),
    ("What is your name, soldier?", "respond", {}),
    ("Open the south gate, I have a cart to bring in.", "open_gate", {"gate": "south"}),
    ("Can you check whether Bram Stone has a pass?", "check_pass", {"name": "Bram Stone"}),
    ("Bandits are climbing the wall! Sound the alarm!", "ring_alarm", {}),
    ("How is the weather up on the wall today?", "respond", {}),
    ("Let me through the north gate, please.", "open_gate", {"gate": "north"}),
    ("Thanks for your help. Goodbye!", "respond", {}),
]
TOOL_OUTPUTS = {
    "open_gate": {"opened": True},
    "check_pass": {"on_list": True, "valid_until": "midsummer"},
    "ring_alarm": {"ringing": True},
}
MOOD = {
    "type": "object",
    "properties": {
        "mood": {"type": "string", "enum": ["calm", "angry", "afraid", "happy"]},
        "line": {"type": "string", "description": "what Gorm says, one sentence"},
    },
    "required": ["mood", "line"],
}
STRUCTURED_PROMPTS = [
    "A dragon is flying over the wall!",
    "A child offers you a fresh apple.",
    "A merchant insults your mother.",
]
# A CPU model step can take a minute; the bridge driver's hang guard must outlast it.
bridge_process.HANG_GUARD = 600.0
OPTIONS = {"maxToolRounds": 1, "maxResponseTokens": 60, "toolTimeoutSeconds": 30}


# --- the recording relay ---------------------------------------------------------------------


@dataclass
class Exchange:
    request: dict[str, Any]
    answer: bytes
    seconds: float


class Relay:
    """A loopback HTTP relay to ``upstream`` that records every exchange (thread-safe)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.prefix = parts.path.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._recorded = threading.Condition()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _relay_handler(self))
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}{self.prefix}"

    def record(self, exchange: Exchange) -> None:
        with self._recorded:
            self.exchanges.append(exchange)
            self._recorded.notify_all()

    def taken(self, start: int, count: int) -> list[Exchange]:
        """The ``count`` exchanges from ``start`` on, once recorded (the relay records an exchange
        just after its last byte, which may be after the bridge has answered)."""
        with self._recorded:
            self._recorded.wait_for(lambda: len(self.exchanges) >= start + count, timeout=30)
            return self.exchanges[start : start + count]

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def _relay_handler(relay: Relay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            started = time.perf_counter()
            upstream = http.client.HTTPConnection(*relay.upstream, timeout=600)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            upstream.request("POST", self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            received = bytearray()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "content-length", "connection", "keep-alive"):
                    self.send_header(name, value)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                while piece := answer.read1(65536):
                    received += piece
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):  # the agent stopped reading (a decide step)
                self.close_connection = True
            finally:
                upstream.close()
                relay.record(Exchange(json.loads(body), bytes(received), time.perf_counter() - started))

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def answer_text(exchange: Exchange) -> str:
    """The model's text in a recorded SSE answer (what it wrote up to where it was read)."""
    decoder = codec_for("openai").new_stream()
    text: list[str] = []
    for frame in exchange.answer.split(b"\n\n"):  # frame by frame: a cut stream keeps what decoded
        try:
            events = decoder.feed(frame + b"\n\n")
        except CodecError:
            break
        text.extend(e.text for e in events if isinstance(e, TextDelta))
    return "".join(text)


# --- the figures -----------------------------------------------------------------------------


@dataclass
class Figures:
    lines: int = 0
    right_action: int = 0
    right_arguments: int = 0
    decide_first: int = 0
    decide_first_valid: int = 0
    decide_repairs: int = 0
    decide_repairs_valid: int = 0
    structured: int = 0
    structured_first_valid: int = 0
    structured_valid: int = 0
    errors: list[str] = field(default_factory=list)
    step_seconds: dict[str, list[float]] = field(default_factory=dict)
    turn_seconds: list[float] = field(default_factory=list)
    actions: list[tuple[str, str, str]] = field(default_factory=list)  # line, expected, chosen
    answers: list[tuple[str, str]] = field(default_factory=list)  # step kind, what the model wrote

    def add_step(self, kind: str, exchange: Exchange) -> None:
        self.step_seconds.setdefault(kind, []).append(exchange.seconds)
        self.answers.append((kind, answer_text(exchange)))

    def summary(self) -> dict[str, Any]:
        def rate(part: int, whole: int) -> str:
            return f"{part}/{whole}" + (f" ({100 * part / whole:.0f}%)" if whole else "")

        latency = {
            kind: {"n": len(v), "median_s": round(statistics.median(v), 2), "max_s": round(max(v), 2)}
            for kind, v in sorted(self.step_seconds.items())
        }
        turns = self.turn_seconds
        return {
            "right action per player line": rate(self.right_action, self.lines),
            "right action and arguments": rate(self.right_arguments, self.lines),
            "decide envelopes valid on the first try": rate(self.decide_first_valid, self.decide_first),
            "decide envelopes valid after a repair": rate(self.decide_repairs_valid, self.decide_repairs),
            "structured replies valid on the first try": rate(self.structured_first_valid, self.structured),
            "structured replies valid (after repair)": rate(self.structured_valid, self.structured),
            "latency per step": latency,
            "latency per turn": {"n": len(turns), "median_s": round(statistics.median(turns), 2) if turns else None,
                                 "max_s": round(max(turns), 2) if turns else None},
            "errors": self.errors,
            "actions": self.actions,
        }


def _valid_envelope(text: str) -> Call | Respond | None:
    names = [t["name"] for t in TOOLS]
    parsed = parse_envelope(text, names, allow_respond=True)
    return None if isinstance(parsed, Invalid) else parsed


def _judge_decides(figures: Figures, steps: list[dict[str, Any]], exchanges: list[Exchange]) -> None:
    for step, exchange in zip(steps, exchanges, strict=False):
        figures.add_step(step["kind"] + (" (repair)" if step["isRepair"] else ""), exchange)
        if step["kind"] != "decide":
            continue
        valid = _valid_envelope(answer_text(exchange)) is not None
        if step["isRepair"]:
            figures.decide_repairs += 1
            figures.decide_repairs_valid += valid
        else:
            figures.decide_first += 1
            figures.decide_first_valid += valid


def _chosen(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    calls = [c for c in result.get("toolCalls", []) if not c.get("isError")]
    if calls:
        return calls[0]["call"]["name"], calls[0]["call"]["arguments"]
    return "respond", {}


def _run_line(bridge: BridgeProcess, relay: Relay, figures: Figures, index: int, line: str, expected: str,
              arguments: dict[str, Any], model: dict[str, Any]) -> None:
    session = f"gate-{index}"
    bridge.call("session/create", {"session": session, "instructions": GUARD, "tools": TOOLS, "model": model,
                                   "options": OPTIONS})
    start = len(relay.exchanges)
    began = time.perf_counter()
    turn = bridge.request("session/respond", {"session": session, "prompt": line})
    while True:
        message = bridge.next()
        if message.get("method") == "tool/call" and message["params"]["requestId"] == turn:
            name = message["params"]["call"]["name"]
            bridge.reply(message["id"], {"output": TOOL_OUTPUTS.get(name, {"ok": True})})
        elif message.get("id") == turn and ("result" in message or "error" in message):
            break
    figures.turn_seconds.append(time.perf_counter() - began)
    figures.lines += 1
    if "error" in message:
        figures.errors.append(f"{line!r}: {message['error']['message']}")
        figures.actions.append((line, expected, "error"))
        return
    result = message["result"]
    chosen, chosen_arguments = _chosen(result)
    figures.actions.append((line, expected, chosen))
    figures.right_action += chosen == expected
    figures.right_arguments += chosen == expected and all(
        str(chosen_arguments.get(k, "")).lower() == str(v).lower() for k, v in arguments.items())
    _judge_decides(figures, result["steps"], relay.taken(start, len(result["steps"])))
    bridge.call("session/delete", {"session": session})


def _run_structured(bridge: BridgeProcess, relay: Relay, figures: Figures, index: int, prompt: str,
                    model: dict[str, Any]) -> None:
    session = f"mood-{index}"
    bridge.call("session/create", {"session": session, "instructions": GUARD, "model": model,
                                   "options": {"maxResponseTokens": 80}})
    start = len(relay.exchanges)
    began = time.perf_counter()
    reply, _ = bridge.response(bridge.request("session/respond", {"session": session, "prompt": prompt,
                                                                  "schema": MOOD}))
    figures.turn_seconds.append(time.perf_counter() - began)
    figures.structured += 1
    if "error" in reply:
        figures.errors.append(f"structured {prompt!r}: {reply['error']['message']}")
        return
    steps = reply["result"]["steps"]
    figures.structured_valid += 1
    figures.structured_first_valid += not any(s["isRepair"] for s in steps)
    for step, exchange in zip(steps, relay.taken(start, len(steps)), strict=False):
        figures.add_step(step["kind"] + (" (repair)" if step["isRepair"] else ""), exchange)
    bridge.call("session/delete", {"session": session})


def run_eval(base_url: str, *, model_name: str = "qwen", lines: int = len(LINES),
             structured: int = len(STRUCTURED_PROMPTS)) -> Figures:
    """Drive the eval against the OpenAI-compatible server at ``base_url`` (…/v1)."""
    relay = Relay(base_url)
    figures = Figures()
    model = {"type": "openai", "baseUrl": relay.url, "model": model_name, "timeoutSeconds": 600}
    try:
        with BridgeProcess() as bridge:
            bridge.call("initialize", {"protocolVersion": "1.0"})
            for index, (line, expected, arguments) in enumerate(LINES[:lines]):
                _run_line(bridge, relay, figures, index, line, expected, arguments, model)
            for index, prompt in enumerate(STRUCTURED_PROMPTS[:structured]):
                _run_structured(bridge, relay, figures, index, prompt, model)
            bridge.close()
    finally:
        relay.close()
    return figures
