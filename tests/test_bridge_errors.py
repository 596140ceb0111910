"""Errors that tell the truth, through a real in-process :class:`Bridge` on a real LocalSystem.

A client's mistake is ``-32602`` naming the parameter; our own bug is ``-32603`` with a generic
message and the traceback (with the request id and method) in the log; ``session/list`` skips
only sessions deleted meanwhile; two connections creating one session id at once get one
session and one ``-32021``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oam_actors import Agent, Availability, Bridge, Call, Deferred, GameExtension, LocalSystem, ScriptedModel
from oam_actors.objects import SessionActor
from oam_actors.objects.session import NAMESPACE_SEPARATOR
from oam_actors.client import Client, InProcessEndpoint, connect
from oam_actors.errors import OamError

Write = Callable[[bytes], Awaitable[None]]
INTERNAL = {"code": -32603, "message": "Internal error.", "data": {"code": "internal_error"}}


class BuggyMethods:
    """A test-only extension whose methods have the bugs a handler can have."""

    def install(self, bridge: Bridge) -> None:
        bridge.registry.register("test/keyError", self.key_error)
        bridge.registry.register("test/typeError", self.type_error)
        bridge.registry.register("test/deferredValueError", self.deferred_value_error)

    async def aclose(self) -> None:
        return None

    async def key_error(self, call: Call) -> Any:
        return {}["secret detail"]

    async def type_error(self, call: Call) -> Any:
        return len(call.params.raw("secret detail"))  # absent: object of type 'NoneType' has no len()

    async def deferred_value_error(self, call: Call) -> Any:
        async def later() -> Any:
            await anyio.lowlevel.checkpoint()
            raise ValueError("invalid literal for int() with base 10: 'secret'")

        return Deferred(later())


class RawClient:
    """Lines in, responses by id out: the request ids are the test's own."""

    def __init__(self) -> None:
        self.send, self._receive = anyio.create_memory_object_stream[bytes](max_buffer_size=64)
        self.responses: dict[Any, dict[str, Any]] = {}
        self._arrived = anyio.Event()

    async def write(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            if line:
                message = msgspec.json.decode(line)
                self.responses[message.get("id")] = message
                self._arrived.set()

    async def call(self, request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        await self.send.send(msgspec.json.encode(message))
        while request_id not in self.responses:
            self._arrived = anyio.Event()
            await self._arrived.wait()
        return self.responses[request_id]


async def run_buggy(calls: list[tuple[Any, str]]) -> list[dict[str, Any]]:
    client = RawClient()
    async with LocalSystem() as system:
        bridge = Bridge(system, client.write, extensions=[BuggyMethods()])
        async with anyio.create_task_group() as group:
            group.start_soon(bridge.serve, client._receive)
            answers = [await client.call(request_id, method) for request_id, method in calls]
            assert (await client.call("last", "ping"))["result"] == {}  # the connection stays up
            client.send.close()
    return answers


@pytest.mark.parametrize(
    ("method", "exception"),
    [("test/keyError", KeyError), ("test/typeError", TypeError), ("test/deferredValueError", ValueError)],
)
async def test_a_handler_bug_is_an_internal_error_with_its_traceback_in_the_log(
    method: str, exception: type[Exception], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="oam_actors.bridge"):
        [answer] = await run_buggy([("req-7", method)])
    assert answer["error"] == INTERNAL  # Python's own text never reaches the client
    [record] = [r for r in caplog.records if r.exc_info is not None]
    assert "'req-7'" in record.getMessage() and method in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is exception
    assert "Traceback" in caplog.text and str(record.exc_info[1]) in caplog.text


def make_bridge(system: LocalSystem, **kwargs: Any) -> Callable[[Write], Bridge]:
    return lambda write: Bridge(system, write, **kwargs)


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("session/create", {"session": 5}, "Parameter 'session' must be a string; got 5."),
        ("session/create", {"model": "scripted", "options": {"maxToolRounds": "two"}},
         "Parameter 'options.maxToolRounds' must be an integer; got \"two\"."),
        ("session/respond", {"session": ["s1"]}, "Parameter 'session' must be a string; got [\"s1\"]."),
        ("session/compact", {"session": "s1", "keepRecentTurns": 1.5}, "Parameter 'keepRecentTurns' must be an integer; got 1.5."),
    ],
)
async def test_a_wrong_typed_param_is_still_invalid_params_naming_it(
    method: str, params: dict[str, Any], message: str
) -> None:
    async with LocalSystem() as system, connect(InProcessEndpoint(make_bridge(system))) as client:
        await client.call("session/create", {"model": "scripted"})
        with pytest.raises(OamError) as info:
            await client.call(method, params)
    assert info.value.to_wire() == {"code": -32602, "message": message, "data": {"code": "invalid_params"}}


# --- session/list ----------------------------------------------------------------------------


async def test_a_bug_describing_a_session_fails_the_list_instead_of_hiding_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: SessionActor) -> dict[str, Any]:
        raise KeyError("model")

    async with LocalSystem() as system, connect(InProcessEndpoint(make_bridge(system))) as client:
        await client.call("session/create", {"session": "gorm", "model": "scripted"})
        monkeypatch.setattr(SessionActor, "_describe", broken)
        with caplog.at_level(logging.ERROR, logger="oam_actors.bridge"), pytest.raises(OamError) as info:
            await client.call("session/list")
    assert info.value.to_wire() == INTERNAL
    assert any(r.exc_info is not None and "session/list" in r.getMessage() for r in caplog.records)


class SlowToStop(SessionActor):
    """A session whose stop waits for the test, so it can be listed while it is being deleted."""

    def __init__(self, outlet: Bridge) -> None:
        super().__init__(Agent(ScriptedModel()), outlet, model_name="scripted")
        self.stopping = anyio.Event()
        self.released = anyio.Event()

    async def on_stop(self) -> None:
        self.stopping.set()  # new messages are refused from here on
        await self.released.wait()


async def test_a_session_deleted_meanwhile_is_left_out_of_the_list() -> None:
    namespace = "t:guild" + NAMESPACE_SEPARATOR
    async with LocalSystem() as system:
        make = make_bridge(system, namespace=namespace, shared=True)
        deleting = InProcessEndpoint(make)
        async with connect(deleting) as deleter, connect(InProcessEndpoint(make)) as lister:
            await lister.call("session/create", {"session": "mira", "model": "scripted"})
            bridge = deleting.server
            assert isinstance(bridge, Bridge)
            leaving = SlowToStop(bridge)
            system.spawn(bridge.address("session", "gorm"), lambda: leaving)
            async with anyio.create_task_group() as group:
                group.start_soon(deleter.call, "session/delete", {"session": "gorm"})
                await leaving.stopping.wait()
                listed = await lister.call("session/list")
                leaving.released.set()
    assert [entry["session"] for entry in listed["sessions"]] == ["mira"]


# --- session/create on shared objects ------------------------------------------------------------


class GatedModel(ScriptedModel):
    """A system model whose availability answers only once two creates are waiting on it, so
    both have passed the existence check before either spawns."""

    def __init__(self, arrivals: list[int], both: anyio.Event) -> None:
        super().__init__()
        self._arrivals = arrivals
        self._both = both

    async def availability(self) -> Availability:
        self._arrivals.append(1)
        if len(self._arrivals) == 2:
            self._both.set()
        await self._both.wait()
        return await super().availability()


async def test_two_connections_creating_one_session_get_one_session_and_one_session_exists() -> None:
    namespace = "t:guild" + NAMESPACE_SEPARATOR
    arrivals: list[int] = []
    both = anyio.Event()
    outcomes: list[Any] = []
    async with LocalSystem() as system:
        make = make_bridge(system, namespace=namespace, shared=True, system_model=lambda: GatedModel(arrivals, both))
        async with connect(InProcessEndpoint(make)) as first, connect(InProcessEndpoint(make)) as second:

            async def create(client: Client) -> None:
                try:
                    outcomes.append(await client.call("session/create", {"session": "gorm"}))
                except OamError as error:
                    outcomes.append(error.to_wire())

            async with anyio.create_task_group() as group:
                group.start_soon(create, first)
                group.start_soon(create, second)
            listed = await first.call("session/list")
    assert len(arrivals) == 2
    created = [o for o in outcomes if "session" in o]
    refused = [o for o in outcomes if "code" in o]
    assert created == [{"session": "gorm", "warnings": []}]
    assert refused == [
        {"code": -32021, "message": "Session 'gorm' already exists.", "data": {"code": "session_exists", "session": "gorm"}}
    ]
    assert [entry["session"] for entry in listed["sessions"]] == ["gorm"]


# --- no client input reaches the internal-error path ------------------------------------------------

_NAMES = ["session", "npc", "world", "prompt", "line", "options", "tools", "schema", "history", "model",
          "instructions", "state", "persona", "situation", "requests", "path", "value", "toolChoice",
          "maxToolRounds", "temperature", "context", "actor", "fallbackOptionID", "keepRecentTurns", "stream",
          "enabledTools", "note", "type", "steps", "text", "json", "id", "name", "parameters", "topK"]
_LEAVES = st.sampled_from([None, True, False, 0, -1, 1.5, 1e300, 2**40, "", "x", "gorm", "village", "scripted",
                           "system", "auto", "greedy", "a.b", "[0]"])
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_NAMES), inner, max_size=4),
    max_leaves=8,
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 10_000), st.dictionaries(st.sampled_from(_NAMES), _VALUES, max_size=4)),
                min_size=1, max_size=12))
def test_no_params_make_a_method_answer_internal_error(calls: list[tuple[int, dict[str, Any]]]) -> None:
    async def run() -> list[tuple[str, dict[str, Any]]]:
        internal = []
        async with LocalSystem() as system:
            endpoint = InProcessEndpoint(make_bridge(system, extensions=[GameExtension()]))
            async with connect(endpoint) as client:
                await client.call("world/create", {"world": "village"})
                await client.call("npc/create", {"npc": "gorm", "persona": {"name": "Gorm"}, "model": "scripted"})
                await client.call("session/create", {"session": "gorm", "model": "scripted"})
                assert isinstance(endpoint.server, Bridge)
                methods = [m for m in endpoint.server.registry.names() if m != "shutdown"]
                # No tool handlers: every tool/call is answered with an error output.
                await _call_all(client, methods, calls, internal)
        return internal

    assert anyio.run(run) == []


async def _call_all(client: Client, methods: list[str], calls: list[tuple[int, dict[str, Any]]],
                    internal: list[tuple[str, dict[str, Any]]]) -> None:
    for pick, params in calls:
        method = methods[pick % len(methods)]
        try:
            await client.call(method, params)
        except OamError as error:
            if error.code.wire == "internal_error":
                internal.append((method, params))
