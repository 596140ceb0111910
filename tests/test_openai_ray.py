"""The OpenAI front door on ``--runtime ray``: the agent loop runs in the serve process over the
system model's ``RemoteModel``, so OpenAI requests and bridge sessions (on the shards) spend the
one farm of the one model actor."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from serve_process import HANG_GUARD, ServeProcess

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    args = ["--runtime", "ray", "--shards", "2", "--model", "farm:1", "--farm-time-scale", "0.01",
            "--openai", "127.0.0.1:0", "--tcp", "127.0.0.1:0"]
    with ServeProcess(args) as process:
        yield process
        assert process.stop() == 0


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> OpenAI:
    return OpenAI(base_url=server.openai_urls[0], api_key="x", max_retries=0, timeout=HANG_GUARD * 3)


def test_openai_requests_and_bridge_sessions_share_the_model_actor(server: ServeProcess, client: OpenAI) -> None:
    with server.tcp() as peer:
        before = peer.call("model/status")["statistics"]["stepsOk"]
        peer.call("session/create", {"session": "guard"})
        bridge = peer.call("session/respond", {"session": "guard", "prompt": "Good morning!"})
        completion = client.chat.completions.create(model="system", messages=[{"role": "user", "content": "Hi!"}])
        chunks = list(client.chat.completions.create(model="system", stream=True,
                                                     messages=[{"role": "user", "content": "Hello?"}]))
        after = peer.call("model/status")["statistics"]
    assert bridge["text"] and completion.choices[0].message.content
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # The bridge turn and both completions are steps of the one pool in the model actor.
    assert after["stepsOk"] - before >= 3 and after["devices"][0]["busy"] == 0


def test_scripted_tool_round_trip_on_ray(client: OpenAI) -> None:
    ask = [{"role": "user", "content": "Weather in Oslo?"}]
    first = client.chat.completions.create(
        model="scripted", messages=ask, tools=[WEATHER],
        extra_body={"script": [{"toolCalls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}]})
    call = (first.choices[0].message.tool_calls or [])[0]
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    second = client.chat.completions.create(
        model="scripted", tools=[WEATHER], extra_body={"script": [{"template": "Oslo: {toolOutput}"}]},
        messages=[*ask, first.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert second.choices[0].message.content == "Oslo: sunny"
