"""The model options of ``stdio`` and ``serve``, and the :class:`~oam_actors.models.setup.ModelConfig`
they make.

``--model`` (``OAM_MODEL``) is the ``"system"`` model (``scripted``, ``farm:N``, or a proxy backend
``PROVIDER[:BASE_URL][#MODEL]``); ``--device URL`` (repeatable; ``OAM_DEVICES``, comma-separated)
makes it a pool of phones instead. ``--rpm``, ``--tpm`` and ``--max-concurrency`` state what each
proxy backend allows (the system model's and every one a session names; ``simulate`` takes them too). What each means, and how it runs (in this process, or as a
Ray model actor with ``--runtime ray``): :mod:`oam_actors.models.setup`.

A bad value exits with status 2 and one line naming the option and what it allows: argparse's
checks while parsing, :class:`~oam_actors.cli.argtypes.UsageError` for what the model config refuses.
"""

from __future__ import annotations

import argparse
import os

from ..models.coalesce import CoalesceSettings
from ..models.routing import RouteError, RouteTable, describe_routes, load_routes
from ..models.setup import MODEL_FORMS, ModelConfig, ModelConfigError, ModelSetup, create_model_setup
from .argtypes import UsageError, non_negative_float, positive_float, positive_int, priority_deadline

__all__ = ["add_model_arguments", "add_quota_arguments", "add_route_arguments", "check_routes", "load_routes_arg",
           "model_config_from_args", "models_from_args"]

# The option behind each ModelConfig field, for error messages.
_OPTIONS = {
    "model": "--model",
    "base_url": "--base-url",
    "model_name": "--model-name",
    "api_key_env": "--api-key-env",
    "context_size": "--context-size",
    "devices": "--device",
    "farm_time_scale": "--farm-time-scale",
    "proxy_allow_hosts": "--proxy-allow-host",
    "device_allow_hosts": "--device-allow-host",
    "rpm": "--rpm",
    "tpm": "--tpm",
    "max_concurrency": "--max-concurrency",
    "routes": "--routes",
}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--model",
        default=env("OAM_MODEL"),
        help=f'the "system" model: {MODEL_FORMS}; unset for none ("scripted" answers "(script exhausted)"; '
        "environment: OAM_MODEL)",
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
    # String defaults from the environment go through ``type`` too, so a bad variable is reported.
    parser.add_argument("--context-size", type=positive_int, default=env("OAM_CONTEXT_SIZE"), metavar="TOKENS",
                        help="system model: input budget in tokens (default 8192; environment: OAM_CONTEXT_SIZE)")
    parser.add_argument("--device", action="append", metavar="URL",
                        default=[u for u in (env("OAM_DEVICES") or "").split(",") if u],
                        help="a Nano phone's device-protocol URL http(s)://HOST:PORT (repeatable): the system "
                        "model becomes a pool of these phones (environment: OAM_DEVICES, comma-separated)")
    parser.add_argument("--device-token-env", default=env("OAM_DEVICE_TOKEN_ENV"), metavar="VAR",
                        help="environment variable holding the phones' bearer token")
    parser.add_argument("--farm-time-scale", type=positive_float, metavar="S",
                        default=env("OAM_FARM_TIME_SCALE") or str(ModelConfig().farm_time_scale),
                        help="--model farm:N: real seconds per phone second, > 0 (default 0.1: the 60 s quota "
                        "window lasts 6 s; environment: OAM_FARM_TIME_SCALE)")
    parser.add_argument("--deadline", action="append", type=priority_deadline, metavar="PRIORITY=SECONDS",
                        help="the server's default deadline of a priority (dialogue, decision, background): how "
                        "long a model step may wait for quota before the request degrades to its fallback or "
                        "fails rate_limited (repeatable; defaults dialogue=20, decision=60, background=120; a "
                        "request's deadlineSeconds may only shorten it)")
    parser.add_argument("--proxy-allow-host", action="append", metavar="HOST",
                        default=[h for h in (env("OAM_PROXY_ALLOW_HOSTS") or "").split(",") if h],
                        help="a host sessions may name in a proxy model's baseUrl, besides the providers' "
                        "own and loopback, whatever it resolves to (a serve listening beyond loopback refuses "
                        "loopback and private addresses otherwise; repeatable; environment: "
                        "OAM_PROXY_ALLOW_HOSTS, comma-separated)")
    parser.add_argument("--device-allow-host", action="append", metavar="HOST",
                        default=[h for h in (env("OAM_DEVICE_ALLOW_HOSTS") or "").split(",") if h],
                        help='a host sessions may name in a device model\'s urls ({"type": "device"}), besides '
                        "loopback and the hosts of --device, whatever it resolves to (a serve listening beyond "
                        "loopback refuses loopback and private addresses otherwise; repeatable; environment: "
                        "OAM_DEVICE_ALLOW_HOSTS, comma-separated)")
    parser.add_argument("--coalesce", action=argparse.BooleanOptionalAction, default=True,
                        help="a pool or proxy system model answers waiting barks, tool-free decisions and talk steps "
                        "together, several per generation (default: on)")
    parser.add_argument("--coalesce-batch", type=positive_int, default=CoalesceSettings().max_items, metavar="N",
                        help=f"--coalesce: items per generation at most (default {CoalesceSettings().max_items}; "
                        "1 turns coalescing off)")
    parser.add_argument("--coalesce-linger", type=non_negative_float, default=None, metavar="S",
                        help="--coalesce: seconds a new batch of barks or decisions always waits for company before "
                        "it queues; 0: never (default: adaptive, one second of the backend's time, a phone second "
                        "on a farm, only while their steps have to queue for quota; player dialogue never waits)")
    add_quota_arguments(parser)
    add_route_arguments(parser)


def add_route_arguments(parser: argparse.ArgumentParser) -> None:
    """``--routes FILE`` and ``--check-routes``: the system model as a router (docs/routing.md)."""
    parser.add_argument("--routes", default=os.environ.get("OAM_ROUTES"), metavar="FILE",
                        help="a route file (TOML or JSON): the system model routes each step to the first of its "
                        "row's backends that admits it before its spill deadline, within spend caps "
                        "(instead of --model/--device; environment: OAM_ROUTES)")
    parser.add_argument("--check-routes", action="store_true",
                        help="check the --routes file (and its backends' settings), print what it routes where, "
                        "and exit")


def load_routes_arg(path: str | None) -> RouteTable | None:
    """The ``--routes`` file's table; :class:`UsageError` naming the place in the file."""
    if path is None:
        return None
    try:
        return load_routes(path)
    except RouteError as exc:
        raise UsageError(f"argument --routes: {exc}") from exc


def check_routes(args: argparse.Namespace) -> int:
    """``--check-routes``: build the models the options describe (nothing starts), print the table."""
    if args.routes is None:
        raise UsageError("--check-routes needs --routes FILE")
    config = model_config_from_args(args)
    assert config.routes is not None
    try:
        create_model_setup(config)
    except ModelConfigError as exc:
        raise UsageError(f"argument {_OPTIONS.get(exc.field, exc.field)}: {exc}") from exc
    table = config.routes
    print("\n".join(describe_routes(table)))
    return 0


def add_quota_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rpm``, ``--tpm``, ``--max-concurrency``: what each proxy backend allows, as bought."""
    env = os.environ.get
    parser.add_argument("--rpm", type=positive_int, default=env("OAM_RPM"), metavar="N",
                        help="requests per minute each proxy backend allows (its API key at its endpoint for its "
                        "model), paced evenly; the provider's rate-limit headers tighten it (environment: OAM_RPM)")
    parser.add_argument("--tpm", type=positive_int, default=env("OAM_TPM"), metavar="N",
                        help="tokens per minute each proxy backend allows, paced evenly (environment: OAM_TPM)")
    parser.add_argument("--max-concurrency", type=positive_int, default=env("OAM_MAX_CONCURRENCY"), metavar="N",
                        help="model steps each proxy backend runs at once (environment: OAM_MAX_CONCURRENCY)")


def model_config_from_args(args: argparse.Namespace, *, refuse_private: bool = False) -> ModelConfig:
    """The library config of the parsed model options (``refuse_private``: a server listening
    beyond loopback, see ``ModelConfig.refuse_private_addresses``)."""
    return ModelConfig(
        model=args.model,
        base_url=args.base_url,
        model_name=args.model_name,
        api_key_env=args.api_key_env,
        native_tools=args.native_tools,
        structured_output=args.structured_output,
        context_size=args.context_size,
        devices=tuple(args.device),
        device_token=os.environ.get(args.device_token_env) if args.device_token_env else None,
        farm_time_scale=args.farm_time_scale,
        proxy_allow_hosts=tuple(args.proxy_allow_host),
        device_allow_hosts=tuple(args.device_allow_host),
        queue_seconds=_queue_times(args.deadline),
        coalesce=_coalescing(args),
        rpm=args.rpm,
        tpm=args.tpm,
        max_concurrency=args.max_concurrency,
        refuse_private_addresses=refuse_private,
        routes=load_routes_arg(args.routes),
    )


def _coalescing(args: argparse.Namespace) -> CoalesceSettings | None:
    if not args.coalesce or args.coalesce_batch < 2:
        return None
    return CoalesceSettings(max_items=args.coalesce_batch, linger_seconds=args.coalesce_linger)


def _queue_times(deadlines: list[tuple[str, float]] | None) -> tuple[float, float, float] | None:
    from ..models.pool import queue_times

    return queue_times(deadlines) if deadlines else None


def models_from_args(args: argparse.Namespace, *, refuse_private: bool = False) -> ModelSetup:
    """The models the options describe (with ``--runtime ray``, a pool or proxy system model is a
    Ray model actor); raises :class:`UsageError` naming the option at fault. Imports Ray with
    ``--runtime ray``: call :func:`~oam_actors.cli.runtime.system_from_args` first."""
    host = None
    if args.runtime == "ray":
        from ..cluster import ClusterModel  # imports Ray

        host = ClusterModel
    try:
        return create_model_setup(model_config_from_args(args, refuse_private=refuse_private), host=host)
    except ModelConfigError as exc:
        raise UsageError(f"argument {_OPTIONS.get(exc.field, exc.field)}: {exc}") from exc


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
