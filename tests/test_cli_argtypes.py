"""The command line's value checkers (oam_actors.cli.argtypes), in process."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest

from oam_actors.cli import argtypes
from oam_actors.cli.argtypes import Endpoint


@pytest.mark.parametrize(
    ("check", "text", "value"),
    [
        (argtypes.positive_int, "1", 1), (argtypes.positive_int, "64", 64),
        (argtypes.non_negative_int, "0", 0),
        (argtypes.positive_float, "0.5", 0.5), (argtypes.positive_float, "3", 3.0),
        (argtypes.non_negative_float, "0", 0.0),
        (argtypes.unit_interval, "0", 0.0), (argtypes.unit_interval, "1", 1.0), (argtypes.unit_interval, ".25", 0.25),
        (argtypes.port, "0", 0), (argtypes.port, "65535", 65535),
        (argtypes.host, "0.0.0.0", "0.0.0.0"), (argtypes.host, "[::1]", "::1"), (argtypes.host, "::1", "::1"),
        (argtypes.log_level, "info", "INFO"), (argtypes.log_level, "Debug", "DEBUG"),
        (argtypes.host_port, "127.0.0.1:0", Endpoint("127.0.0.1", 0)),
        (argtypes.host_port, "[::1]:9000", Endpoint("::1", 9000)),
        (argtypes.host_port, ":80", Endpoint("", 80)),
        (argtypes.host_port, "localhost:65535", Endpoint("localhost", 65535)),
    ],
)
def test_accepted(check: Callable[[str], Any], text: str, value: Any) -> None:
    assert check(text) == value


@pytest.mark.parametrize(
    ("check", "text", "allowed"),
    [
        (argtypes.positive_int, "0", "integer of at least 1"), (argtypes.positive_int, "-5", "integer of at least 1"),
        (argtypes.positive_int, "1.5", "integer of at least 1"), (argtypes.positive_int, "many", "integer"),
        (argtypes.non_negative_int, "-1", "integer of at least 0"),
        (argtypes.positive_float, "0", "greater than 0"), (argtypes.positive_float, "-1", "greater than 0"),
        (argtypes.positive_float, "nan", "greater than 0"), (argtypes.positive_float, "inf", "greater than 0"),
        (argtypes.non_negative_float, "-0.1", "at least 0"),
        (argtypes.unit_interval, "1.01", "from 0 to 1"),
        (argtypes.port, "65536", "0 to 65535"), (argtypes.port, "-1", "0 to 65535"),
        (argtypes.host, "", "host name"), (argtypes.host, "a b", "host name"),
        (argtypes.host_port, "127.0.0.1", "HOST:PORT"), (argtypes.host_port, "h:65536", "HOST:PORT"),
        (argtypes.host_port, "host:port", "HOST:PORT"), (argtypes.host_port, "h:-1", "HOST:PORT"),
        (argtypes.host_port, "::1:9000", "brackets"), (argtypes.host_port, "a b:1", "host name"),
        (argtypes.log_level, "LOUD", "DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ],
)
def test_refused_saying_what_is_allowed(check: Callable[[str], Any], text: str, allowed: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=allowed) as refused:
        check(text)
    assert repr(text) in str(refused.value) or "brackets" in str(refused.value)


def test_endpoint_text() -> None:
    assert [str(Endpoint("::1", 1)), str(Endpoint("", 2)), str(Endpoint("h", 3))] == ["[::1]:1", ":2", "h:3"]
