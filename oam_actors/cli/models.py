"""Choosing the server's backends from the command line or the environment.

``--model`` (``OAM_MODEL``) is the ``"system"`` model: ``scripted``, or a proxy backend written
``PROVIDER[:BASE_URL][#MODEL]`` (``openai:http://127.0.0.1:8080/v1#qwen``, ``anthropic#claude-…``,
``gemini#gemini-2.5-flash``); ``--base-url`` / ``--model-name`` (``OAM_BASE_URL`` /
``OAM_MODEL_NAME``) fill in what the spec leaves out. Sessions may also name proxy models
themselves (``{"type": "openai", …}``): :func:`models_from_args` registers the three types on one
shared, pooled HTTP client, whose lifetime the caller owns (``async with setup.backends``). A proxy
system model queues behind a :class:`~oam_actors.models.scheduler.QuotaScheduler` that its 429s
and rate-limit headers feed.

A Nano device pool is the system model with ``--device URL`` (repeatable; ``OAM_DEVICES``,
comma-separated) or ``--model farm:N`` (N simulated phones in this process, running
``--farm-time-scale`` real seconds per phone second). The pool starts and stops with
``async with setup.resources``; ``setup.extensions`` adds ``model/status`` (the pool's
availability and statistics) to each bridge.

With ``--runtime ray`` a pool or proxy system model cannot travel to the shards: it is hosted
once on the cluster as a model actor (:class:`ClusterModel`), which builds the backend in its
own process (a farm's phones start there), and sessions get its picklable ``RemoteModel``, so
one quota holds for every shard. ``async with setup.hosted`` inside the running ``RaySystem``.
A proxy model's API key is then read from the model actor's environment.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio.to_thread
import msgspec

from ..bridge import Bridge, Call, CustomModelFactory, Extension, ModelFactory
from ..models import ScriptedModel
from ..models.proxy import ProxyBackends, ProxyConfig, parse_model_spec

if TYPE_CHECKING:
    from ..cluster import RemoteModel
    from ..models.pool import DevicePool, PoolConfig

__all__ = [
    "ClusterModel",
    "ModelSetup",
    "ModelStatusExtension",
    "PoolHost",
    "add_model_arguments",
    "models_from_args",
]

_FARM = re.compile(r"farm:(\d+)")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--model",
        default=env("OAM_MODEL"),
        help='the "system" model: "scripted" (answers "(script exhausted)"), "farm:N" (a pool of N '
        "simulated Nano phones), a proxy backend PROVIDER[:BASE_URL][#MODEL] with PROVIDER openai, "
        "anthropic or gemini, or unset for none (environment: OAM_MODEL)",
    )
    parser.add_argument("--base-url", default=env("OAM_BASE_URL"),
                        help="the proxy system model's base URL (environment: OAM_BASE_URL)")
    parser.add_argument("--model-name", default=env("OAM_MODEL_NAME"),
                        help="the proxy system model's model name (environment: OAM_MODEL_NAME)")
    parser.add_argument("--api-key-env", default=env("OAM_API_KEY_ENV"), metavar="VAR",
                        help="environment variable holding the system model's API key "
                        "(default per provider: OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY/GOOGLE_API_KEY)")
    parser.add_argument("--native-tools", action="store_true", default=_flag("OAM_NATIVE_TOOLS"),
                        help="system model: use the provider's tool calling instead of the envelope loop")
    parser.add_argument("--structured-output", action="store_true", default=_flag("OAM_STRUCTURED_OUTPUT"),
                        help="system model: send structured steps' schemas as the provider's response format")
    parser.add_argument("--context-size", type=int, default=_int(env("OAM_CONTEXT_SIZE")),
                        help="system model: input budget in tokens (default 8192)")
    parser.add_argument("--device", action="append", metavar="URL",
                        default=[u for u in (env("OAM_DEVICES") or "").split(",") if u],
                        help="a Nano phone's device-protocol URL (repeatable): the system model becomes a "
                        "pool of these phones (environment: OAM_DEVICES, comma-separated)")
    parser.add_argument("--device-token-env", default=env("OAM_DEVICE_TOKEN_ENV"), metavar="VAR",
                        help="environment variable holding the phones' bearer token")
    parser.add_argument("--farm-time-scale", type=float, default=_float(env("OAM_FARM_TIME_SCALE")) or 0.1,
                        metavar="S", help="--model farm:N: real seconds per phone second (default 0.1: the "
                        "60 s quota window lasts 6 s)")
    parser.add_argument("--proxy-allow-host", action="append", metavar="HOST",
                        default=[h for h in (env("OAM_PROXY_ALLOW_HOSTS") or "").split(",") if h],
                        help="a host sessions may name in a proxy model's baseUrl, besides the providers' "
                        "own and loopback (repeatable; environment: OAM_PROXY_ALLOW_HOSTS, comma-separated)")


class PoolHost:
    """Starts the simulated farm (if any) and the device pool, and stops them.

    The pool exists only inside ``async with``; :meth:`model` is the system model factory (every
    session and NPC gets the one pool, so each phone's quota is enforced once per process).
    """

    def __init__(self, *, urls: list[str], farm_phones: int = 0, time_scale: float = 0.1,
                 config: PoolConfig | None = None, token: str | None = None) -> None:
        from ..models.pool import PoolConfig, PoolConfigError, normalize_urls, scaled_config

        self._farm_phones = farm_phones
        self._time_scale = time_scale
        try:
            if farm_phones < 1:
                normalize_urls(urls)  # refuse a bad list now, before anything starts
                self._config = config or PoolConfig(token=token)
            else:
                self._config = config or scaled_config(time_scale)
        except (PoolConfigError, ValueError) as exc:
            raise SystemExit(f"oam-actors: device pool: {exc}") from None
        self._urls = urls
        self._stack = AsyncExitStack()
        self._pool: DevicePool | None = None

    @property
    def label(self) -> str:
        """``farm:N`` or ``devices:URL,…``: what the pool is made of."""
        return f"farm:{self._farm_phones}" if self._farm_phones else "devices:" + ",".join(self._urls)

    def model(self) -> DevicePool:
        if self._pool is None:
            raise RuntimeError("the device pool is not running (use it inside `async with PoolHost`)")
        return self._pool

    def opener(self) -> Callable[[], AbstractAsyncContextManager[DevicePool]]:
        """A picklable factory of this pool (and farm) for a model actor to run."""
        return functools.partial(_open_pool, self._urls, self._farm_phones, self._time_scale, self._config)

    async def __aenter__(self) -> Self:
        from ..models.pool import DevicePool, SimulatedFarm, farm_phone_config

        async with AsyncExitStack() as stack:
            urls, names = self._urls, None
            if self._farm_phones:
                farm = await stack.enter_async_context(
                    SimulatedFarm(self._farm_phones, farm_phone_config(self._time_scale)))
                urls, names = farm.urls, [f"phone{n + 1}" for n in range(len(farm.urls))]
            self._pool = await stack.enter_async_context(DevicePool(urls, config=self._config, names=names))
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._stack.aclose()
        finally:
            self._pool = None


@asynccontextmanager
async def _open_pool(
    urls: list[str], farm_phones: int, time_scale: float, config: PoolConfig
) -> AsyncIterator[DevicePool]:
    async with PoolHost(urls=urls, farm_phones=farm_phones, time_scale=time_scale, config=config) as host:
        yield host.model()


@asynccontextmanager
async def _open_proxy(config: ProxyConfig) -> AsyncIterator[Any]:
    async with ProxyBackends() as backends:
        yield _scheduled(backends.model(config))


class ClusterModel:
    """The system model hosted once on the Ray cluster as the model actor ``name``, built there
    by ``factory`` (picklable); :meth:`model` is the system model factory (its ``RemoteModel``).

    Enter it while Ray is up (inside the ``RaySystem``). It stops the model actor on exit only
    if it started it: a server joining a cluster where the same system model runs shares it.
    """

    def __init__(self, name: str, factory: Callable[[], Any]) -> None:
        self.name = name
        self._factory = factory
        self._model: RemoteModel | None = None
        self._started = False

    def model(self) -> RemoteModel:
        if self._model is None:
            raise RuntimeError("the model actor is not hosted (use it inside `async with ClusterModel`)")
        return self._model

    async def __aenter__(self) -> Self:
        from ..cluster.models import host_model, model_running, stop_model

        self._started = not model_running(self.name)
        try:
            # Blocks until the backend is built in the model actor (a farm's phones started).
            self._model = await anyio.to_thread.run_sync(host_model, self.name, self._factory)
        except Exception as exc:
            if self._started:
                stop_model(self.name)
            raise SystemExit(f"oam-actors: the system model {self.name!r} did not start: {exc}") from exc
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        from ..cluster.models import stop_model

        self._model = None
        if self._started:
            stop_model(self.name)


class ModelStatusExtension:
    """``model/status``: the system model's availability and its scheduler statistics (a device
    pool's per-device state, queues and counters). Install one per bridge."""

    def __init__(self, model: ModelFactory) -> None:
        self._model = model

    def install(self, bridge: Bridge) -> None:
        bridge.registry.register("model/status", self._status)

    async def _status(self, call: Call) -> Any:
        model = self._model()
        statistics = getattr(model, "statistics", None)
        found = statistics() if statistics is not None else None
        if inspect.isawaitable(found):  # a hosted model's, fetched from its model actor
            found = await found
        return {
            "availability": (await model.availability()).to_wire(),
            "statistics": msgspec.to_builtins(found),
        }

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class ModelSetup:
    """The system model, the session model types, the client they share (close it), and what
    must run while serving: ``async with setup.resources`` (a device pool) before the actor
    system starts, ``async with setup.hosted`` (a model actor) inside it, ``extensions``."""

    system_model: ModelFactory | None
    model_types: dict[str, CustomModelFactory]
    backends: ProxyBackends
    pool: PoolHost | None = None
    extension_factories: list[Callable[[], Extension]] = field(default_factory=list)
    cluster: ClusterModel | None = None

    @property
    def resources(self) -> PoolHost | AsyncExitStack:
        return self.pool if self.pool is not None else AsyncExitStack()

    @property
    def hosted(self) -> ClusterModel | AsyncExitStack:
        return self.cluster if self.cluster is not None else AsyncExitStack()

    def extensions(self) -> list[Extension]:
        """Fresh extensions for one bridge."""
        return [make() for make in self.extension_factories]


def models_from_args(args: argparse.Namespace) -> ModelSetup:
    """Exits (``SystemExit``) with a readable message for a bad ``--model`` or device list."""
    backends = ProxyBackends(allowed_hosts=args.proxy_allow_host)
    types: dict[str, CustomModelFactory] = dict(backends.model_types())
    pool = _pool_host(args)
    if pool is None and args.model in (None, "", "scripted"):
        return ModelSetup(ScriptedModel if args.model else None, types, backends)
    if args.runtime == "ray":
        cluster = _cluster_model(args, pool, backends)
        return ModelSetup(cluster.model, types, backends, extension_factories=_status(cluster.model, pool),
                          cluster=cluster)
    if pool is not None:
        return ModelSetup(pool.model, types, backends, pool, _status(pool.model, pool))
    model = _scheduled(backends.model(_proxy_config(args, backends)))
    return ModelSetup(lambda: model, types, backends)  # one shared instance, so one quota scheduler


def _status(model: ModelFactory, pool: PoolHost | None) -> list[Callable[[], Extension]]:
    """``model/status`` for a device pool's system model."""
    return [lambda: ModelStatusExtension(model)] if pool is not None else []


def _cluster_model(args: argparse.Namespace, pool: PoolHost | None, backends: ProxyBackends) -> ClusterModel:
    """The pool or proxy system model as a model actor named after what it is."""
    if pool is not None:
        return ClusterModel(f"system:{pool.label}", pool.opener())
    config = _proxy_config(args, backends)
    return ClusterModel(f"system:{config.provider.value}:{config.url}#{config.model}",
                        functools.partial(_open_proxy, config))


def _pool_host(args: argparse.Namespace) -> PoolHost | None:
    farm = _FARM.fullmatch(args.model or "")
    if args.device and args.model:
        raise SystemExit("oam-actors: give either --device URL (a pool of phones) or --model, not both")
    if farm is not None:
        phones = int(farm.group(1))
        if phones < 1:
            raise SystemExit(f"oam-actors: --model {args.model}: a farm needs at least one phone")
        return PoolHost(urls=[], farm_phones=phones, time_scale=args.farm_time_scale)
    if (args.model or "").startswith("farm"):
        raise SystemExit(f"oam-actors: --model {args.model!r}: write farm:N with N phones, e.g. farm:4")
    if not args.device:
        return None
    token = os.environ.get(args.device_token_env) if args.device_token_env else None
    return PoolHost(urls=list(args.device), token=token)


def _scheduled(model: Any) -> Any:
    """A proxy model behind its own quota scheduler, fed by its 429s and rate-limit headers."""
    from ..models.pool import ScheduledModel
    from ..models.proxy import scheduler_hook
    from ..models.scheduler import QuotaLimits, QuotaScheduler

    scheduler = QuotaScheduler(QuotaLimits())
    model.on_rate_limit = scheduler_hook(scheduler)
    return ScheduledModel(model, scheduler)


def _proxy_config(args: argparse.Namespace, backends: ProxyBackends) -> ProxyConfig:
    """The proxy system model's config; sessions may name its host too."""
    try:
        config = parse_model_spec(args.model, base_url=args.base_url, model=args.model_name)
    except ValueError as exc:
        raise SystemExit(f"oam-actors: {exc}") from None
    if config is None:
        raise SystemExit(f"oam-actors: unknown --model {args.model!r} (scripted, openai:…, anthropic:…, gemini:…)")
    fields = {
        "api_key_env": args.api_key_env,
        "native_tools": args.native_tools,
        "structured_output": args.structured_output,
        "context_size": args.context_size,
    }
    config = msgspec.structs.replace(config, **{k: v for k, v in fields.items() if v is not None})
    backends.allow_host(config.host)
    return config


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None
