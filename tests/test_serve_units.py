"""The pure parts of network serving: metrics rendering, tokens and tenants, the TCP auth line,
listen addresses."""

from __future__ import annotations

import json

import pytest

from oam_actors.cli.argtypes import Endpoint
from oam_actors.cli.serve import exposure_error
from oam_actors.observability.metrics import MetricsRegistry, ServerMetrics
from oam_actors.transports.auth import (
    ANONYMOUS,
    Tenant,
    TokenTable,
    bearer_token,
    check_auth_line,
    is_loopback,
)
from oam_actors.transports.stdio import LineTooLong

# --- metrics --------------------------------------------------------------------------------------


def test_counter_and_gauge_render_in_first_use_order() -> None:
    registry = MetricsRegistry()
    requests = registry.counter("req_total", "Requests.", ["method"])
    open_now = registry.gauge("open", "Open things.")
    requests.inc(method="ping")
    requests.inc(2, method="session/create")
    requests.inc(method="ping")
    open_now.set(3)
    open_now.dec()
    assert registry.render() == (
        "# HELP req_total Requests.\n"
        "# TYPE req_total counter\n"
        'req_total{method="ping"} 2\n'
        'req_total{method="session/create"} 2\n'
        "# HELP open Open things.\n"
        "# TYPE open gauge\n"
        "open 2\n"
    )


def test_histogram_buckets_are_cumulative_with_sum_and_count() -> None:
    registry = MetricsRegistry()
    latency = registry.histogram("step_seconds", "Steps.", ["kind"], buckets=[0.1, 1])
    for value in (0.05, 0.5, 0.5, 3):
        latency.observe(value, kind="decide")
    assert registry.render().splitlines()[2:] == [
        'step_seconds_bucket{kind="decide",le="0.1"} 1',
        'step_seconds_bucket{kind="decide",le="1"} 3',
        'step_seconds_bucket{kind="decide",le="+Inf"} 4',
        'step_seconds_sum{kind="decide"} 4.05',
        'step_seconds_count{kind="decide"} 4',
    ]
    assert latency.count(kind="decide") == 4


def test_label_values_and_help_are_escaped() -> None:
    registry = MetricsRegistry()
    registry.counter("c_total", "A \\ and a\nnewline.", ["v"]).inc(v='say "hi"\\\n')
    assert registry.render().splitlines() == [
        "# HELP c_total A \\\\ and a\\nnewline.",
        "# TYPE c_total counter",
        'c_total{v="say \\"hi\\"\\\\\\n"} 1',
    ]


def test_wrong_labels_duplicate_names_and_negative_counts_are_refused() -> None:
    registry = MetricsRegistry()
    counter = registry.counter("c_total", "C.", ["method"])
    with pytest.raises(ValueError, match=r"takes labels \['method'\]; got \['code'\]"):
        counter.inc(code="ok")
    with pytest.raises(ValueError, match="already registered"):
        registry.gauge("c_total", "again")
    with pytest.raises(ValueError, match="cannot go down"):
        counter.inc(-1, method="ping")
    with pytest.raises(ValueError, match="reserved"):
        registry.histogram("h", "H.", ["le"])


def test_server_metrics_count_turns_only_for_session_respond() -> None:
    metrics = ServerMetrics()
    metrics.completed("session/respond", "ok")
    metrics.completed("session/respond", "cancelled")
    metrics.completed("session/reset", "ok")
    assert metrics.turns.value(outcome="ok") == 1
    assert metrics.turns.value(outcome="cancelled") == 1
    metrics.connection_opened("tcp")
    metrics.connection_opened("tcp")
    metrics.connection_closed("tcp")
    assert metrics.connections.value(transport="tcp") == 1
    assert metrics.connections_opened.value(transport="tcp") == 2


# --- tokens and tenants ---------------------------------------------------------------------------


def test_tokens_name_tenants_or_the_anonymous_one() -> None:
    tokens = TokenTable.parse(["alice=s3cret", "b64=c2VjcmV0==", "plain"])
    assert tokens.tenant("s3cret") == Tenant("alice")
    assert tokens.tenant("c2VjcmV0==") == Tenant("b64")
    assert tokens.tenant("plain") is ANONYMOUS
    assert tokens.tenant("alice=s3cret") is None
    assert tokens.tenant("") is None
    assert tokens.tenant(None) is None
    assert not TokenTable.parse([])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([""], "must not be empty"),
        (["a=x", "b=x"], "given twice"),
        (["alice="], "secret of 'alice' is empty"),
        (["=s3cret"], "NAME in NAME=SECRET must be 1-64"),
        (["not a name=x"], "NAME in NAME=SECRET must be 1-64"),
        (["b64secret=="], r"starts with '='.*needs a NAME"),
        (["alice=s3 cret"], "white space"),
    ],
)
def test_bad_token_lists_are_refused(values: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        TokenTable.parse(values)
    assert "s3cret" not in str(refused.value)  # secrets are not echoed


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None), ("Bearer ", None), (None, None)],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("", False), ("::", False), ("192.168.1.4", False), ("example.com", False)],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# --- the TCP auth line ----------------------------------------------------------------------------

TOKENS = TokenTable.parse(["alice=s3cret"])


def auth_line(params: object, id: object = 1) -> bytes:
    message: dict = {"jsonrpc": "2.0", "method": "auth", "params": params}
    if id is not None:
        message["id"] = id
    return json.dumps(message).encode()


def reply(outcome_reply: bytes | None) -> dict | None:
    return None if outcome_reply is None else json.loads(outcome_reply)


def test_auth_request_is_answered_with_the_tenant() -> None:
    outcome = check_auth_line(auth_line({"token": "s3cret"}), TOKENS)
    assert outcome.tenant == Tenant("alice")
    assert reply(outcome.reply) == {"jsonrpc": "2.0", "id": 1, "result": {"tenant": "alice"}}


def test_auth_notification_is_not_answered() -> None:
    outcome = check_auth_line(auth_line({"token": "s3cret"}, id=None), TOKENS)
    assert (outcome.tenant, outcome.reply, outcome.waiting) == (Tenant("alice"), None, False)


def test_blank_line_waits_for_the_next() -> None:
    assert check_auth_line(b"  ", TOKENS).waiting


@pytest.mark.parametrize(
    ("line", "id", "reason"),
    [
        (auth_line({"token": "nope"}), 1, "failed"),
        (auth_line({"token": 7}, id="a"), "a", "failed"),
        (auth_line(None), 1, "failed"),
        (b'{"jsonrpc":"2.0","id":5,"method":"ping"}', 5, "required"),
        (b'{"jsonrpc":"2.0","method":"ping"}', None, "required"),
        (b'{"jsonrpc":"2.0","id":"t-1","result":{}}', None, "required"),
    ],
)
def test_anything_but_a_good_auth_is_refused(line: bytes, id: object, reason: str) -> None:
    outcome = check_auth_line(line, TOKENS)
    assert outcome.tenant is None and not outcome.waiting
    answer = reply(outcome.reply)
    assert answer is not None
    assert (answer["id"], answer["error"]["code"], answer["error"]["data"]) == (id, -32600, {"code": "invalid_message", "auth": reason})


def test_unparsable_and_oversize_first_lines_are_refused() -> None:
    assert reply(check_auth_line(b"{nope", TOKENS).reply)["error"]["code"] == -32700  # type: ignore[index]
    oversize = check_auth_line(LineTooLong(size=10, limit=5), TOKENS)
    assert oversize.tenant is None
    assert reply(oversize.reply)["error"]["message"] == "Invalid message: the line exceeds 5 bytes."  # type: ignore[index]


# --- listen addresses -----------------------------------------------------------------------------


def test_exposure_needs_a_token_beyond_loopback() -> None:
    open_to_all = [Endpoint("127.0.0.1", 1), Endpoint("", 2)]
    assert exposure_error(open_to_all, TokenTable()) == (
        "listening on :2 (not loopback) requires a bearer token: add --token NAME=SECRET (or --token SECRET), "
        "or listen on 127.0.0.1"
    )
    assert exposure_error(open_to_all, TOKENS) is None
    assert exposure_error([Endpoint("::1", 1)], TokenTable()) is None
