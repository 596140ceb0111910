"""Who may see the console: bearer tokens, and the sign-in cookie a browser gets for one (pure
logic, no I/O).

Contract
--------
- A request is let in by a valid ``Authorization: Bearer`` token (as ``/metrics``) or by a valid
  sign-in cookie; with no tokens configured every request is let in (a loopback dev server).
- :meth:`SignIns.issue` makes a cookie value for a tenant: its expiry, its name and an HMAC-SHA256
  of both under a key made when the server starts, so a cookie is worth nothing to another
  server process and the secret token itself never sits in the browser. :meth:`SignIns.tenant`
  checks one in constant time (``hmac.compare_digest``), and refuses an expired or altered one.
- :func:`cookie_header` is the ``Set-Cookie`` value: ``HttpOnly`` (no script reads it),
  ``SameSite=Strict`` (no other site's page sends it), ``Path=/console``. No ``Secure``: the
  console is served over plain HTTP (behind TLS, terminate at a proxy that adds it).
- :func:`same_origin` refuses a request a page of another origin made (the browser's ``Origin``
  header names it): WebSocket handshakes and POSTs are not bound by CORS, and another port of
  the same host is the same *site*, so ``SameSite`` alone does not stop it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from http.cookies import CookieError, SimpleCookie

from ...clock import Clock
from ..auth import ANONYMOUS, Tenant, TokenTable, bearer_token

__all__ = ["COOKIE_NAME", "MAX_AGE", "SignIns", "cookie_header", "same_origin"]

COOKIE_NAME = "oam_console"
MAX_AGE = 12 * 3600
"""Seconds a sign-in lasts."""

_PATH = "/console"


class SignIns:
    """The console's tokens and the cookies issued for them (see the module docstring)."""

    def __init__(self, tokens: TokenTable, clock: Clock, *, key: bytes | None = None, max_age: int = MAX_AGE) -> None:
        self.tokens = tokens
        self._clock = clock
        self._key = key or secrets.token_bytes(32)
        self._max_age = max_age

    @property
    def open(self) -> bool:
        """No tokens configured: everyone is let in."""
        return not self.tokens

    def token_tenant(self, token: str | None) -> Tenant | None:
        """The tenant a bearer token names (``ANONYMOUS`` when the console is open)."""
        return ANONYMOUS if self.open else self.tokens.tenant(token)

    def request_tenant(self, authorization: str | None, cookie: str | None) -> Tenant | None:
        """Who a request speaks for, from its ``Authorization`` and ``Cookie`` headers, or ``None``."""
        if self.open:
            return ANONYMOUS
        if (token := bearer_token(authorization)) is not None:
            return self.tokens.tenant(token)
        return self.tenant(_cookie_value(cookie))

    def issue(self, tenant: Tenant) -> str:
        """A cookie value signing ``tenant`` in for :data:`MAX_AGE` seconds from now."""
        payload = f"{int(self._clock.now()) + self._max_age}.{tenant.name}"
        return f"{payload}.{self._mac(payload)}"

    def tenant(self, value: str | None) -> Tenant | None:
        """The tenant a cookie value signs in, or ``None`` (missing, altered, expired)."""
        if not value or value.count(".") < 2:
            return None
        payload, _, mac = value.rpartition(".")
        if not hmac.compare_digest(self._mac(payload), mac):
            return None
        expiry, _, name = payload.partition(".")
        if not expiry.isdigit() or int(expiry) <= self._clock.now():
            return None
        return Tenant(name)

    def _mac(self, payload: str) -> str:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).hexdigest()

    def cookie(self, tenant: Tenant) -> str:
        """The ``Set-Cookie`` value signing ``tenant`` in."""
        return cookie_header(self.issue(tenant), self._max_age)


def cookie_header(value: str, max_age: int) -> str:
    """A ``Set-Cookie`` value for the console's cookie (``max_age`` 0: sign out)."""
    return f"{COOKIE_NAME}={value}; Path={_PATH}; Max-Age={max_age}; HttpOnly; SameSite=Strict"


def _cookie_value(header: str | None) -> str | None:
    if not header:
        return None
    try:
        jar = SimpleCookie(header)
    except CookieError:
        return None
    morsel = jar.get(COOKIE_NAME)
    return None if morsel is None else morsel.value


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a request's ``Origin`` (absent: not a browser's cross-origin request) is the
    console's own ``Host``."""
    if origin is None:
        return True
    scheme, _, authority = origin.partition("://")
    return scheme in ("http", "https") and host is not None and authority.lower() == host.lower()
