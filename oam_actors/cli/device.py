"""``oam-actors device --simulate``: run a simulated phone speaking the Nano device protocol.

The phone is configured by a JSON file (a :class:`~oam_actors.models.device.PhoneConfig`; unknown
keys are errors) and/or flags, flags winning. The first line on stdout is the bound base URL
(``http://127.0.0.1:PORT``), so a caller that passed ``--port 0`` can find it; logs go to stderr.
The server runs until interrupted.

Like ``serve``, it refuses to listen beyond loopback without a bearer token (``--token`` or the
file's ``token``), and reports a bad value, a port in use or a host that does not resolve as a
:class:`UsageError` (exit status 2, one line).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from ..addresses import is_loopback
from .argtypes import (
    Endpoint,
    UsageError,
    host,
    listen_errors,
    non_negative_float,
    non_negative_int,
    port,
    positive_float,
    positive_int,
    unit_interval,
)

if TYPE_CHECKING:
    from ..models.device import PhoneConfig

__all__ = ["add_arguments", "config_from_args", "run"]


def _secret(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError("expected a bearer token: not empty, no white space")
    return text


# flag name → PhoneConfig field and the flag's type (what the field allows)
_FIELD_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "seed": ("seed", int),
    "time_scale": ("time_scale", positive_float),
    "model_name": ("model_name", str),
    "input_token_limit": ("input_token_limit", positive_int),
    "max_output_tokens": ("max_output_tokens", positive_int),
    "status": ("status", str),
    "unavailable_reason": ("unavailable_reason", str),
    "quota": ("quota_requests", non_negative_int),
    "quota_window": ("quota_window_s", positive_float),
    "battery_quota": ("battery_requests", non_negative_int),
    "battery_window": ("battery_window_s", positive_float),
    "battery_code": ("battery_code", int),
    "latency": ("first_token_latency_s", non_negative_float),
    "tokens_per_second": ("tokens_per_s", non_negative_float),
    "max_concurrent": ("max_concurrent", positive_int),
    "tool_call_rate": ("tool_call_rate", unit_interval),
    "malformed_rate": ("malformed_rate", unit_interval),
    "fault_unknown": ("fault_unknown", unit_interval),
    "fault_generation": ("fault_generation", unit_interval),
    "fault_disconnect": ("fault_disconnect", unit_interval),
    "fault_hang": ("fault_hang", unit_interval),
    "fault_garbage": ("fault_garbage", unit_interval),
    "token": ("token", _secret),
}


def _blocked(text: str) -> tuple[str, int]:
    word, sep, code = text.partition(":")
    if not word or (sep and not code.isdigit()):
        raise argparse.ArgumentTypeError(f"expected WORD or WORD:CODE with CODE 4, 11 or 15, got {text!r}")
    return word, int(code or 4)


def _period(text: str) -> tuple[float, float]:
    start, _, end = text.partition(":")
    refusal = argparse.ArgumentTypeError(f"expected START:END phone seconds with 0 <= START <= END, got {text!r}")
    try:
        first, last = float(start), float(end)
    except ValueError:
        raise refusal from None
    if not 0 <= first <= last < math.inf:
        raise refusal
    return first, last


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--simulate", action="store_true", help="run a simulated phone (the only mode so far)")
    parser.add_argument("--host", type=host, default="127.0.0.1",
                        help="address to bind (default 127.0.0.1); beyond loopback --token is required")
    parser.add_argument("--port", type=port, default=8765, help="port to bind; 0 picks a free one (default 8765)")
    parser.add_argument("--config", help="a JSON file with PhoneConfig fields")
    for flag, (field, kind) in _FIELD_FLAGS.items():
        parser.add_argument("--" + flag.replace("_", "-"), dest=flag, type=kind, default=None,
                            help=f"PhoneConfig.{field}")
    parser.add_argument("--block", action="append", type=_blocked, default=None, metavar="WORD[:CODE]",
                        help="a safety-blocked word; CODE 4 (default), 11 or 15; repeatable")
    parser.add_argument("--background", action="append", type=_period, default=None, metavar="START:END",
                        help="phone seconds after start during which the app is in the background; repeatable")


def config_from_args(args: argparse.Namespace) -> PhoneConfig:
    """The :class:`PhoneConfig` of the file (if any) with the flags applied; :class:`UsageError`
    if the file cannot be read or the result is invalid."""
    import msgspec

    from ..models.device import (
        PhoneConfig,  # imported late: the CLI starts without the device stack
    )

    try:
        fields: dict[str, Any] = {}
        if args.config:
            with open(args.config, "rb") as file:
                fields = msgspec.to_builtins(msgspec.json.decode(file.read(), type=PhoneConfig))
        for flag, (field, _) in _FIELD_FLAGS.items():
            if (value := getattr(args, flag)) is not None:
                fields[field] = value
        if args.block:
            fields["blocked_words"] = dict(args.block)
        if args.background:
            fields["background_periods"] = args.background
        return msgspec.convert(fields, PhoneConfig)
    except (OSError, ValueError, msgspec.MsgspecError) as error:
        raise UsageError(f"invalid phone configuration: {_with_flags(str(error))}") from error


def _with_flags(message: str) -> str:
    """``… at `$.quota_requests``` → ``… at `$.quota_requests` (--quota)``: name the flag too."""
    flags = {field: "--" + flag.replace("_", "-") for flag, (field, _) in _FIELD_FLAGS.items()}
    return re.sub(r"`\$\.(\w+)`", lambda m: f"{m[0]} ({flags[m[1]]})" if m[1] in flags else m[0], message)


async def _serve(config: PhoneConfig, endpoint: Endpoint) -> None:
    import anyio

    from ..models.device import SimulatedPhone

    async with AsyncExitStack() as stack:
        with listen_errors("--host/--port", endpoint):
            phone = await stack.enter_async_context(SimulatedPhone(config, host=endpoint.host, port=endpoint.port))
        print(phone.url, flush=True)
        await anyio.sleep_forever()


def run(args: argparse.Namespace) -> int:
    if not args.simulate:
        raise UsageError("only --simulate is available; real phones run the companion app (protocol/DEVICE.md)")
    config = config_from_args(args)
    if config.token is None and not is_loopback(args.host):
        raise UsageError(
            f"--host {args.host} (not loopback) requires a bearer token: add --token SECRET "
            '(or "token" in --config), or bind 127.0.0.1'
        )
    import anyio

    anyio.run(_serve, config, Endpoint(args.host, args.port))
    return 0
