"""The error tree: the protocol's table pinned, agent codes, retry data, pickling."""

from __future__ import annotations

import pickle

import pytest

from oam_actors.errors import AGENT_CODES, AgentError, ErrorCode, ProtocolError, seconds_text


def test_the_error_table_is_pinned() -> None:
    table = {code.wire: code.number for code in ErrorCode}
    assert table == {
        "parse_error": -32700, "invalid_message": -32600, "method_not_found": -32601,
        "invalid_params": -32602, "internal_error": -32603,
        "model_unavailable": -32001, "guardrail_violation": -32002, "refusal": -32003,
        "context_size_exceeded": -32004, "rate_limited": -32005, "unsupported_language": -32006,
        "invalid_schema": -32007, "tool_failed": -32008, "cancelled": -32009, "busy": -32010,
        "invalid_request": -32011, "generation_failed": -32012,
        "session_not_found": -32020, "session_exists": -32021, "session_limit": -32022,
        "shut_down": -32023, "timeout": -32024,
        "npc_not_found": -32050, "npc_exists": -32051, "world_not_found": -32052,
        "world_exists": -32053, "world_error": -32054, "limit_reached": -32055,
        "subscription_not_found": -32056, "conversation_not_found": -32057, "conversation_exists": -32058,
    }
    assert len(AGENT_CODES) == 12
    assert [c.number for c in AGENT_CODES] == list(range(-32001, -32013, -1))


def test_agent_errors_only_take_agent_codes() -> None:
    with pytest.raises(ValueError):
        AgentError(ErrorCode.SESSION_NOT_FOUND, "no")


def test_retry_after_becomes_an_instant_and_whole_seconds() -> None:
    error = AgentError(ErrorCode.RATE_LIMITED, "Slow down.", retry_after=29.2)
    data = error.to_wire()["data"]
    assert data["code"] == "rate_limited"
    assert data["retryAfterSeconds"] == 30
    assert data["retryAfter"].endswith("Z") and "T" in data["retryAfter"]


def test_protocol_errors_survive_pickling_with_their_data() -> None:
    limited = AgentError(ErrorCode.RATE_LIMITED, "Slow down.", retry_after=30)
    again = pickle.loads(pickle.dumps(limited))
    assert type(again) is AgentError
    assert again.to_wire() == limited.to_wire()
    assert again.retry_after == 30
    missing = ProtocolError(ErrorCode.SESSION_NOT_FOUND, "Session 'x' not found.", session="x")
    assert pickle.loads(pickle.dumps(missing)).to_wire() == missing.to_wire()


@pytest.mark.parametrize(("seconds", "text"), [
    (0.499936, "0.5 s"), (0.05, "0.05 s"), (1.0, "1 s"), (2.4999, "2.5 s"), (9.96, "10 s"), (20, "20 s"), (119.7, "120 s"),
])
def test_durations_in_messages_have_two_significant_digits(seconds: float, text: str) -> None:
    assert seconds_text(seconds) == text
