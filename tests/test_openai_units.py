"""The front door's pure parts: messages → turn, the error table, SSE frames, streamed replies."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from oam_actors.agent import ErrorOutput, PromptEntry, ResponseEntry, TextOutput, ToolCall, ToolUseEntry, TurnUsage
from oam_actors.errors import AGENT_CODES, AgentError, ErrorCode, ProtocolError
from oam_actors.models.scheduler import Priority
from oam_actors.transports.openai.errors import HttpError, from_oam, param_of
from oam_actors.transports.openai.stream import ChunkWriter, Reply, ReplyText, StreamRestarted, apply_stop, completion
from oam_actors.transports.openai.translate import Hints, decode_request, hints_from_headers, plan_turn, read_messages


def messages(*items: dict[str, Any]) -> list[Any]:
    return decode_request(json.dumps({"model": "m", "messages": list(items)}).encode()).messages


def call(call_id: str, name: str = "look", arguments: str = '{"q":1}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- messages → turn --------------------------------------------------------------------------


def test_system_and_developer_messages_are_the_instructions_wherever_they_stand() -> None:
    read = read_messages(messages({"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"},
                                  {"role": "developer", "content": [{"type": "text", "text": "Be kind."}]},
                                  {"role": "user", "content": "b"}))
    assert read.instructions == "Be brief.\n\nBe kind."
    assert (read.history, read.prompt, read.tool_uses) == ([PromptEntry("a")], "b", [])


def test_after_tool_results_the_last_user_message_is_the_prompt_and_the_tools_its_rounds() -> None:
    read = read_messages(messages(
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": "checking", "tool_calls": [call("c1"), call("c2", "other", "{}")]},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "one"}]},
    ))
    assert read.history == [PromptEntry("hi"), ResponseEntry("hello")]
    assert read.prompt == "look it up"
    assert read.tool_uses == [ToolUseEntry(ToolCall("c2", "other", {}), TextOutput("two")),
                              ToolUseEntry(ToolCall("c1", "look", {"q": 1}), TextOutput("one"))]


def test_a_conversation_ending_with_the_assistant_has_no_new_prompt() -> None:
    read = read_messages(messages({"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}))
    assert (read.prompt, read.history) == ("", [PromptEntry("hi"), ResponseEntry("Hello")])


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([{"role": "assistant", "tool_calls": [call("c1")]}], "messages[0].tool_calls"),
        ([{"role": "assistant", "tool_calls": [call("c1", arguments="[1]")]}, {"role": "tool", "tool_call_id": "c1"}],
         "messages[0].tool_calls[0].function.arguments"),
        ([{"role": "tool", "tool_call_id": "c9", "content": "x"}], "messages[0].tool_call_id"),
        ([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}], "messages[0].content[0].type"),
    ],
)
def test_message_mistakes_name_the_field(items: list[dict[str, Any]], param: str) -> None:
    with pytest.raises(HttpError) as caught:
        read_messages(messages(*items))
    assert (caught.value.status, caught.value.detail.param) == (400, param)


def test_decoding_errors_name_the_field_path() -> None:
    with pytest.raises(HttpError) as caught:
        decode_request(b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 2}')
    assert caught.value.detail.param == "top_p"
    with pytest.raises(HttpError) as caught:
        decode_request(b'{"messages": []}')
    assert "model" in caught.value.detail.message


def test_plan_maps_sampling_limits_choice_and_hints() -> None:
    request = decode_request(json.dumps({
        "model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.5, "top_p": 0.9, "seed": 3,
        "max_tokens": 10, "max_completion_tokens": 20, "stop": "END", "user": "ann", "stream": True,
        "stream_options": {"include_usage": True}, "response_format": {"type": "json_object"},
        "tools": [{"type": "function", "function": {"name": "look", "parameters": {}}}], "tool_choice": "required",
    }).encode())
    plan = plan_turn(request, Hints(Priority.BACKGROUND, 2.5, 9.0))
    options = plan.options
    assert (options.temperature, options.max_response_tokens, options.tool_choice.kind.value) == (0.5, 20, "required")
    assert options.sampling is not None and (options.sampling.top_p, options.sampling.seed) == (0.9, 3)
    assert (options.priority, options.queue_seconds, plan.timeout) == ("background", 2.5, 9.0)
    assert (plan.stop, plan.user, plan.stream, plan.include_usage) == (("END",), "ann", True, True)
    assert plan.schema is not None and [t.name for t in plan.tools] == ["look"]


def test_hint_headers() -> None:
    headers = {"x-oam-priority": "Background", "x-oam-queue-timeout": "1.5"}
    assert hints_from_headers(headers.get) == Hints(Priority.BACKGROUND, 1.5, None)
    assert hints_from_headers({}.get) == Hints()
    for bad in ({"x-oam-priority": "now"}, {"x-oam-timeout": "0"}, {"x-oam-queue-timeout": "soon"}):
        with pytest.raises(HttpError):
            hints_from_headers(bad.get)


# --- the error table --------------------------------------------------------------------------


def test_every_agent_code_has_a_status_and_quota_is_never_a_5xx() -> None:
    statuses = {code: from_oam(AgentError(code)).status for code in AGENT_CODES}
    assert statuses[ErrorCode.RATE_LIMITED] == 429
    assert statuses[ErrorCode.BUSY] == statuses[ErrorCode.MODEL_UNAVAILABLE] == 503
    assert statuses[ErrorCode.GENERATION_FAILED] == 500
    assert statuses[ErrorCode.INVALID_SCHEMA] == statuses[ErrorCode.CONTEXT_SIZE_EXCEEDED] == 400
    assert from_oam(ProtocolError(ErrorCode.TIMEOUT, "late")).status == 504
    assert from_oam(ProtocolError(ErrorCode.INVALID_PARAMS, "bad")).status == 400


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    limited = from_oam(AgentError(ErrorCode.RATE_LIMITED, "full", retry_after=2.2))
    assert limited.headers == {"retry-after": "3"}
    assert json.loads(limited.body()) == {"error": {"message": "full", "type": "requests", "param": None,
                                                    "code": "rate_limit_exceeded"}}
    assert from_oam(AgentError(ErrorCode.BUSY)).headers == {"retry-after": "1"}
    assert from_oam(AgentError(ErrorCode.GENERATION_FAILED)).headers == {}


def test_schema_errors_name_their_parameter() -> None:
    error = AgentError(ErrorCode.INVALID_SCHEMA, "bad", path="tools[1].parameters", schemaPath="/type")
    assert from_oam(error, param="tools").detail.param == "tools[1].parameters"


class _Shape(msgspec.Struct):
    a: list[int]


def test_param_of_a_validation_error() -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(b'{"a": [1, "x"]}', type=_Shape)
    assert param_of(caught.value) == "a[1]"


# --- replies and frames ---------------------------------------------------------------------------


def test_reply_text_holds_back_a_possible_stop_sequence() -> None:
    reply = ReplyText(["</s>"])
    assert reply.update("Hello <") == "Hello "
    assert reply.update("Hello </") == ""
    assert reply.update("Hello </b> there") == "</b> there"
    assert reply.update("Hello </b> there</s> more") == ""
    assert reply.sent == "Hello </b> there" and reply.stopped
    assert reply.finish("Hello </b> there</s> more") == ""


def test_reply_text_sends_the_held_back_rest_at_the_end_and_skips_clean_ups() -> None:
    reply = ReplyText(["STOP"])
    assert reply.update('"Hi ST') == '"Hi '
    assert reply.finish('"Hi ST"') == 'ST"'
    cleaned = ReplyText()
    assert cleaned.update('"Hi"') == '"Hi"'
    assert cleaned.finish("Hi") == ""  # the clean-up cannot unsend the quotes


def test_a_reply_regenerated_after_streaming_fails_the_stream() -> None:
    reply = ReplyText()
    reply.update("Hel")
    assert reply.update("Good") == ""  # diverged: either a clean-up or a restart
    with pytest.raises(StreamRestarted):
        reply.update("Good day")


def test_apply_stop() -> None:
    assert apply_stop("a. b. c", [". c", ". b"]) == "a"
    assert apply_stop("abc", []) == "abc"


def frames(data: bytes) -> list[Any]:
    parts = [p for p in data.decode().split("\n\n") if p]
    assert all(p.startswith("data: ") for p in parts)
    return [p[6:] if p[6:] == "[DONE]" else json.loads(p[6:]) for p in parts]


def test_chunk_writer_text_stream() -> None:
    writer = ChunkWriter(id="c1", model="m", created=5, include_usage=True)
    data = writer.text("Hel") + writer.text("lo") + writer.finish(Reply("Hello", usage=TurnUsage(3, 1, 2)))
    sent = frames(data)
    assert sent[-1] == "[DONE]"
    assert [f["choices"][0]["delta"] for f in sent[:3]] == [{"role": "assistant", "content": ""},
                                                             {"content": "Hel"}, {"content": "lo"}]
    assert sent[3]["choices"][0] == {"delta": {}, "index": 0, "finish_reason": "stop", "logprobs": None}
    assert sent[4]["choices"] == [] and sent[4]["usage"]["total_tokens"] == 5
    assert sent[4]["usage"]["prompt_tokens_details"] == {"cached_tokens": 1}
    assert all(f["usage"] is None for f in sent[:4]) and {f["object"] for f in sent[:5]} == {"chat.completion.chunk"}


def test_chunk_writer_tool_calls_and_error_frames() -> None:
    writer = ChunkWriter(id="c1", model="m", created=5, include_usage=False)
    calls = [ToolCall("call_1", "look", {"q": "x"})]
    sent = frames(writer.tool_calls(calls) + writer.finish(Reply(None, calls)))
    delta = sent[0]["choices"][0]["delta"]
    assert delta == {"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "function": {"arguments": '{"q":"x"}', "name": "look"}, "id": "call_1", "type": "function"}]}
    assert sent[1]["choices"][0]["finish_reason"] == "tool_calls" and "usage" not in sent[1]
    error = from_oam(AgentError(ErrorCode.GENERATION_FAILED, "broke")).detail
    assert frames(ChunkWriter(id="c", model="m", created=0, include_usage=False).error(error))[0]["error"]["code"] == (
        "generation_failed")


def test_whole_completion_body() -> None:
    body = json.loads(completion(Reply(None, [ToolCall("c", "look", {})], TurnUsage(2, 0, 1)), id="x", model="m", created=1))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] is None and choice["message"]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3,
                             "prompt_tokens_details": {"cached_tokens": 0}}


def test_an_error_tool_output_is_not_repeated_by_the_dedupe() -> None:
    """Only successful earlier rounds count as done (agent ``resume``)."""
    from oam_actors.agent.turn import Turn

    turn = Turn.__new__(Turn)
    turn.resume([ToolUseEntry(ToolCall("a", "look", {}), ErrorOutput("down")),
                 ToolUseEntry(ToolCall("b", "look", {"q": 1}), TextOutput("ok"))])
    assert (turn.rounds, turn.calls, turn.succeeded) == (2, 2, [("look", {"q": 1})])


def test_listeners_say_they_are_tcp() -> None:
    """asyncio turns Nagle off only on sockets created with IPPROTO_TCP (else ~40 ms a response)."""
    import socket

    from oam_actors.transports.openai import openai_listener

    with openai_listener("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockname()[1] > 0
