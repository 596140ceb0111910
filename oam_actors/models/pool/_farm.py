"""A farm of simulated phones on loopback, for demos, the simulator, benchmarks and tests."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self

import msgspec

from ..device import PhoneConfig, SimulatedPhone
from ._config import NANO_QUOTA, NANO_WINDOW_SECONDS, PoolConfigError

__all__ = ["DEMO_TIME_SCALE", "SimulatedFarm", "farm_phone_config"]

# Real seconds per phone second in demos: the 60 s BUSY window lasts 6 s, so a one-minute run
# shows the quota filling, refusing and freeing several times.
DEMO_TIME_SCALE = 0.1


def farm_phone_config(time_scale: float = DEMO_TIME_SCALE, **overrides: object) -> PhoneConfig:
    """A Pixel-like phone (36 generations per rolling 60 s, ~0.3 s to the first token, ~40 tokens
    a second), ``time_scale`` real seconds per phone second."""
    fields: dict[str, object] = {
        "quota_requests": NANO_QUOTA,
        "quota_window_s": NANO_WINDOW_SECONDS,
        "first_token_latency_s": 0.3,
        "tokens_per_s": 40.0,
        "time_scale": time_scale,
        **overrides,
    }
    return PhoneConfig(**fields)  # type: ignore[arg-type]


class SimulatedFarm:
    """``async with SimulatedFarm(4) as farm: farm.urls`` — simulated phones on ``host``.

    ``phones`` is a number of phones, each with ``config`` (default :func:`farm_phone_config`) and
    its own seed, or one config per phone. Enter and exit in the same task; the phones stop when
    the block ends.
    """

    def __init__(self, phones: int | Sequence[PhoneConfig], config: PhoneConfig | None = None, *,
                 host: str = "127.0.0.1") -> None:
        if isinstance(phones, int):
            base = config or farm_phone_config()
            phones = [msgspec.structs.replace(base, seed=base.seed + n) for n in range(phones)]
        if not phones:
            raise PoolConfigError("a farm needs at least one phone")
        self.phones = [SimulatedPhone(phone, host=host) for phone in phones]
        self._stack = AsyncExitStack()

    @property
    def urls(self) -> list[str]:
        return [phone.url for phone in self.phones]

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            for phone in self.phones:
                await stack.enter_async_context(phone)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()
