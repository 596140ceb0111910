"""The route table: named backends, and for each priority (and step kind) the backends to try in
order. Pure: :func:`parse_routes` turns a decoded TOML or JSON document into a :class:`RouteTable`
or raises :class:`RouteError` naming the place in the file (``routes.dialogue[1]``);
:func:`load_routes` reads the file first (TOML by its ``.toml`` suffix, JSON otherwise).

The document::

    spill = 0.5                      # share of a step's queue time left that a tier may use
    [backends.phones]
    model = "farm:8"                 # or devices = ["http://…"], "scripted", PROVIDER[:URL][#MODEL]
    [backends.cloud]
    model = "openai:http://127.0.0.1:8080/v1#small"
    rpm = 600
    cooldown = 30                    # seconds a failing backend is skipped
    reserve_output_tokens = 1024     # a priced step's output bound when the request states none
    price = {request = 0.0, input_per_1k = 0.15, output_per_1k = 0.6}
    cap = {hour = 1.0, day = 10.0}
    [routes]
    dialogue = ["phones", "cloud"]
    background = ["phones"]
    [routes.decision]                # a table: a row per step kind, ``default`` for the rest
    default = ["phones", "cloud"]
    summary = ["phones"]
    [tenants.alice]
    owners = ["openai:alice"]        # owner prefixes (default: the tenant's name)
    cap = {day = 5.0}
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from ...agent.model import StepKind

__all__ = [
    "PRIORITIES",
    "WINDOWS",
    "BackendRoute",
    "Caps",
    "Price",
    "RouteError",
    "RouteTable",
    "TenantRoute",
    "describe_routes",
    "load_routes",
    "parse_routes",
]

PRIORITIES = ("dialogue", "decision", "background")
WINDOWS = {"hour": 3600.0, "day": 86400.0}
"""The spend windows a cap may name, in seconds: a cap holds over every such stretch of time
ending now (a sliding window)."""

_DEFAULT_COOLDOWN = 30.0
_DEFAULT_SPILL = 0.5
_BACKEND_KEYS = {"model", "devices", "base_url", "model_name", "api_key_env", "native_tools", "structured_output",
                 "context_size", "rpm", "tpm", "max_concurrency", "cooldown", "price", "cap",
                 "reserve_output_tokens"}


class RouteError(ValueError):
    """A route file that cannot be used: ``str()`` is one line, ``SOURCE: PLACE: problem``."""

    def __init__(self, source: str, place: str, problem: str) -> None:
        self.source, self.place, self.problem = source, place, problem
        super().__init__(f"{source}: {place}: {problem}" if place else f"{source}: {problem}")


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """What one step costs on a backend: per request, and per 1,000 input and output tokens."""

    request: float = 0.0
    input_per_1k: float = 0.0
    output_per_1k: float = 0.0

    @property
    def free(self) -> bool:
        return self.request == 0 and self.input_per_1k == 0 and self.output_per_1k == 0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return self.request + input_tokens * self.input_per_1k / 1000 + output_tokens * self.output_per_1k / 1000


class Caps(msgspec.Struct, frozen=True, kw_only=True):
    """Spend caps over the :data:`WINDOWS` (``None``: no cap for that window)."""

    hour: float | None = None
    day: float | None = None

    def items(self) -> list[tuple[float, float]]:
        """``(window seconds, cap)`` for each cap set."""
        return [(WINDOWS[name], cap) for name in WINDOWS if (cap := getattr(self, name)) is not None]


class BackendRoute(msgspec.Struct, frozen=True, kw_only=True):
    """One backend of the table: what ``--model`` (or ``--device``) would say, its own proxy
    limits, how long it is skipped after a failure, its price and its caps.
    ``reserve_output_tokens`` bounds a priced step's output when its request states no
    ``max_output_tokens``: the step is sent with that limit, so its reservation covers it."""

    name: str
    model: str | None = None
    devices: tuple[str, ...] = ()
    cooldown: float = _DEFAULT_COOLDOWN
    price: Price = Price()
    cap: Caps = Caps()
    reserve_output_tokens: int = 1024
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    base_url: str | None = None
    model_name: str | None = None
    api_key_env: str | None = None
    context_size: int | None = None
    native_tools: bool = False
    structured_output: bool = False


class TenantRoute(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant: the owners whose name starts with one of ``owners``, and its spend caps."""

    name: str
    owners: tuple[str, ...]
    cap: Caps = Caps()


class RouteTable(msgspec.Struct, frozen=True, kw_only=True):
    """Backends by name and rows by ``priority`` or ``priority.kind``; ``source`` names the file."""

    backends: dict[str, BackendRoute]
    rows: dict[str, tuple[str, ...]]
    tenants: tuple[TenantRoute, ...] = ()
    spill: float = _DEFAULT_SPILL
    source: str = "routes"

    @classmethod
    def single(cls, name: str, backend: BackendRoute) -> RouteTable:
        """The degenerate table: every step to one backend."""
        return cls(backends={name: backend}, rows={p: (name,) for p in PRIORITIES})

    def row(self, priority: str, kind: str) -> tuple[str, ...]:
        """The backends a step of ``priority`` and ``kind`` tries, in order (an unknown priority
        counts as dialogue, as the scheduler counts it)."""
        if priority not in PRIORITIES:
            priority = "dialogue"
        return self.rows.get(f"{priority}.{kind}") or self.rows[priority]

    def tenant_of(self, owner: str | None) -> TenantRoute | None:
        """The first tenant one of whose owner prefixes ``owner`` starts with."""
        name = owner or ""
        # On Ray an owner arrives as JOB/OWNER (owners are named per front door): either may match.
        names = (name, name.split("/", 1)[1]) if "/" in name else (name,)
        for tenant in self.tenants:
            if any(n.startswith(prefix) for n in names for prefix in tenant.owners):
                return tenant
        return None


def load_routes(path: str | Path) -> RouteTable:
    """The route table in the file at ``path``. Raises :class:`RouteError`."""
    source = str(path)
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise RouteError(source, "", exc.strerror or str(exc)) from exc
    try:
        data = tomllib.loads(text.decode()) if source.endswith(".toml") else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RouteError(source, "", f"not valid {'TOML' if source.endswith('.toml') else 'JSON'}: {exc}") from exc
    return parse_routes(data, source)


def parse_routes(data: Any, source: str = "routes") -> RouteTable:
    """The route table of a decoded document. Raises :class:`RouteError` at the first problem."""
    doc = _table(source, "", data)
    _only(source, "", doc, {"spill", "backends", "routes", "tenants"})
    spill = _number(source, "spill", doc.get("spill", _DEFAULT_SPILL))
    if not 0 < spill <= 1:
        raise RouteError(source, "spill", f"expected a share greater than 0 and at most 1, got {spill!r}")
    backends = {name: _backend(source, name, raw)
                for name, raw in _table(source, "backends", doc.get("backends")).items()}
    if not backends:
        raise RouteError(source, "backends", "no backend is named")
    rows = _rows(source, _table(source, "routes", doc.get("routes")), backends)
    tenants = tuple(_tenant(source, name, raw) for name, raw in _table(source, "tenants", doc.get("tenants", {})).items())
    return RouteTable(backends=backends, rows=rows, tenants=tenants, spill=spill, source=source)


def describe_routes(table: RouteTable) -> list[str]:
    """The table in a few lines (what ``--check-routes`` prints): its rows, then each backend's
    price, caps and cooldown, then the tenants."""
    lines = [f"{table.source}: {len(table.backends)} backends, spill {table.spill:g}"]
    lines += [f"  {key}: {' -> '.join(row)}" for key, row in table.rows.items()]
    for name, backend in table.backends.items():
        what = backend.model or "devices " + ",".join(backend.devices)
        price = backend.price
        cost = "free" if price.free else (f"{price.request:g}/request, {price.input_per_1k:g}/1k in, "
                                          f"{price.output_per_1k:g}/1k out")
        lines.append(f"  backend {name}: {what}; {cost}; {_caps_text(backend.cap)}; cooldown {backend.cooldown:g} s")
    lines += [f"  tenant {t.name}: owners {', '.join(t.owners)}; {_caps_text(t.cap)}" for t in table.tenants]
    return lines


def _caps_text(caps: Caps) -> str:
    named = [f"{cap:g}/{name}" for name in WINDOWS if (cap := getattr(caps, name)) is not None]
    return "cap " + ", ".join(named) if named else "no cap"


def _rows(source: str, routes: dict[str, Any], backends: dict[str, BackendRoute]) -> dict[str, tuple[str, ...]]:
    _only(source, "routes", routes, {*PRIORITIES, "default"})
    rows: dict[str, tuple[str, ...]] = {}
    default = routes.get("default")
    for priority in PRIORITIES:
        raw = routes.get(priority, default)
        place = f"routes.{priority}" if priority in routes else "routes.default"
        if raw is None:
            raise RouteError(source, f"routes.{priority}", "no row: name its backends, or give routes.default")
        if isinstance(raw, dict):
            kinds = {k.value for k in StepKind}
            _only(source, place, raw, {*kinds, "default"})
            if "default" not in raw:
                raise RouteError(source, f"{place}.default", "a table of rows by step kind needs a default row")
            for kind, row in raw.items():
                key = priority if kind == "default" else f"{priority}.{kind}"
                rows[key] = _row(source, f"{place}.{kind}", row, backends)
        else:
            rows[priority] = _row(source, place, raw, backends)
    return rows


def _row(source: str, place: str, raw: Any, backends: dict[str, BackendRoute]) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise RouteError(source, place, f"expected a list of backend names, got {_kind(raw)}")
    if not raw:
        raise RouteError(source, place, "an empty tier: name at least one backend")
    for index, name in enumerate(raw):
        if not isinstance(name, str):
            raise RouteError(source, f"{place}[{index}]", f"expected a backend name, got {_kind(name)}")
        if name not in backends:
            raise RouteError(source, f"{place}[{index}]", f"unknown backend {name!r}")
        if name in raw[:index]:
            raise RouteError(source, f"{place}[{index}]", f"backend {name!r} is named twice")
    return tuple(raw)


def _backend(source: str, name: str, raw: Any) -> BackendRoute:
    place = f"backends.{name}"
    spec = _table(source, place, raw)
    _only(source, place, spec, _BACKEND_KEYS)
    if ("model" in spec) == ("devices" in spec):
        raise RouteError(source, place, "give a model or devices (one of them)")
    fields: dict[str, Any] = {}
    for key in ("model", "base_url", "model_name", "api_key_env"):
        if key in spec:
            fields[key] = _string(source, f"{place}.{key}", spec[key])
    if "devices" in spec:
        urls = spec["devices"]
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise RouteError(source, f"{place}.devices", "expected a non-empty list of device URLs")
        fields["devices"] = tuple(urls)
    for key in ("native_tools", "structured_output"):
        if key in spec:
            if not isinstance(spec[key], bool):
                raise RouteError(source, f"{place}.{key}", f"expected true or false, got {_kind(spec[key])}")
            fields[key] = spec[key]
    for key in ("context_size", "rpm", "tpm", "max_concurrency", "reserve_output_tokens"):
        if key in spec:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RouteError(source, f"{place}.{key}", f"expected an integer of at least 1, got {value!r}")
            fields[key] = value
    if "cooldown" in spec:
        fields["cooldown"] = _non_negative(source, f"{place}.cooldown", spec["cooldown"])
    if "price" in spec:
        fields["price"] = _price(source, f"{place}.price", spec["price"])
    if "cap" in spec:
        fields["cap"] = _caps(source, f"{place}.cap", spec["cap"])
    return BackendRoute(name=name, **fields)


def _tenant(source: str, name: str, raw: Any) -> TenantRoute:
    place = f"tenants.{name}"
    spec = _table(source, place, raw)
    _only(source, place, spec, {"owners", "cap"})
    owners = spec.get("owners", [name])
    if not isinstance(owners, list) or not owners or not all(isinstance(o, str) and o for o in owners):
        raise RouteError(source, f"{place}.owners", "expected a non-empty list of owner prefixes")
    return TenantRoute(name=name, owners=tuple(owners), cap=_caps(source, f"{place}.cap", spec.get("cap", {})))


def _price(source: str, place: str, raw: Any) -> Price:
    spec = _table(source, place, raw)
    _only(source, place, spec, {"request", "input_per_1k", "output_per_1k"})
    return Price(**{key: _non_negative(source, f"{place}.{key}", value) for key, value in spec.items()})


def _caps(source: str, place: str, raw: Any) -> Caps:
    spec = _table(source, place, raw)
    _only(source, place, spec, set(WINDOWS))
    return Caps(**{key: _non_negative(source, f"{place}.{key}", value) for key, value in spec.items()})


def _table(source: str, place: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        what = "the document" if not place else place
        raise RouteError(source, place, f"expected a table, got {_kind(raw)}" if raw is not None
                         else f"missing: {what} is required")
    return raw


def _only(source: str, place: str, table: dict[str, Any], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            where = f"{place}.{key}" if place else key
            raise RouteError(source, where, f"unknown key (expected one of {', '.join(sorted(allowed))})")


def _number(source: str, place: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RouteError(source, place, f"expected a number, got {_kind(value)}")
    return float(value)


def _non_negative(source: str, place: str, value: Any) -> float:
    number = _number(source, place, value)
    if number < 0:
        raise RouteError(source, place, f"expected a number of at least 0, got {value!r}")
    return number


def _string(source: str, place: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise RouteError(source, place, f"expected a non-empty string, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return {"list": "a list", "dict": "a table"}.get(type(value).__name__, type(value).__name__)
