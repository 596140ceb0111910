"""What a command-line value may be: argparse ``type=`` functions, and :class:`UsageError`.

Every subcommand validates its options with these, so a mistake is caught while parsing and
reported the same way everywhere: exit status 2 and one line on stderr,
``oam-actors stdio: error: argument --max-line-bytes: expected an integer of at least 1, got '0'``
(argparse adds the option's name). Each function raises ``argparse.ArgumentTypeError`` saying
what is allowed and what was given.

A mistake that only shows after parsing (options that do not fit together, a port in use, a host
that does not resolve) is raised as :class:`UsageError` from a subcommand's ``run``; the entry
point prints it on one line and exits 2. Nothing here imports more than the standard library, so
a bad value is reported before any heavy import.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "LOG_LEVELS",
    "Endpoint",
    "UsageError",
    "host",
    "host_port",
    "listen_errors",
    "log_level",
    "non_negative_float",
    "non_negative_int",
    "port",
    "positive_float",
    "positive_int",
    "priority_deadline",
    "shares",
    "unit_interval",
]

_N = TypeVar("_N", int, float)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class UsageError(Exception):
    """A command-line mistake found after parsing. The message names the option(s) and says what
    is allowed; the entry point prints ``oam-actors COMMAND: error: MESSAGE`` and exits 2."""


@contextmanager
def listen_errors(option: str, address: object) -> Iterator[None]:
    """Around binding ``address``: a failure (port in use, address not on this machine, host that
    does not resolve) becomes a :class:`UsageError` naming ``option`` and the address."""
    try:
        yield
    except OSError as exc:
        # errno's own text: asyncio's servers put their own sentence in strerror.
        reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
        raise UsageError(f"{option} {address}: cannot listen there: {reason}") from exc


@dataclass(frozen=True)
class Endpoint:
    """A listen or connect address; ``host == ""`` means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _checked(text: str, parse: Callable[[str], _N], allowed: str, fits: Callable[[_N], bool]) -> _N:
    """``parse(text)`` if it parses and ``fits``; else the refusal saying what is ``allowed``."""
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is None or not fits(value):
        raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
    return value


def _finite(text: str) -> float:
    if not math.isfinite(value := float(text)):
        raise ValueError(text)
    return value


def positive_int(text: str) -> int:
    """A limit or a count that must not be zero: an integer ≥ 1."""
    return _checked(text, int, "an integer of at least 1", lambda value: value >= 1)


def non_negative_int(text: str) -> int:
    """A count where 0 means none (or "no limit", as the option's help says): an integer ≥ 0."""
    return _checked(text, int, "an integer of at least 0", lambda value: value >= 0)


def positive_float(text: str) -> float:
    """A duration, a scale or a rate per second: a finite number > 0."""
    return _checked(text, _finite, "a number greater than 0", lambda value: value > 0)


def non_negative_float(text: str) -> float:
    """A delay that may be nothing: a finite number ≥ 0."""
    return _checked(text, _finite, "a number of at least 0", lambda value: value >= 0)


def unit_interval(text: str) -> float:
    """A probability or a share: a number from 0 to 1."""
    return _checked(text, _finite, "a number from 0 to 1", lambda value: 0 <= value <= 1)


PRIORITIES = ("dialogue", "decision", "background")  # the quota scheduler's, lower case


def priority_deadline(text: str) -> tuple[str, float]:
    """``PRIORITY=SECONDS`` (``background=10``): a priority and a number of seconds > 0."""
    name, sep, seconds = text.partition("=")
    name = name.strip().lower()
    if not sep or name not in PRIORITIES:
        raise argparse.ArgumentTypeError(f"expected PRIORITY=SECONDS with PRIORITY one of {', '.join(PRIORITIES)}, "
                                         f"got {text!r}")
    return name, positive_float(seconds.strip())


def shares(text: str) -> tuple[float, float, float]:
    """Three shares ``A,B,C`` (``0.5,0.25,0.25``): numbers of at least 0, not all 0."""
    parts = text.split(",")
    try:
        values = [_finite(part.strip()) for part in parts]
    except ValueError:
        values = []
    if len(values) != 3 or min(values) < 0 or sum(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected three shares A,B,C of at least 0, not all 0, got {text!r}")
    return values[0], values[1], values[2]


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: the system picks a free one)."""
    return _checked(text, int, "a port from 0 to 65535", lambda value: 0 <= value <= 65535)


def host(text: str) -> str:
    """A host name or address (IPv6 with or without brackets); not empty, no spaces."""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if not _is_host(bare):
        raise argparse.ArgumentTypeError(f"expected a host name or address, got {text!r}")
    return bare


def _is_host(text: str) -> bool:
    return bool(text) and not any(c.isspace() or c in "/[]" for c in text)


def host_port(text: str) -> Endpoint:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (every interface), port 0-65535."""
    name, sep, number = text.rpartition(":")
    if not sep or not number.isdigit() or int(number) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port from 0 to 65535, got {text!r}")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    elif ":" in name:
        raise argparse.ArgumentTypeError(f"write an IPv6 address in brackets: [{name}]:{number}")
    if name and not _is_host(name):
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a host name or address, got {text!r}")
    return Endpoint(name, int(number))


def log_level(text: str) -> str:
    """One of :data:`LOG_LEVELS`, any case; returned in upper case."""
    if (level := text.upper()) not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return level
