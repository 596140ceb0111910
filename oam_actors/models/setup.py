"""A server's models from one :class:`ModelConfig`: the ``"system"`` model, the model types
sessions may name, and what must run while serving.

``ModelConfig.model`` is the system model: ``"scripted"``, ``"farm:N"`` (N simulated Nano phones
in this process, ``farm_time_scale`` real seconds per phone second), a proxy backend written
``PROVIDER[:BASE_URL][#MODEL]`` (``openai:http://127.0.0.1:8080/v1#qwen``, ``anthropic#claude-…``,
``gemini#gemini-2.5-flash``, ``antigravity#…``), or ``None`` for none; ``base_url`` /
``model_name`` fill in what the spec leaves out. ``devices`` (phone URLs) makes the system model a
device pool instead. Sessions may also name proxy models themselves (``{"type": "openai", …}``):
the provider types are registered on one shared, pooled HTTP client, and every model naming one
backend (provider, base URL, model, key variable; the proxy system model too) queues in that
backend's one quota scheduler. They may name phones too (``{"type": "device", "urls": […]}``,
:mod:`oam_actors.models.device_backends`): one pool per set of phones, started on first use (the server's own pool for its ``devices``). ``rpm``, ``tpm`` and ``max_concurrency`` are the limits the
operator bought per proxy backend: each scheduler starts from them, paced evenly over the minute,
and takes the stricter of them and what the provider's headers report.

::

    setup = create_model_setup(ModelConfig(model="farm:4"))
    async with setup.backends, setup.resources, LocalSystem() as system, setup.hosted:
        bridge = Bridge(system, write, config=BridgeConfig(model_types=setup.model_types),
                        system_model=setup.system_model,
                        extensions=model_extensions(setup))  # oam_actors.bridge.model_status

``setup.backends`` is the proxy client (close it last); ``setup.resources`` runs a device pool
and the pools sessions name (enter it before the actor system); ``setup.hosted`` hosts the system model elsewhere when a
``host`` is given (enter it inside the running actor system). On Ray a pool or proxy system model
cannot travel to the shards, so ``create_model_setup(config, host=ClusterModel)`` hosts a pool
once on the cluster (:class:`~oam_actors.cluster.ClusterModel`), built there, and a proxy as the
named model actor of its backend that sessions naming the same backend use too
(``host.stand_in``); every shard's and every front door's sessions share its quota, and a
proxy's API key is read from the model actor's environment. A set of phones sessions name is
its own model actor the same way (hosted on first use, shared by every shard and front door).
``setup.status_model`` is the model ``model/status`` reports on (a device pool's), or ``None``.
A pool or proxy system model is coalesced (``coalesce``, on by default;
:mod:`oam_actors.models.coalesce`): barks, tool-free decisions and talk steps that wait for it share
generations; on Ray that happens in the model actor. A farm's coalescing runs in phone time (its
``time_scale`` is ``farm_time_scale``: barks and decisions linger a phone second while they queue).

``ModelConfig.routes`` (a :class:`~oam_actors.models.routing.RouteTable`, ``--routes FILE``) makes
the system model a :class:`~oam_actors.models.routing.RouterModel` over the table's backends,
each built as ``model``/``devices`` would build it (their pools entered by ``setup.resources``;
``setup.router`` is the router, for ``/metrics``); with ``host`` the router and its backends run
in one model actor (:func:`open_routed`), so its caps and spill decisions hold cluster-wide.

A bad config raises :class:`ModelConfigError` naming the field, before anything starts (a route
table's backend: field ``routes``, the message naming its place in the file).
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from urllib.parse import urlsplit
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

import msgspec

from ..agent.model import LanguageModel
from ._statistics import ModelWithStatistics
from .coalesce import CoalesceSettings, CoalescingModel, open_coalesced
from .device_backends import DeviceBackends
from .errors import ModelConfigError
from .factories import PoolHost
from .proxy import Provider, ProxyBackends, ProxyConfig, parse_model_spec
from .routing import BackendRoute, RouteError, RouterModel, RouteTable
from .scheduler import QuotaLimits
from .scripted import ScriptedModel

if TYPE_CHECKING:
    from .pool import DevicePool

__all__ = [
    "MODEL_FORMS",
    "HostedModel",
    "ModelConfig",
    "ModelConfigError",
    "ModelHosting",
    "ModelSetup",
    "create_model_setup",
    "open_routed",
    "stated_limits",
]

MODEL_FORMS = (
    "scripted, farm:N (N simulated phones), or PROVIDER[:BASE_URL][#MODEL] with PROVIDER one of "
    + ", ".join(p.value for p in Provider)
)
"""The forms :attr:`ModelConfig.model` may take, for messages and help texts."""

_FARM = re.compile(r"farm:(\d+)")


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the system model is and how sessions may choose theirs (see the module docstring).

    ``api_key_env``, ``native_tools``, ``structured_output`` and ``context_size`` apply to a
    proxy system model; ``device_token`` is the phones' bearer token; ``proxy_allow_hosts`` are
    hosts sessions may name in a proxy model's ``baseUrl`` besides the providers' own and
    loopback.
    """

    model: str | None = None
    base_url: str | None = None
    model_name: str | None = None
    api_key_env: str | None = None
    native_tools: bool = False
    structured_output: bool = False
    context_size: int | None = None
    devices: tuple[str, ...] = ()
    device_token: str | None = None
    farm_time_scale: float = 0.1  # the demo scale: the phones' 60 s quota window lasts 6 s
    proxy_allow_hosts: tuple[str, ...] = ()
    device_allow_hosts: tuple[str, ...] = ()
    """Hosts sessions may name in a device model's ``urls`` besides loopback and the hosts of
    ``devices``."""
    queue_seconds: tuple[float, float, float] | None = None
    """The deadlines by priority (dialogue, decision, background): how long a model step may wait
    for the pool's or the proxy's quota (``None``: 20, 60 and 120 s)."""
    coalesce: CoalesceSettings | None = msgspec.field(default_factory=CoalesceSettings)
    """A pool or proxy system model answers barks, tool-free decisions and talk steps that wait for it
    together (:mod:`oam_actors.models.coalesce`); ``None`` turns it off."""
    rpm: int | None = None  # requests per minute per proxy backend, as the operator bought them
    tpm: int | None = None  # tokens per minute per proxy backend
    max_concurrency: int | None = None  # steps at once per proxy backend
    refuse_private_addresses: bool = False
    """Set by a server listening beyond loopback: a proxy ``baseUrl`` or device ``urls`` a session
    names must resolve to public addresses unless its host is allowed above
    (:mod:`oam_actors.models.address_guard`)."""
    routes: RouteTable | None = None
    """A route table (:mod:`oam_actors.models.routing`): the system model is a router over its
    backends, each built as ``model`` (or ``devices``) would build it; ``model`` and ``devices``
    must then be unset."""

    def proxy_limits(self) -> QuotaLimits:
        """Where each proxy backend's scheduler starts (:func:`stated_limits`)."""
        return stated_limits(rpm=self.rpm, tpm=self.tpm, max_concurrency=self.max_concurrency)


def stated_limits(*, rpm: int | None = None, tpm: int | None = None, max_concurrency: int | None = None) -> QuotaLimits:
    """A proxy backend's limits as an operator states them: requests and tokens per minute and
    steps at once (``None``: not stated), paced evenly over the minute, so a provider that counts
    them per shorter window (10 s, 1 s) never refuses."""
    return QuotaLimits(window_seconds=60.0, requests_per_window=rpm, tokens_per_window=tpm,
                       max_concurrency=max_concurrency, pace_evenly=True)


class HostedModel(Protocol):
    """A system model hosted somewhere else (a Ray model actor): hosted while entered, reached
    through :meth:`model` meanwhile. :class:`~oam_actors.cluster.ClusterModel` is one."""

    name: str

    def model(self) -> ModelWithStatistics: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...


class ModelHosting(Protocol):
    """Where models run when not in this process (:class:`~oam_actors.cluster.ClusterModel`)."""

    def __call__(self, name: str, factory: Callable[[], Any], /) -> HostedModel:
        """A :class:`HostedModel` named ``name`` from a picklable factory of the model (a
        function or ``functools.partial`` returning the model, or an async context manager
        yielding it)."""
        ...

    def stand_in(self, model: LanguageModel, /) -> LanguageModel:
        """``model`` as every process reaches it (a hosted backend's model actor)."""
        ...


@dataclass(frozen=True)
class ModelSetup:
    """The system model, the session model types, the client they share (close it), and what
    must run while serving: ``async with setup.resources`` (device pools) before the actor
    system starts, ``async with setup.hosted`` (a model actor) inside it."""

    system_model: Callable[[], LanguageModel] | None
    model_types: dict[str, Callable[[dict[str, Any], str], LanguageModel]]
    backends: ProxyBackends
    devices: DeviceBackends
    pool: PoolHost | None = None
    cluster: HostedModel | None = None
    status_model: Callable[[], ModelWithStatistics] | None = None
    routed_pools: tuple[PoolHost, ...] = ()
    """A routed system model's device pools (its backends that are pools)."""
    routed_clusters: tuple[HostedModel, ...] = ()
    """A routed system model's backends hosted elsewhere."""
    router: RouterModel | None = None
    """The routed system model (``routes``), whose counters ``/metrics`` reads."""

    @property
    def model_checks(self) -> dict[str, Callable[[dict[str, Any], str], Awaitable[None]]]:
        """``BridgeConfig.model_checks``: the address checks of the proxy and device types, when
        the server refuses private addresses."""
        return {**self.backends.model_checks(), **self.devices.model_checks()}

    @property
    def resources(self) -> AbstractAsyncContextManager[object]:
        """The device pool (if the system model is one, or its router's) and the pools sessions name."""
        return _entered(self.devices, *([] if self.pool is None else [self.pool]), *self.routed_pools)

    @property
    def hosted(self) -> AbstractAsyncContextManager[object]:
        if self.cluster is not None:
            return self.cluster
        return _entered(*self.routed_clusters)


def create_model_setup(config: ModelConfig, *, host: ModelHosting | None = None) -> ModelSetup:
    """The models ``config`` describes, not yet started; with ``host``, a pool or proxy system
    model is hosted through it (``setup.hosted``). Raises :class:`ModelConfigError`."""
    _check_numbers(config)
    backends = ProxyBackends(allowed_hosts=config.proxy_allow_hosts, limits=config.proxy_limits(),
                             queue_seconds=config.queue_seconds, refuse_private=config.refuse_private_addresses)
    devices = _device_backends(config)
    types: dict[str, Callable[[dict[str, Any], str], LanguageModel]] = {**backends.model_types(),
                                                                       **devices.model_types()}
    if config.routes is not None:
        return _routed(config, config.routes, backends, devices, types, host)
    built = _system_model(config, backends, devices, host)
    return ModelSetup(built.model, types, backends, devices, pool=built.pool, cluster=built.cluster,
                      status_model=built.status)


@dataclass(frozen=True)
class _Built:
    """One backend as ``model`` / ``devices`` make it: its model, and what must run for it."""

    model: Callable[[], LanguageModel] | None
    pool: PoolHost | None = None
    cluster: HostedModel | None = None
    status: Callable[[], ModelWithStatistics] | None = None


def _system_model(config: ModelConfig, backends: ProxyBackends, devices: DeviceBackends,
                  host: ModelHosting | None) -> _Built:
    pool = _pool_host(config)
    proxy = None if pool is not None or config.model in (None, "", "scripted") else _proxy_config(config)
    if proxy is not None:
        backends.allow_host(proxy.host)  # sessions may name the system model's host too
    if pool is None and proxy is None:
        return _Built(ScriptedModel if config.model else None)
    if pool is not None:
        coalesce = _pool_coalescing(config)
        if host is not None:
            opener: Callable[[], Any] = pool.opener()
            if coalesce is not None:  # coalesced in the model actor, where every shard's steps meet
                opener = functools.partial(open_coalesced, opener, coalesce)
            cluster = host(f"system:{pool.label}", opener)
            if config.devices:  # sessions naming the same phones use the same pool
                devices.share(config.devices, cluster.model)
            return _Built(cluster.model, cluster=cluster, status=cluster.model)
        model_of_pool = _coalesced(pool.model, coalesce)
        if config.devices:
            devices.share(config.devices, model_of_pool)
        return _Built(model_of_pool, pool=pool, status=model_of_pool)
    assert proxy is not None
    # The backend's one shared model (and quota scheduler), which sessions naming it get too,
    # coalesced where its steps meet (on Ray: in the backend's model actor).
    model: LanguageModel = backends.shared(proxy, coalesce=config.coalesce, limits=config.proxy_limits())
    if host is not None:
        model = host.stand_in(model)
    return _Built(lambda: model)


def _routed(config: ModelConfig, table: RouteTable, backends: ProxyBackends, devices: DeviceBackends,
            types: dict[str, Callable[[dict[str, Any], str], LanguageModel]], host: ModelHosting | None) -> ModelSetup:
    """The system model as a router over the table's backends, each built as its own config."""
    if config.model or config.devices:
        raise ModelConfigError("routes", "a route table and a system model (model or devices) were both given: "
                               "name the model in the route table")
    # Built (not started) here; on Ray that only checks them: the model actor builds its own.
    built = {name: _route_backend(config, table, route, backends, devices) for name, route in table.backends.items()}
    if host is not None:
        # One router for the cluster, in its own model actor: its caps, cooldowns and spill
        # decisions hold for every shard and front door (the same table, wherever its file lies,
        # finds the same actor).
        same = msgspec.structs.replace(config, routes=msgspec.structs.replace(table, source=""))
        digest = hashlib.sha256(msgspec.msgpack.encode(same)).hexdigest()[:12]
        cluster = host(f"system:routes:{digest}", functools.partial(open_routed, config))
        return ModelSetup(cluster.model, types, backends, devices, cluster=cluster, status_model=cluster.model)
    router = RouterModel(table, {name: b.model for name, b in built.items()},  # type: ignore[misc]
                         queue_seconds=config.queue_seconds)
    return ModelSetup(lambda: router, types, backends, devices, status_model=lambda: router, router=router,
                      routed_pools=tuple(b.pool for b in built.values() if b.pool is not None),
                      routed_clusters=tuple(b.cluster for b in built.values() if b.cluster is not None))


@asynccontextmanager
async def open_routed(config: ModelConfig) -> AsyncIterator[RouterModel]:
    """The router ``config.routes`` describes, its backends running while the block runs (the
    factory a Ray model actor hosts the routed system model with). Raises :class:`ModelConfigError`."""
    setup = create_model_setup(config)
    assert setup.router is not None, "a config with routes"
    async with setup.backends, setup.resources:
        yield setup.router


def _route_backend(config: ModelConfig, table: RouteTable, route: BackendRoute, backends: ProxyBackends,
                   devices: DeviceBackends) -> _Built:
    own = msgspec.structs.replace(
        config, routes=None, model=route.model, devices=route.devices, base_url=route.base_url,
        model_name=route.model_name, api_key_env=route.api_key_env, native_tools=route.native_tools,
        structured_output=route.structured_output, context_size=route.context_size,
        rpm=route.rpm or config.rpm, tpm=route.tpm or config.tpm,
        max_concurrency=route.max_concurrency or config.max_concurrency)
    try:
        _check_numbers(own)
        return _system_model(own, backends, devices, None)
    except ModelConfigError as exc:
        place = f"backends.{route.name}.{exc.field}"
        raise ModelConfigError("routes", str(RouteError(table.source, place, str(exc)))) from exc


def _device_backends(config: ModelConfig) -> DeviceBackends:
    """The pools sessions name: on loopback, on the system pool's hosts, or on allowed hosts."""
    hosts = {urlsplit(url.strip()).hostname or "" for url in config.devices} - {""}
    return DeviceBackends(allowed_hosts=[*hosts, *config.device_allow_hosts], token=config.device_token,
                          queue_seconds=config.queue_seconds, refuse_private=config.refuse_private_addresses)


@asynccontextmanager
async def _entered(*managers: AbstractAsyncContextManager[object]) -> AsyncIterator[None]:
    async with AsyncExitStack() as stack:
        for manager in managers:
            await stack.enter_async_context(manager)
        yield


def _pool_coalescing(config: ModelConfig) -> CoalesceSettings | None:
    """The pool's coalescing in its own time: a farm's phone second lasts ``farm_time_scale``
    real seconds (so does its adaptive linger); real phones run in real time."""
    if config.coalesce is None or _FARM.fullmatch(config.model or "") is None:
        return config.coalesce
    return msgspec.structs.replace(config.coalesce, time_scale=config.farm_time_scale)


def _coalesced(pool: Callable[[], DevicePool], settings: CoalesceSettings | None) -> Callable[[], Any]:
    """The running pool, coalesced by one model (made when the pool is first asked for)."""
    if settings is None:
        return pool
    made: list[CoalescingModel] = []

    def model() -> CoalescingModel:
        backend = pool()
        if not made or made[0].backend is not backend:
            made[:] = [CoalescingModel(backend, settings)]
        return made[0]

    return model


def _check_numbers(config: ModelConfig) -> None:
    scale = config.farm_time_scale
    if not (math.isfinite(scale) and scale > 0):
        raise ModelConfigError("farm_time_scale", f"expected a number greater than 0, got {scale!r}")
    if config.context_size is not None and config.context_size < 1:
        raise ModelConfigError("context_size", f"expected an integer of at least 1, got {config.context_size!r}")
    for field in ("rpm", "tpm", "max_concurrency"):
        value = getattr(config, field)
        if value is not None and value < 1:
            raise ModelConfigError(field, f"expected an integer of at least 1, got {value!r}")


def _pool_host(config: ModelConfig) -> PoolHost | None:
    from .pool import PoolConfigError

    model = config.model or ""
    if config.devices and model:
        raise ModelConfigError("devices", f"a pool of phones and the model {model!r} were both given: choose "
                               "one, not both")
    farm = _FARM.fullmatch(model)
    if farm is None and model.startswith("farm"):
        raise ModelConfigError("model", f"{model!r}: write farm:N with N phones, e.g. farm:4")
    try:
        if farm is not None:
            return PoolHost.simulated(int(farm.group(1)), time_scale=config.farm_time_scale,
                                      queue_seconds=config.queue_seconds)
        if not config.devices:
            return None
        return PoolHost.devices(config.devices, token=config.device_token, queue_seconds=config.queue_seconds)
    except PoolConfigError as exc:
        if farm is not None:
            raise ModelConfigError("model", f"{model!r}: {exc}") from exc
        raise ModelConfigError("devices", str(exc)) from exc


def _proxy_config(config: ModelConfig) -> ProxyConfig:
    """The proxy system model's config."""
    assert config.model is not None
    try:
        proxy = parse_model_spec(config.model, base_url=config.base_url, model=config.model_name)
    except ValueError as exc:
        raise ModelConfigError("model", str(exc)) from exc
    if proxy is None:
        raise ModelConfigError("model", f"unknown model {config.model!r}: expected {MODEL_FORMS}")
    fields: dict[str, Any] = {"native_tools": config.native_tools, "structured_output": config.structured_output}
    if config.api_key_env is not None:
        fields["api_key_env"] = config.api_key_env
    if config.context_size is not None:
        fields["context_size"] = config.context_size
    return msgspec.structs.replace(proxy, **fields)
