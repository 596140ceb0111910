"""The OpenAI front door driven by the official ``openai`` SDK against a real ``oam-actors serve``.

One server (scripted models, a TCP listener too) serves the module; requests name the
``scripted`` model with their script in ``extra_body`` (the bridge's inline scripted model), or
the ``system`` model (``--model scripted``: it answers ``(script exhausted)``).
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI

from serve_process import HANG_GUARD, ServeProcess

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time now.", "parameters": {}}}
USER = [{"role": "user", "content": "What is the weather in Oslo?"}]


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with ServeProcess(["--openai", "127.0.0.1:0", "--tcp", "127.0.0.1:0", "--model", "scripted",
                       "--max-line-bytes", "20000"]) as process:
        yield process
        assert process.stop() == 0


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> OpenAI:
    return OpenAI(base_url=server.openai_urls[0], api_key="unused", max_retries=0, timeout=HANG_GUARD)


def scripted(client: OpenAI, steps: list[Any], messages: list[Any] = USER, **kwargs: Any) -> Any:
    extra = kwargs.pop("extra_body", {})
    return client.chat.completions.create(model="scripted", messages=messages, extra_body={"script": steps, **extra},
                                          **kwargs)


def test_plain_completion_over_the_system_model(client: OpenAI) -> None:
    completion = client.chat.completions.create(model="system", messages=[{"role": "user", "content": "Hi"}])
    choice = completion.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", "(script exhausted)", "stop")
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    assert completion.usage is not None and completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens) > 0


def test_scripted_reply_sees_the_history_and_instructions(client: OpenAI) -> None:
    messages = [
        {"role": "system", "content": "You are Gorm."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Well met."},
        {"role": "user", "content": [{"type": "text", "text": "Price of an axe?"}]},
    ]
    completion = scripted(client, [{"template": "You asked: {prompt}"}], messages)
    assert completion.choices[0].message.content == "You asked: Price of an axe?"


def test_models_list_and_card(client: OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["system", "scripted"]
    assert client.models.retrieve("scripted").id == "scripted"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_streamed_chunks_as_openai_sends_them(client: OpenAI) -> None:
    stream = scripted(client, [{"text": "Hello there, traveller.", "chunks": 4}], stream=True,
                      stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, traveller."
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2  # really streamed
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_stream_without_include_usage_has_no_usage_member(server: ServeProcess) -> None:
    lines = _raw_stream(server, {"model": "scripted", "script": [{"text": "Hi"}], "stream": True, "messages": USER})
    assert lines[-1] == "data: [DONE]"
    frames = [json.loads(line[6:]) for line in lines[:-1]]
    assert all("usage" not in frame for frame in frames)
    assert frames[-1]["choices"][0]["finish_reason"] == "stop"


def test_forced_tool_call(client: OpenAI) -> None:
    completion = scripted(client, [{"toolCalls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}],
                          tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Oslo"}


def test_automatic_tool_call_streamed_as_tool_call_deltas(client: OpenAI) -> None:
    stream = scripted(client, [{"toolCalls": [{"name": "get_weather", "arguments": {"city": "Bergen"}}]}],
                      tools=[WEATHER], stream=True)
    chunks = list(stream)
    deltas = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name) for d in deltas] == [(0, "get_weather")]
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Bergen"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_answers_without_tools(client: OpenAI) -> None:
    completion = scripted(client, [{"toolCalls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
                                   {"text": "No tools today."}], tools=[WEATHER], tool_choice="none")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.content == "No tools today."


def test_full_tool_round_trip(client: OpenAI) -> None:
    first = scripted(client, [{"toolCalls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}], tools=[WEATHER])
    call = (first.choices[0].message.tool_calls or [])[0]
    messages = [*USER, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "rain, 7 °C"}]
    second = scripted(client, [{"template": "{prompt} -> {toolOutput}"}], messages, tools=[WEATHER])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "What is the weather in Oslo? -> rain, 7 °C"


def test_repeating_the_same_call_after_its_result_answers_instead(client: OpenAI) -> None:
    """The earlier round counts for the dedupe, as within one bridge turn."""
    messages = [*USER, {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"}]
    completion = scripted(client, [{"toolCalls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
                                   {"text": "It rains."}], messages, tools=[WEATHER])
    assert (completion.choices[0].finish_reason, completion.choices[0].message.content) == ("stop", "It rains.")


def test_invalid_arguments_after_the_repair_are_never_returned(client: OpenAI) -> None:
    bad = {"toolCalls": [{"name": "get_weather", "arguments": {"town": "Oslo"}}]}
    completion = scripted(client, [bad, bad, {"text": "I could not look that up."}], tools=[WEATHER],
                          tool_choice="required")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].message.content == "I could not look that up."


def test_repaired_arguments_are_returned_valid(client: OpenAI) -> None:
    completion = scripted(client, [{"toolCalls": [{"name": "get_weather", "arguments": {"town": "Oslo"}}]},
                                   {"toolCalls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}],
                          tools=[WEATHER], tool_choice="required")
    call = (completion.choices[0].message.tool_calls or [])[0]
    assert json.loads(call.function.arguments) == {"city": "Oslo"}


def test_json_schema_output(client: OpenAI) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "price": {"type": "integer"}},
              "required": ["name", "price"]}
    completion = scripted(client, [{"json": {"name": "axe", "price": "12"}}], response_format={
        "type": "json_schema", "json_schema": {"name": "item", "schema": schema, "strict": True}})
    assert json.loads(completion.choices[0].message.content or "") == {"name": "axe", "price": 12}


def test_json_schema_output_streamed_as_one_valid_value(client: OpenAI) -> None:
    chunks = list(scripted(client, [{"template": "not json"}, {"json": {"ok": True}}], stream=True,
                           response_format={"type": "json_object"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == {"ok": True}


def test_stop_sequences(client: OpenAI) -> None:
    completion = scripted(client, [{"text": "One. Two. Three."}], stop=[" Two"])
    assert completion.choices[0].message.content == "One."
    chunks = list(scripted(client, [{"text": "One. Two. Three.", "chunks": 8}], stop=". T", stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "One"


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "Expected"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role", "function"),
        ({"messages": []}, "messages", "at least one"),
        ({"messages": USER, "n": 2}, "n", "n > 1"),
        ({"messages": USER, "temperature": 3}, "temperature", "<= 2"),
        ({"messages": USER, "tools": [{**WEATHER, "function": {**WEATHER["function"], "parameters": {"type": "objekt"}}}]},
         "tools[0].parameters", "type"),
        ({"messages": USER, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "fly"}}},
         "tool_choice", "fly"),
        ({"messages": USER, "tool_choice": "required"}, "tool_choice", "at least one tool"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content[0].type", "image_url"),
        ({"messages": [*USER, {"role": "tool", "tool_call_id": "nope", "content": "x"}]}, "messages[1].tool_call_id",
         "nope"),
        ({"messages": [*USER, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "get_weather", "arguments": "{}"}}]}, {"role": "user", "content": "and?"}]},
         "messages[1].tool_calls", "'c'"),
        ({"messages": USER, "stream_options": {"include_usage": True}}, "stream_options", "stream"),
        ({"messages": USER, "script": [{"bogus": 1}]}, "script", "script.steps[0]"),
    ],
)
def test_client_mistakes_are_400_naming_the_field(client: OpenAI, body: dict[str, Any], param: str, words: str) -> None:
    body = dict(body)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="scripted", messages=body.pop("messages"), extra_body=body)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param and error["type"] == "invalid_request_error"
    assert words in error["message"]


def test_unknown_fields_are_ignored(client: OpenAI) -> None:
    completion = scripted(client, [{"text": "fine"}], extra_body={"top_k": 3, "repetition_penalty": 1.1},
                          presence_penalty=0.5, user="tester", seed=7, top_p=0.9, max_tokens=50)
    assert completion.choices[0].message.content == "fine"


def test_unknown_model_is_404(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert caught.value.body["code"] == "model_not_found" and caught.value.body["param"] == "model"  # type: ignore[index]


@pytest.mark.parametrize(
    ("code", "error", "status"),
    [
        ("generation_failed", openai.InternalServerError, 500),
        ("busy", openai.InternalServerError, 503),
        ("rate_limited", openai.RateLimitError, 429),
        ("context_size_exceeded", openai.BadRequestError, 400),
        ("model_unavailable", openai.InternalServerError, 503),
    ],
)
def test_backend_errors_map_to_http_statuses(client: OpenAI, code: str, error: type[Exception], status: int) -> None:
    with pytest.raises(error) as caught:
        scripted(client, [{"error": code}] * 3)
    response = caught.value.response  # type: ignore[attr-defined]
    assert response.status_code == status
    assert ("retry-after" in response.headers) == (status in (429, 503))
    if status == 429:
        assert caught.value.body["code"] == "rate_limit_exceeded"  # type: ignore[attr-defined]


def test_timeout_is_504(server: ServeProcess) -> None:
    status, headers, body = _post(server, {"model": "scripted", "messages": USER,
                                           "script": [{"text": "late", "delayMs": 60000}]},
                                  {"x-oam-timeout": "0.2"})
    assert status == 504 and body["error"]["type"] == "timeout"


def test_bad_hint_header_is_400(server: ServeProcess) -> None:
    status, _, body = _post(server, {"model": "system", "messages": USER}, {"x-oam-priority": "urgent"})
    assert status == 400 and "x-oam-priority" in body["error"]["message"]


def test_malformed_json_and_oversize_bodies(server: ServeProcess) -> None:
    status, _, body = _post_raw(server, b'{"model": "system", "messages": [')
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, _, body = _post_raw(server, b'{"model":"system","messages":[{"role":"user","content":"' + b"x" * 30000 + b'"}]}')
    assert status == 413 and body["error"]["code"] == "request_too_large"
    status, _, body = _post_raw(server, b"[1, 2]")
    assert status == 400


def test_unknown_path_and_method(server: ServeProcess) -> None:
    status, _, body = _request(server, "GET", server.openai_urls[0] + "/engines")
    assert status == 404 and body["error"]["message"] == "Invalid URL (GET /v1/engines)"
    status, _, body = _request(server, "GET", server.openai_urls[0] + "/chat/completions")
    assert status == 405 and "error" in body


def test_client_disconnect_cancels_the_request(server: ServeProcess, client: OpenAI) -> None:
    """A request waiting on a slow model is cancelled when its client goes away: the server
    stays healthy and other requests are served meanwhile."""
    host, port = server.openai_urls[0].split("//")[1].split("/")[0].split(":")
    body = json.dumps({"model": "scripted", "messages": USER, "script": [{"text": "never", "delayMs": 60000}]}).encode()
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        _wait_for(lambda: _health(server)["openaiRequests"] == 1)
    _wait_for(lambda: _health(server)["openaiRequests"] == 0)
    assert scripted(client, [{"text": "still here"}]).choices[0].message.content == "still here"


def test_bridge_sessions_still_work_beside_the_front_door(server: ServeProcess) -> None:
    with server.tcp() as peer:
        peer.call("session/create", {"session": "s", "model": "scripted"})
        assert peer.call("session/respond", {"session": "s", "prompt": "hi"})["text"] == "(script exhausted)"


# --- auth -----------------------------------------------------------------------------------------


def test_bearer_tokens() -> None:
    with ServeProcess(["--openai", "127.0.0.1:0", "--model", "scripted", "--token", "studio=s3cret"]) as process:
        url = process.openai_urls[0]
        with pytest.raises(openai.AuthenticationError) as caught:
            OpenAI(base_url=url, api_key="wrong", max_retries=0).chat.completions.create(model="system", messages=USER)
        assert caught.value.response.headers["www-authenticate"] == "Bearer"
        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        good = OpenAI(base_url=url, api_key="s3cret", max_retries=0)
        assert good.chat.completions.create(model="system", messages=USER).choices[0].message.content
        status, _, _ = _request(process, "GET", url.removesuffix("/v1") + "/health")
        assert status == 200  # probes need no token
        assert process.stop() == 0


# --- helpers --------------------------------------------------------------------------------------


def _request(server: ServeProcess, method: str, url: str, data: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=HANG_GUARD) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def _post_raw(server: ServeProcess, data: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    return _request(server, "POST", server.openai_urls[0] + "/chat/completions", data,
                    {"content-type": "application/json", **(headers or {})})


def _post(server: ServeProcess, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    return _post_raw(server, json.dumps(body).encode(), headers)


def _raw_stream(server: ServeProcess, body: dict[str, Any]) -> list[str]:
    request = urllib.request.Request(server.openai_urls[0] + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=HANG_GUARD) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        return [line for line in response.read().decode().split("\n") if line]


def _health(server: ServeProcess) -> dict[str, Any]:
    return _request(server, "GET", server.openai_urls[0].removesuffix("/v1") + "/health")[2]


def _wait_for(condition: Any) -> None:
    import time

    deadline = time.monotonic() + HANG_GUARD  # a hang guard, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def test_stopping_the_server_answers_requests_in_flight_503() -> None:
    import threading

    with ServeProcess(["--openai", "127.0.0.1:0", "--model", "scripted"]) as process:
        answers: list[tuple[int, dict[str, str], Any]] = []
        slow = {"model": "scripted", "messages": USER, "script": [{"text": "late", "delayMs": 60000}]}
        thread = threading.Thread(target=lambda: answers.append(_post(process, slow)))
        thread.start()
        _wait_for(lambda: _health(process)["openaiRequests"] == 1)
        assert process.stop() == 0
        thread.join(HANG_GUARD)
    ((status, headers, body),) = answers
    assert status == 503 and body["error"]["code"] == "shutting_down" and "retry-after" in headers
