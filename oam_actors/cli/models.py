"""Choosing the server's backends from the command line or the environment.

``--model`` (``OAM_MODEL``) is the ``"system"`` model: ``scripted``, or a proxy backend written
``PROVIDER[:BASE_URL][#MODEL]`` (``openai:http://127.0.0.1:8080/v1#qwen``, ``anthropic#claude-…``,
``gemini#gemini-2.5-flash``); ``--base-url`` / ``--model-name`` (``OAM_BASE_URL`` /
``OAM_MODEL_NAME``) fill in what the spec leaves out. Sessions may also name proxy models
themselves (``{"type": "openai", …}``): :func:`models_from_args` registers the three types on one
shared, pooled HTTP client, whose lifetime the caller owns (``async with setup.backends``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import msgspec

from ..bridge import CustomModelFactory, ModelFactory
from ..models import ScriptedModel
from ..models.proxy import ProxyBackends, ProxyConfig, parse_model_spec

__all__ = ["ModelSetup", "add_model_arguments", "models_from_args", "system_model_from_args"]


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--model",
        default=env("OAM_MODEL"),
        help='the "system" model: "scripted" (answers "(script exhausted)"), a proxy backend '
        "PROVIDER[:BASE_URL][#MODEL] with PROVIDER openai, anthropic or gemini, or unset for none "
        "(environment: OAM_MODEL)",
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
    parser.add_argument("--proxy-allow-host", action="append", metavar="HOST",
                        default=[h for h in (env("OAM_PROXY_ALLOW_HOSTS") or "").split(",") if h],
                        help="a host sessions may name in a proxy model's baseUrl, besides the providers' "
                        "own and loopback (repeatable; environment: OAM_PROXY_ALLOW_HOSTS, comma-separated)")


@dataclass(frozen=True)
class ModelSetup:
    """The system model, the session model types, and the client they share (close it)."""

    system_model: ModelFactory | None
    model_types: dict[str, CustomModelFactory]
    backends: ProxyBackends


def models_from_args(args: argparse.Namespace) -> ModelSetup:
    """Exits (``SystemExit``) with a readable message for a bad ``--model``."""
    backends = ProxyBackends(allowed_hosts=args.proxy_allow_host)
    system: ModelFactory | None = None
    if args.model == "scripted":
        system = ScriptedModel
    elif args.model:
        config = _proxy_config(args)
        backends.allow_host(config.host)
        model = backends.model(config)
        system = lambda: model  # noqa: E731 (one shared instance: it keeps no per-session state)
    return ModelSetup(system, dict(backends.model_types()), backends)


def system_model_from_args(args: argparse.Namespace) -> ModelFactory | None:
    """The system model alone; a proxy one keeps its HTTP client until the process ends."""
    return models_from_args(args).system_model


def _proxy_config(args: argparse.Namespace) -> ProxyConfig:
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
    return msgspec.structs.replace(config, **{k: v for k, v in fields.items() if v is not None})


def _flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None
