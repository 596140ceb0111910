"""Choosing the server's default ("system") backend from the command line or the environment."""

from __future__ import annotations

import argparse
import os

from ..bridge import ModelFactory
from ..models import ScriptedModel

__all__ = ["add_model_arguments", "system_model_from_args"]


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=os.environ.get("OAM_MODEL"),
        help='the "system" model: "scripted" (answers "(script exhausted)") or unset for none '
        "(environment: OAM_MODEL)",
    )


def system_model_from_args(args: argparse.Namespace) -> ModelFactory | None:
    if not args.model:
        return None
    if args.model == "scripted":
        return ScriptedModel
    raise SystemExit(f"oam-actors: unknown --model {args.model!r}")
