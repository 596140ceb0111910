"""Bearer tokens and tenants of the network server (pure logic, no I/O).

Contract
--------
- ``--token NAME=SECRET`` gives tenant ``NAME`` the secret ``SECRET``; ``--token SECRET`` (no ``=``)
  gives it to the anonymous tenant (name ``""``). ``NAME`` is 1-64 of ``A-Z a-z 0-9 _ . -``;
  ``SECRET`` is not empty, has no white space and does not start with ``=``. A value with ``=``
  is always ``NAME=SECRET``, so a secret containing ``=`` (base64 padding) needs a name:
  ``alice=`` (empty secret), ``=s3cret`` (empty name) and ``abc==`` are refused rather than
  guessed at. Secrets are unique; :meth:`TokenTable.parse` raises ``ValueError`` saying what is
  wrong, without echoing the secret.
- :meth:`TokenTable.tenant` compares the offered token with every secret in constant time, so the
  answer's timing does not tell how much of a secret matched.
- :func:`check_auth_line` is the TCP handshake: the first message must be
  ``{"jsonrpc":"2.0","method":"auth","params":{"token":"…"}}`` (a request, answered
  ``{"tenant": name|null}``, or a notification, not answered). Anything else, or a wrong token,
  is answered ``-32600`` with ``data.auth`` ``"required"`` or ``"failed"``, and the connection closes.
- :func:`is_loopback` says whether a listen host is reachable from this machine only.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from ..addresses import is_loopback
from ..bridge import jsonrpc
from ..errors import ErrorCode, ProtocolError
from .stdio import LineTooLong

__all__ = [
    "ANONYMOUS",
    "AuthOutcome",
    "Tenant",
    "TokenTable",
    "bearer_token",
    "check_auth_line",
    "is_loopback",
]

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class Tenant(msgspec.Struct, frozen=True):
    """Who a connection speaks for; ``name == ""`` is the anonymous tenant."""

    name: str

    def to_wire(self) -> str | None:
        return self.name or None


ANONYMOUS = Tenant("")


class TokenTable:
    """Secrets and the tenants they name. Empty: no authentication."""

    def __init__(self, entries: Iterable[tuple[str, Tenant]] = ()) -> None:
        self._entries = [(secret.encode(), tenant) for secret, tenant in entries]

    @classmethod
    def parse(cls, values: Iterable[str]) -> TokenTable:
        """From ``--token`` values (see the module docstring); ``ValueError`` on a bad one."""
        entries: dict[str, Tenant] = {}
        for value in values:
            secret, tenant = _entry(value)
            if secret in entries:
                raise ValueError("the same secret is given twice")
            entries[secret] = tenant
        return cls(entries.items())

    def __bool__(self) -> bool:
        return bool(self._entries)

    def tenant(self, token: str | None) -> Tenant | None:
        """The tenant ``token`` names, or ``None``."""
        if token is None:
            return None
        offered = token.encode()
        found = None
        for secret, tenant in self._entries:  # no early exit: timing must not depend on the match
            if hmac.compare_digest(secret, offered):
                found = tenant
        return found


_PADDED = "a secret containing '=' (base64 padding) needs a NAME: NAME=SECRET"


def _entry(value: str) -> tuple[str, Tenant]:
    if "=" not in value:
        secret, tenant = value, ANONYMOUS
    else:
        name, _, secret = value.partition("=")
        if not _NAME.fullmatch(name):
            raise ValueError(f"NAME in NAME=SECRET must be 1-64 of A-Z a-z 0-9 _ . - ({_PADDED})")
        if secret.startswith("="):
            raise ValueError(f"the secret of {name!r} starts with '=' ({_PADDED})")
        tenant = Tenant(name)
    if not secret:
        raise ValueError(f"the secret of {tenant.name!r} is empty" if tenant.name else "a token must not be empty")
    if any(c.isspace() for c in secret):
        raise ValueError("a secret must not contain white space (clients send it in an HTTP header)")
    return secret, tenant


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else ``None``."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class AuthOutcome(msgspec.Struct, frozen=True):
    """What the first TCP line decided: ``tenant`` (``None``: refused; close after ``reply``),
    ``reply`` (a line to write, or ``None``), ``waiting`` (a blank line: read the next one)."""

    tenant: Tenant | None = None
    reply: bytes | None = None
    waiting: bool = False


def check_auth_line(line: bytes | LineTooLong, tokens: TokenTable) -> AuthOutcome:
    """Decide on one line read before authentication (see the module docstring)."""
    if isinstance(line, LineTooLong):
        return AuthOutcome(reply=jsonrpc.encode_error(None, line.to_error()))
    message = jsonrpc.decode(line)
    if message is None:
        return AuthOutcome(waiting=True)
    if isinstance(message, jsonrpc.Invalid):
        return AuthOutcome(reply=jsonrpc.encode_error(message.id, message.error))
    if isinstance(message, jsonrpc.Response):
        return AuthOutcome(reply=jsonrpc.encode_error(None, _auth_error("required")))
    request_id = message.id if isinstance(message, jsonrpc.Request) else None
    if message.method != "auth":
        return AuthOutcome(reply=jsonrpc.encode_error(request_id, _auth_error("required")))
    tenant = tokens.tenant(_token(message.params))
    if tenant is None:
        return AuthOutcome(reply=jsonrpc.encode_error(request_id, _auth_error("failed")))
    if request_id is None:
        return AuthOutcome(tenant=tenant)
    return AuthOutcome(tenant=tenant, reply=jsonrpc.encode_result(request_id, {"tenant": tenant.to_wire()}))


def _token(params: Any) -> str | None:
    token = params.get("token") if isinstance(params, dict) else None
    return token if isinstance(token, str) else None


def _auth_error(reason: str) -> ProtocolError:
    if reason == "required":
        text = 'Authentication required: the first message must be {"method":"auth","params":{"token":…}}.'
    else:
        text = "Authentication failed: the token is not valid."
    return ProtocolError(ErrorCode.INVALID_MESSAGE, text, auth=reason)
