"""Counters, gauges and histograms with labels, rendered in the Prometheus text format.

Contract
--------
Pure bookkeeping: no I/O, no clock, no dependency. Instruments are created through a
:class:`MetricsRegistry` (one name, one instrument); every sample carries exactly the label names
its instrument declared, as keyword arguments (``requests.inc(method="ping")``); a wrong label set
raises ``ValueError``. :meth:`MetricsRegistry.render` writes the text exposition format 0.0.4
(``# HELP``/``# TYPE`` lines, label values escaped, histogram buckets cumulative with ``+Inf``,
``_sum`` and ``_count``), instruments in creation order and label sets in first-use order.

:class:`ServerMetrics` is the set the network server keeps; the bridge calls its ``request`` /
``response`` / ``completed`` hooks when one is given (see ``Bridge(metrics=...)``), the transports
count connections, and the server sets the gauges just before each scrape; :class:`ModelMetrics`
copies the system model's ``model/status`` numbers then (the console reads the same result).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "Counter",
    "Gauge",
    "Histogram",
    "MetricsRegistry",
    "ModelMetrics",
    "ServerMetrics",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The ``Content-Type`` of :meth:`MetricsRegistry.render`'s output."""

DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Upper bounds in seconds: from a scripted step (milliseconds) to a slow remote model."""

LabelValues = tuple[str, ...]


class _Instrument:
    kind = ""

    def __init__(self, name: str, help: str, labels: Sequence[str]) -> None:
        self.name = name
        self.help = help
        self.labels = tuple(labels)

    def _key(self, values: dict[str, str]) -> LabelValues:
        if set(values) != set(self.labels):
            raise ValueError(f"{self.name} takes labels {list(self.labels)}; got {sorted(values)}")
        return tuple(str(values[name]) for name in self.labels)

    def _labelled(self, suffix: str, key: LabelValues, extra: tuple[tuple[str, str], ...] = ()) -> str:
        pairs = [*zip(self.labels, key), *extra]
        if not pairs:
            return self.name + suffix
        inner = ",".join(f'{name}="{_escape_label(value)}"' for name, value in pairs)
        return f"{self.name}{suffix}{{{inner}}}"

    def samples(self) -> Iterator[str]:
        raise NotImplementedError


class _Valued(_Instrument):
    """An instrument holding one number per label set."""

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help, labels)
        self._values: dict[LabelValues, float] = {}

    def value(self, **labels: str) -> float:
        return self._values.get(self._key(labels), 0)

    def by_label(self) -> dict[str, float]:
        """Every label set's value, keyed by its label values joined with ``","`` (one label: its value)."""
        return {",".join(key): value for key, value in self._values.items()}

    def samples(self) -> Iterator[str]:
        for key, value in self._values.items():
            yield f"{self._labelled('', key)} {_number(value)}"


class Counter(_Valued):
    """A value that only goes up (``*_total`` by convention)."""

    kind = "counter"

    def inc(self, amount: float = 1, **labels: str) -> None:
        if amount < 0:
            raise ValueError("a counter cannot go down")
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0) + amount

    def set_total(self, value: float, **labels: str) -> None:
        """Copy a count kept elsewhere (a device pool's), as of now. It is lower only when its
        keeper restarted, which Prometheus reads as a counter reset."""
        self._values[self._key(labels)] = value


class Gauge(_Valued):
    """A value that is set (or moved up and down) to what it is now."""

    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        self._values[self._key(labels)] = value

    def inc(self, amount: float = 1, **labels: str) -> None:
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0) + amount

    def dec(self, amount: float = 1, **labels: str) -> None:
        self.inc(-amount, **labels)


class Histogram(_Instrument):
    """Observations counted into cumulative buckets, plus their sum and count."""

    kind = "histogram"

    def __init__(
        self, name: str, help: str, labels: Sequence[str] = (), *, buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> None:
        super().__init__(name, help, labels)
        if "le" in self.labels:
            raise ValueError("'le' is reserved for histogram buckets")
        bounds = sorted(float(b) for b in buckets if not math.isinf(b))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError("a histogram needs distinct finite bucket bounds")
        self.buckets = tuple(bounds)
        self._series: dict[LabelValues, _Series] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(len(self.buckets))
        series.add(self.buckets, value)

    def count(self, **labels: str) -> int:
        series = self._series.get(self._key(labels))
        return series.count if series is not None else 0

    def samples(self) -> Iterator[str]:
        for key, series in self._series.items():
            cumulative = 0
            for bound, hits in zip(self.buckets, series.hits):
                cumulative += hits
                yield f"{self._labelled('_bucket', key, (('le', _number(bound)),))} {cumulative}"
            yield f"{self._labelled('_bucket', key, (('le', '+Inf'),))} {series.count}"
            yield f"{self._labelled('_sum', key)} {_number(series.total)}"
            yield f"{self._labelled('_count', key)} {series.count}"


class _Series:
    """One label set of a histogram: hits per bucket (not cumulative), sum and count."""

    __slots__ = ("count", "hits", "total")

    def __init__(self, size: int) -> None:
        self.hits = [0] * size
        self.total = 0.0
        self.count = 0

    def add(self, bounds: tuple[float, ...], value: float) -> None:
        self.count += 1
        self.total += value
        for index, bound in enumerate(bounds):
            if value <= bound:
                self.hits[index] += 1
                return


_I = TypeVar("_I", bound=_Instrument)


class MetricsRegistry:
    """Owns instruments by name and renders them all."""

    def __init__(self) -> None:
        self._instruments: dict[str, _Instrument] = {}

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, help, labels))

    def gauge(self, name: str, help: str, labels: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(name, help, labels))

    def histogram(
        self, name: str, help: str, labels: Sequence[str] = (), *, buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> Histogram:
        return self._add(Histogram(name, help, labels, buckets=buckets))

    def describe(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Each instrument's kind and label names, by name (for dashboards and their tests)."""
        return {name: (i.kind, i.labels) for name, i in self._instruments.items()}

    def render(self) -> str:
        """The Prometheus text exposition of every instrument (ends with a newline)."""
        lines: list[str] = []
        for instrument in self._instruments.values():
            lines.append(f"# HELP {instrument.name} {_escape_help(instrument.help)}")
            lines.append(f"# TYPE {instrument.name} {instrument.kind}")
            lines.extend(instrument.samples())
        return "\n".join(lines) + "\n"

    def _add(self, instrument: _I) -> _I:
        if instrument.name in self._instruments:
            raise ValueError(f"metric {instrument.name!r} is already registered")
        self._instruments[instrument.name] = instrument
        return instrument


class ServerMetrics:
    """The network server's metrics. ``code`` values are ``"ok"`` or an error's ``data.code``."""

    def __init__(self) -> None:
        self.registry = registry = MetricsRegistry()
        self.requests = registry.counter("oam_requests_total", "Requests and notifications received, by method.", ["method"])
        self.responses = registry.counter("oam_responses_total", "Responses written, by outcome (ok or error data.code).", ["code"])
        self.turns = registry.counter("oam_turns_total", "session/respond turns finished, by outcome (ok or error data.code).", ["outcome"])
        self.connections = registry.gauge("oam_connections", "Open connections, by transport.", ["transport"])
        self.tenant_connections = registry.gauge(
            "oam_tenant_connections", "Open protocol connections, by tenant ((anonymous) without a name).", ["tenant"]
        )
        self.connections_opened = registry.counter("oam_connections_total", "Connections accepted, by transport.", ["transport"])
        self.connections_refused = registry.counter(
            "oam_connections_refused_total", "Connections refused, by transport and reason.", ["transport", "reason"]
        )
        self.sessions = registry.gauge("oam_sessions", "Live sessions, all connections together.")
        self.queue_depth = registry.gauge("oam_queue_depth", "Operations queued on object mailboxes, by object kind.", ["kind"])
        self.model_step_seconds = registry.histogram(
            "oam_model_step_seconds", "Duration of one model inference attempt, by step kind.", ["kind"]
        )
        self.model = ModelMetrics(registry)

        self._routing: _RoutingMetrics | None = None

    def observe_routing(self, stats: Any) -> None:
        """Bring the routing metrics (``oam_route_*``) up to a routed system model's counters
        (a :class:`~oam_actors.models.routing.RouterStatistics`; this module imports nothing)."""
        if self._routing is None:
            self._routing = _RoutingMetrics(self.registry)
        self._routing.observe(stats)

    # --- bridge hooks --------------------------------------------------------------------------

    def request(self, method: str) -> None:
        self.requests.inc(method=method)

    def response(self, code: str) -> None:
        self.responses.inc(code=code)

    def completed(self, method: str, code: str) -> None:
        """Deferred work of ``method`` finished with ``code``."""
        if method == "session/respond":
            self.turns.inc(outcome=code)

    # --- transports and the server -------------------------------------------------------------

    def connection_opened(self, transport: str) -> None:
        self.connections_opened.inc(transport=transport)
        self.connections.inc(transport=transport)

    def connection_closed(self, transport: str) -> None:
        self.connections.dec(transport=transport)

    def connection_refused(self, transport: str, reason: str) -> None:
        self.connections_refused.inc(transport=transport, reason=reason)

    def model_step(self, kind: str, seconds: float) -> None:
        self.model_step_seconds.observe(seconds, kind=kind)

    def render(self) -> str:
        return self.registry.render()


class ModelMetrics:
    """The system model's own numbers, copied from its ``model/status`` result at each scrape
    (:meth:`update`): a device pool's devices, queues, steps, quota events and coalescing. Keys a
    status does not have leave their instruments as they were (a proxy reports no devices)."""

    DEVICE_STATES = ("ready", "cooling", "dead")

    def __init__(self, registry: MetricsRegistry) -> None:
        device, priority = ["device"], ["priority"]
        self.device_state = registry.gauge("oam_device_state", "1 for each device's state (ready, cooling, dead), else 0.",
                                           ["device", "state"])
        self.device_window = registry.gauge("oam_device_window_requests", "Requests in each device's quota window now.", device)
        self.device_limit = registry.gauge("oam_device_window_limit", "Each device's learned requests per quota window.", device)
        self.device_in_flight = registry.gauge("oam_device_in_flight", "Steps each device is generating now.", device)
        self.device_queued = registry.gauge("oam_device_queued", "Steps queued for each device.", device)
        self.device_cooling = registry.gauge("oam_device_cooling_seconds", "Seconds left of each device's cool-down.", device)
        self.device_generating = registry.gauge(
            "oam_device_generating_ratio", "Share of the time since the pool started each device spent generating.", device)
        self.device_steps = registry.counter(
            "oam_device_steps_total", "Steps each device ended, by outcome (ok, busy, error, rejected).", ["device", "outcome"])
        self.queued = registry.gauge("oam_model_queued", "Model steps waiting for a device, by priority.", priority)
        self.queue_wait = registry.gauge(
            "oam_model_queue_wait_seconds", "Queue wait of admitted steps since the start, by priority and quantile.",
            ["priority", "quantile"])
        self.generating = registry.counter(
            "oam_model_generating_seconds_total", "Seconds the devices spent generating, by priority.", priority)
        self.steps = registry.counter("oam_model_steps_total", "Model steps the pool ended, by outcome (ok, failed).",
                                      ["outcome"])
        self.rerouted = registry.counter("oam_model_rerouted_total", "Steps moved to another device after a failure.")
        self.quota_events = registry.counter(
            "oam_model_quota_events_total", "Quota refusals: absorbed (rerouted or waited out) or surfaced (rate_limited).",
            ["fate"])
        self.coalesced_items = registry.counter("oam_coalesce_items_total", "Steps that could share a generation.")
        self.coalesced_served = registry.counter("oam_coalesce_served_total", "Coalescable steps a generation answered.")
        self.coalesced_generations = registry.counter(
            "oam_coalesce_generations_total", "Generations the coalescable steps used.")

    def update(self, status: Mapping[str, Any] | None) -> None:
        """Copy what ``status`` (a ``model/status`` result) reports."""
        statistics = (status or {}).get("statistics")
        if not isinstance(statistics, Mapping):
            return
        for device in statistics.get("devices") or ():
            self._device(device)
        for name, count in (statistics.get("queuedByPriority") or {}).items():
            self.queued.set(count, priority=name)
        for name, seconds in (statistics.get("generatingByPriority") or {}).items():
            self.generating.set_total(seconds, priority=name)
        for name, wait in (statistics.get("queueWait") or {}).items():
            for quantile, key in (("0.5", "p50Ms"), ("0.9", "p90Ms"), ("0.99", "p99Ms")):
                self.queue_wait.set(wait[key] / 1000, priority=name, quantile=quantile)
        if "stepsOk" in statistics:
            self.steps.set_total(statistics["stepsOk"], outcome="ok")
            self.steps.set_total(statistics["stepsFailed"], outcome="failed")
            self.rerouted.set_total(statistics["rerouted"])
            self.quota_events.set_total(statistics["quotaEventsAbsorbed"], fate="absorbed")
            self.quota_events.set_total(statistics["quotaEventsSurfaced"], fate="surfaced")
        coalescing = statistics.get("coalescing")
        if isinstance(coalescing, Mapping):
            self.coalesced_items.set_total(coalescing["items"])
            self.coalesced_served.set_total(coalescing["served"])
            self.coalesced_generations.set_total(coalescing["generations"])

    def _device(self, device: Mapping[str, Any]) -> None:
        name = device["name"]
        for state in self.DEVICE_STATES:
            self.device_state.set(1 if device["state"] == state else 0, device=name, state=state)
        self.device_window.set(device.get("requestsInWindow", 0), device=name)
        if device.get("requestsLimit") is not None:
            self.device_limit.set(device["requestsLimit"], device=name)
        self.device_in_flight.set(device["inFlight"], device=name)
        self.device_queued.set(device["queued"], device=name)
        self.device_cooling.set(device.get("coolingSeconds") or 0, device=name)
        self.device_generating.set(device["utilisation"], device=name)
        for outcome, key in (("ok", "ok"), ("busy", "busy"), ("error", "errors"), ("rejected", "rejected")):
            self.device_steps.set_total(device[key], device=name, outcome=outcome)


class _RoutingMetrics:
    """``oam_route_*``: steps and spend per backend, priority, step kind and tenant (counters
    brought up to the router's totals), spend in each window, caps and holds (gauges)."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.steps = registry.counter("oam_route_steps_total", "Steps the router sent to a backend and it served, "
                                      "by backend, priority and step kind.", ["backend", "priority", "kind"])
        self.spend = registry.counter("oam_route_spend_total", "Spend (in the route file's price unit) settled on "
                                      "served steps, by backend, priority and step kind.", ["backend", "priority", "kind"])
        self.passed = registry.counter("oam_route_passed_total", "Steps that passed a backend for the next tier, by "
                                       "backend and reason (spilled, capped, failed, skipped).", ["backend", "reason"])
        self.unrouted = registry.counter("oam_route_unrouted_total", "Steps no backend of their row took.")
        self.tenant_steps = registry.counter("oam_route_tenant_steps_total", "Steps served, by tenant.", ["tenant"])
        self.tenant_spend = registry.counter("oam_route_tenant_spend_total", "Spend settled, by tenant.", ["tenant"])
        self.window = registry.gauge("oam_route_spend_window", "Spend within the last window, by scope (backend or "
                                     "tenant), name and window (hour, day).", ["scope", "name", "window"])
        self.cap = registry.gauge("oam_route_spend_cap", "Spend caps, by scope, name and window.",
                                  ["scope", "name", "window"])
        self.reserved = registry.gauge("oam_route_reserved", "Spend held by steps in flight, by backend.", ["backend"])

    def observe(self, stats: Any) -> None:
        for step in stats.steps:
            _up_to(self.steps, step.served, backend=step.backend, priority=step.priority, kind=step.kind)
            _up_to(self.spend, step.spend, backend=step.backend, priority=step.priority, kind=step.kind)
        _up_to(self.unrouted, stats.unrouted)
        for use in stats.backends:
            for reason in ("spilled", "capped", "failed", "skipped"):
                _up_to(self.passed, getattr(use, reason), backend=use.name, reason=reason)
            self.reserved.set(use.reserved, backend=use.name)
        for tenant in stats.tenants:
            _up_to(self.tenant_steps, tenant.served, tenant=tenant.name)
            _up_to(self.tenant_spend, tenant.spend, tenant=tenant.name)
        for scope, entries in (("backend", stats.backends), ("tenant", stats.tenants)):
            for entry in entries:
                for window in ("hour", "day"):
                    self.window.set(getattr(entry, f"spend_{window}"), scope=scope, name=entry.name, window=window)
                    cap = getattr(entry, f"cap_{window}")
                    if cap is not None:
                        self.cap.set(cap, scope=scope, name=entry.name, window=window)


def _up_to(counter: Counter, total: float, **labels: str) -> None:
    """Raise ``counter`` to ``total`` (a total kept elsewhere, which only goes up)."""
    if (behind := total - counter.value(**labels)) > 0:
        counter.inc(behind, **labels)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))
