"""Who is asking: principals, tenants, scopes and the token format. Pure: no database.

A *principal* is a token's holder: an id, a name, a tenant and scopes from a fixed list

    plans:read    read plans, their results and events
    plans:write   submit, resume, cancel, patch plans
    webhooks      register, list, rotate and delete the tenant's webhook endpoints, and read
                  their deliveries
    admin         everything above in every tenant, and /metrics

Scopes are independent (``plans:write`` does not imply ``plans:read``) except ``admin``,
which allows everything. A principal sees only its tenant's plans unless it is admin.
Plans created without a principal (embedded mode, the operator's CLI) belong to
:data:`DEFAULT_TENANT`.

Tokens look like ``conclave_<principal id>_<secret>``: the prefix makes a leaked token
recognisable (secret scanners, logs), the id makes lookup a primary-key read, and the
secret is 256 random bits from :mod:`secrets`. Only ``sha256(token)`` is stored; it is
compared in constant time. The token itself is shown once, at creation.

``CONCLAVE_API_TOKEN`` (one shared token for simple setups) is represented by
:func:`api_token_principal`; :func:`matches_api_token` compares in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

READ = "plans:read"
WRITE = "plans:write"
WEBHOOKS = "webhooks"
ADMIN = "admin"
SCOPES = (READ, WRITE, WEBHOOKS, ADMIN)

DEFAULT_TENANT = "default"
TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:@/-]{0,79}$")

TOKEN_PREFIX = "conclave_"
_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")

API_TOKEN_ID = "api-token"
API_TOKEN_NAME = "CONCLAVE_API_TOKEN"


def parse_scopes(values: Iterable[str]) -> tuple[str, ...]:
    """The scopes in ``values`` (de-duplicated, in the canonical order); raises
    ``ValueError`` naming an unknown one, or when there is none."""
    given = [str(v).strip() for v in values]
    unknown = [v for v in given if v not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope {unknown[0]!r} (known: {', '.join(SCOPES)})")
    if not given:
        raise ValueError(f"at least one scope is needed (known: {', '.join(SCOPES)})")
    return tuple(s for s in SCOPES if s in given)


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
        raise ValueError(f"tenant {tenant!r} must be 1-64 lower-case letters, digits, '_', '.' or '-'")
    return tenant


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(f"name {name!r} must be 1-80 letters, digits, spaces or _.:@/-")
    return name


@dataclass(frozen=True)
class Principal:
    id: str
    name: str
    tenant: str
    scopes: tuple[str, ...]

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.scopes

    def allows(self, scope: str) -> bool:
        return self.is_admin or scope in self.scopes

    @property
    def reach(self) -> str | None:
        """The tenant whose plans this principal sees; None: every tenant (admin)."""
        return None if self.is_admin else self.tenant

    def audit(self) -> dict[str, Any]:
        """What an audit event records: who, never the token."""
        return {"id": self.id, "name": self.name}


def new_token() -> tuple[str, str, str]:
    """A fresh (principal id, token, token hash)."""
    principal_id = secrets.token_hex(8)
    token = f"{TOKEN_PREFIX}{principal_id}_{secrets.token_urlsafe(32)}"
    return principal_id, token, token_hash(token)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def principal_id_of(token: str) -> str | None:
    """The principal id inside a well-formed token, else None (no lookup is made)."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        return None
    principal_id, sep, secret = token[len(TOKEN_PREFIX):].partition("_")
    if not sep or not _ID_RE.fullmatch(principal_id) or not _SECRET_RE.fullmatch(secret):
        return None
    return principal_id


def hash_matches(token: str, stored_hash: str) -> bool:
    return hmac.compare_digest(token_hash(token), stored_hash)


def session_mac(token_digest: str, message: str) -> str:
    """The MAC of a browser session's ``message`` (``orchestrator.api.session``), keyed by
    the stored SHA-256 of the token that opened it: a session dies with its token (revoked,
    or a different ``CONCLAVE_API_TOKEN``), and no other secret has to be shared by the
    API processes."""
    return hmac.new(token_digest.encode("ascii"), message.encode("utf-8"), hashlib.sha256).hexdigest()


def api_token_principal(scopes: Iterable[str] = (ADMIN,), tenant: str = DEFAULT_TENANT) -> Principal:
    """The principal ``CONCLAVE_API_TOKEN`` stands for (admin unless configured otherwise)."""
    return Principal(API_TOKEN_ID, API_TOKEN_NAME, check_tenant(tenant), parse_scopes(scopes))


def matches_api_token(presented: str, configured: str) -> bool:
    """Constant-time comparison of a presented bearer token with ``CONCLAVE_API_TOKEN``;
    an empty configured token matches nothing."""
    if not configured:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), configured.encode("utf-8"))
