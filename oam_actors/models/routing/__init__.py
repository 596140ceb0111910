"""Routing: phones first, cloud when it must. A :class:`RouterModel` is one
:class:`~oam_actors.agent.LanguageModel` over several backends (a device pool, proxy providers,
scripted), chosen per step by a :class:`RouteTable` (:mod:`._table`: the route file) and the
pure :mod:`._policy` (spill deadlines, cooldowns, spend caps)::

    table = load_routes("routes.toml")        # RouteError: one line naming the place
    router = RouterModel(table, {"phones": lambda: pool, "cloud": lambda: cloud})
"""

from ._policy import Cooldowns, SpendLedger, spill_seconds
from ._router import BackendUse, RouterModel, RouterStatistics, StepUse, TenantUse
from ._table import (
    PRIORITIES,
    WINDOWS,
    BackendRoute,
    Caps,
    Price,
    RouteError,
    RouteTable,
    TenantRoute,
    describe_routes,
    load_routes,
    parse_routes,
)

__all__ = [
    "PRIORITIES",
    "WINDOWS",
    "BackendRoute",
    "BackendUse",
    "Caps",
    "Cooldowns",
    "Price",
    "RouteError",
    "RouteTable",
    "RouterModel",
    "RouterStatistics",
    "SpendLedger",
    "StepUse",
    "TenantUse",
    "describe_routes",
    "load_routes",
    "parse_routes",
    "spill_seconds",
]
