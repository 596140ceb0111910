"""``oam-actors device --simulate``: run a simulated phone speaking the Nano device protocol.

The phone is configured by a JSON file (a :class:`~oam_actors.models.device.PhoneConfig`; unknown
keys are errors) and/or flags, flags winning. The first line on stdout is the bound base URL
(``http://127.0.0.1:PORT``), so a caller that passed ``--port 0`` can find it; logs go to stderr.
The server runs until interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models.device import PhoneConfig

__all__ = ["add_arguments", "config_from_args", "run"]

# flag name → PhoneConfig field, for the flags that map one to one
_FIELD_FLAGS: dict[str, tuple[str, type]] = {
    "seed": ("seed", int),
    "time_scale": ("time_scale", float),
    "model_name": ("model_name", str),
    "input_token_limit": ("input_token_limit", int),
    "max_output_tokens": ("max_output_tokens", int),
    "status": ("status", str),
    "unavailable_reason": ("unavailable_reason", str),
    "quota": ("quota_requests", int),
    "quota_window": ("quota_window_s", float),
    "battery_quota": ("battery_requests", int),
    "battery_window": ("battery_window_s", float),
    "battery_code": ("battery_code", int),
    "latency": ("first_token_latency_s", float),
    "tokens_per_second": ("tokens_per_s", float),
    "max_concurrent": ("max_concurrent", int),
    "tool_call_rate": ("tool_call_rate", float),
    "malformed_rate": ("malformed_rate", float),
    "fault_unknown": ("fault_unknown", float),
    "fault_generation": ("fault_generation", float),
    "fault_disconnect": ("fault_disconnect", float),
    "fault_hang": ("fault_hang", float),
    "fault_garbage": ("fault_garbage", float),
    "token": ("token", str),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--simulate", action="store_true", help="run a simulated phone (the only mode so far)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port to bind; 0 picks a free one (default 8765)")
    parser.add_argument("--config", help="a JSON file with PhoneConfig fields")
    for flag, (field, kind) in _FIELD_FLAGS.items():
        parser.add_argument("--" + flag.replace("_", "-"), dest=flag, type=kind, default=None,
                            help=f"PhoneConfig.{field}")
    parser.add_argument("--block", action="append", default=None, metavar="WORD[:CODE]",
                        help="a safety-blocked word; CODE 4 (default), 11 or 15; repeatable")
    parser.add_argument("--background", action="append", default=None, metavar="START:END",
                        help="phone seconds after start during which the app is in the background; repeatable")


def config_from_args(args: argparse.Namespace) -> PhoneConfig:
    """The :class:`PhoneConfig` of the file (if any) with the flags applied; ``SystemExit`` if invalid."""
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
            fields["blocked_words"] = dict(_blocked(item) for item in args.block)
        if args.background:
            fields["background_periods"] = [_period(item) for item in args.background]
        return msgspec.convert(fields, PhoneConfig)
    except (OSError, ValueError, msgspec.MsgspecError) as error:
        raise SystemExit(f"oam-actors device: invalid phone configuration: {error}") from error


def _blocked(item: str) -> tuple[str, int]:
    word, _, code = item.partition(":")
    return word, int(code or 4)


def _period(item: str) -> tuple[float, float]:
    start, _, end = item.partition(":")
    return float(start), float(end)


async def _serve(config: PhoneConfig, host: str, port: int) -> None:
    import anyio

    from ..models.device import SimulatedPhone

    async with SimulatedPhone(config, host=host, port=port) as phone:
        print(phone.url, flush=True)
        await anyio.sleep_forever()


def run(args: argparse.Namespace) -> int:
    if not args.simulate:
        print("oam-actors device: only --simulate is available; real phones run the companion app "
              "(protocol/DEVICE.md)", file=sys.stderr)
        return 2
    config = config_from_args(args)
    import anyio

    try:
        anyio.run(_serve, config, args.host, args.port)
    except KeyboardInterrupt:
        pass
    return 0
