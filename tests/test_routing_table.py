"""The route file and the router's pure policy: what a table says, every error naming its place
in the file, spill shares, cooldowns, and spend caps held by reservations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oam_actors.models.routing import (
    Caps,
    Cooldowns,
    Price,
    RouteError,
    SpendLedger,
    load_routes,
    parse_routes,
    spill_seconds,
)

EXAMPLE = """\
spill = 0.25

[backends.phones]
model = "farm:8"

[backends.cloud]
model = "openai:http://127.0.0.1:9/v1#small"
rpm = 600
cooldown = 15
price = {request = 0.001, input_per_1k = 0.15, output_per_1k = 0.6}
cap = {hour = 1.0, day = 10.0}

[routes]
dialogue = ["phones", "cloud"]
background = ["phones"]

[routes.decision]
default = ["phones", "cloud"]
summary = ["cloud"]

[tenants.alice]
owners = ["openai:alice", "npc:alice-"]
cap = {day = 5.0}
"""


def doc(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "backends": {"phones": {"model": "farm:8"}, "cloud": {"model": "openai#m", "price": {"request": 0.01}}},
        "routes": {"default": ["phones", "cloud"]},
    }
    base.update(changes)
    return base


def error(data: Any) -> str:
    with pytest.raises(RouteError) as caught:
        parse_routes(data, "routes.toml")
    return str(caught.value)


def test_a_toml_route_file_names_backends_rows_by_priority_and_kind_and_tenants(tmp_path: Path) -> None:
    path = tmp_path / "routes.toml"
    path.write_text(EXAMPLE)
    table = load_routes(path)
    assert table.spill == 0.25 and table.source == str(path)
    assert table.row("dialogue", "respond") == ("phones", "cloud")
    assert table.row("background", "text") == ("phones",)
    assert table.row("decision", "summary") == ("cloud",)
    assert table.row("decision", "decide") == ("phones", "cloud")
    assert table.row("someday", "respond") == ("phones", "cloud")  # unknown priorities count as dialogue
    cloud = table.backends["cloud"]
    assert (cloud.rpm, cloud.cooldown, cloud.cap) == (600, 15.0, Caps(hour=1.0, day=10.0))
    assert cloud.price == Price(request=0.001, input_per_1k=0.15, output_per_1k=0.6)
    assert table.backends["phones"].price.free
    assert table.tenant_of("openai:alice:bob").name == "alice"  # type: ignore[union-attr]
    assert table.tenant_of("job42/npc:alice-gorm").name == "alice"  # type: ignore[union-attr]
    assert table.tenant_of("npc:gorm") is None


def test_a_json_route_file_has_the_same_structure(tmp_path: Path) -> None:
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(doc()))
    table = load_routes(path)
    assert [table.row(p, "respond") for p in ("dialogue", "decision", "background")] == [("phones", "cloud")] * 3


@pytest.mark.parametrize(("data", "message"), [
    (doc(routes={"dialogue": ["phones", "cloud2"], "default": ["phones"]}),
     "routes.toml: routes.dialogue[1]: unknown backend 'cloud2'"),
    (doc(routes={"dialogue": [], "default": ["phones"]}),
     "routes.toml: routes.dialogue: an empty tier: name at least one backend"),
    (doc(backends={"cloud": {"model": "openai#m", "price": {"input_per_1k": -1}}}),
     "routes.toml: backends.cloud.price.input_per_1k: expected a number of at least 0, got -1"),
    (doc(routes={"dialogue": ["phones"]}),
     "routes.toml: routes.decision: no row: name its backends, or give routes.default"),
    (doc(routes={"decision": {"summary": ["phones"]}, "default": ["phones"]}),
     "routes.toml: routes.decision.default: a table of rows by step kind needs a default row"),
    (doc(routes={"decision": {"default": ["phones"], "gossip": ["phones"]}, "default": ["phones"]}),
     "routes.toml: routes.decision.gossip: unknown key (expected one of decide, default, respond, structured, "
     "summary, text, toolArguments)"),
    (doc(backends={"cloud": {"model": "openai#m", "cap": {"week": 3}}}),
     "routes.toml: backends.cloud.cap.week: unknown key (expected one of day, hour)"),
    (doc(backends={"cloud": {"price": {"request": 1}}}),
     "routes.toml: backends.cloud: give a model or devices (one of them)"),
    (doc(backends={"cloud": {"model": "openai#m", "rpm": 0}}),
     "routes.toml: backends.cloud.rpm: expected an integer of at least 1, got 0"),
    (doc(routes={"default": ["phones", "phones"]}, backends={"phones": {"model": "farm:2"}}),
     "routes.toml: routes.default[1]: backend 'phones' is named twice"),
    (doc(spill=1.5), "routes.toml: spill: expected a share greater than 0 and at most 1, got 1.5"),
    (doc(backends={}), "routes.toml: backends: no backend is named"),
    ({"routes": {"default": ["x"]}}, "routes.toml: backends: missing: backends is required"),
    (doc(tenants={"alice": {"owners": []}}), "routes.toml: tenants.alice.owners: expected a non-empty list of owner prefixes"),
    (doc(extra=1), "routes.toml: extra: unknown key (expected one of backends, routes, spill, tenants)"),
])
def test_every_mistake_in_a_route_file_is_one_line_naming_its_place(data: Any, message: str) -> None:
    assert error(data) == message


def test_a_file_that_does_not_parse_or_cannot_be_read_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "routes.toml"
    bad.write_text("[backends.phones\nmodel = 1\n")
    with pytest.raises(RouteError) as caught:
        load_routes(bad)
    assert str(caught.value).startswith(f"{bad}: not valid TOML: ") and "line 1" in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(RouteError) as missing:
        load_routes(tmp_path / "none.json")
    assert str(missing.value) == f"{tmp_path / 'none.json'}: No such file or directory"


def test_a_tier_that_is_not_the_last_may_use_its_share_of_the_time_left() -> None:
    assert spill_seconds(20.0, 0.25, last=False) == 5.0
    assert spill_seconds(20.0, 0.25, last=True) == 20.0
    assert spill_seconds(-1.0, 0.5, last=True) == 0.0


def test_a_failed_backend_cools_down_for_its_seconds() -> None:
    cooldowns = Cooldowns()
    cooldowns.cool("cloud", 100.0, 30.0)
    assert cooldowns.cooling("cloud", 129.0) and cooldowns.left("cloud", 120.0) == 10.0
    assert not cooldowns.cooling("cloud", 130.0) and not cooldowns.cooling("phones", 100.0)


def test_reservations_of_steps_in_flight_keep_a_cap_from_being_overshot() -> None:
    ledger = SpendLedger({"backend:cloud": [(3600.0, 1.0)], "tenant:alice": [(86400.0, 0.5)]})
    first = ledger.reserve(["backend:cloud"], 0.4, 0.0)
    second = ledger.reserve(["backend:cloud"], 0.4, 0.0)
    assert first is not None and second is not None
    assert ledger.reserve(["backend:cloud"], 0.4, 0.0) is None  # 1.2 > 1.0 counting holds in flight
    ledger.settle(first, 0.1, 1.0)  # it cost less than its worst case: room comes back
    assert ledger.spent("backend:cloud", 1.0) == 0.1 and ledger.reserved("backend:cloud") == 0.4
    third = ledger.reserve(["backend:cloud", "tenant:alice"], 0.4, 1.0)
    assert third is not None
    assert ledger.reserve(["backend:cloud", "tenant:alice"], 0.2, 1.0) is None  # the tenant's cap: 0.4 + 0.2 > 0.5
    assert ledger.reserve(["backend:other"], 100.0, 1.0) is not None  # no cap on that key


def test_spend_leaves_the_hour_window_but_stays_in_the_day() -> None:
    ledger = SpendLedger({"backend:cloud": [(3600.0, 1.0), (86400.0, 1.5)]})
    ledger.settle(ledger.reserve(["backend:cloud"], 1.0, 0.0) or 0, 1.0, 0.0)
    assert ledger.reserve(["backend:cloud"], 0.1, 3599.0) is None  # the hour still holds it
    hold = ledger.reserve(["backend:cloud"], 0.5, 3601.0)
    assert hold is not None  # the hour is free again; the day has 0.5 left
    ledger.settle(hold, 0, 3601.0)  # nothing spent
    assert ledger.reserve(["backend:cloud"], 0.6, 3601.0) is None
    assert ledger.spent("backend:cloud", 3601.0, 3600.0) == 0.0 and ledger.spent("backend:cloud", 3601.0) == 1.0
