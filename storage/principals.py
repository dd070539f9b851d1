"""The principal aggregate: token holders with a tenant and scopes.

A token is shown once, by :func:`create`; only its SHA-256 is stored, and no function
here returns it again (:class:`PrincipalRecord` has no hash either). Several tokens of
one tenant can be valid at once, which is how a token is rotated: create the new one,
move clients over, revoke the old one. See :mod:`storage.identity` for the vocabulary.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from storage.db import Database
from storage.exceptions import NotFound
from storage.identity import (
    Principal,
    check_name,
    check_tenant,
    hash_matches,
    new_token,
    parse_scopes,
    principal_id_of,
    session_mac,
)
from storage.models import PrincipalRow, utcnow

#: ``last_used_at`` is refreshed at most this often (one write per minute, not per request).
TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class PrincipalRecord:
    """A principal as listed: everything but the token and its hash."""

    id: str
    name: str
    tenant: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def principal(self) -> Principal:
        return Principal(self.id, self.name, self.tenant, self.scopes)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "tenant": self.tenant, "scopes": list(self.scopes),
                "created_at": self.created_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
                "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None}


def _record(row: PrincipalRow) -> PrincipalRecord:
    return PrincipalRecord(row.id, row.name, row.tenant, tuple(row.scopes), row.created_at, row.revoked_at,
                           row.last_used_at)


def create(db: Database, *, tenant: str, scopes: list[str] | tuple[str, ...], name: str | None = None
           ) -> tuple[PrincipalRecord, str]:
    """A new principal and its token — the only time the token exists outside its holder.
    Raises ``ValueError`` for an unknown scope, a malformed tenant or name."""
    tenant = check_tenant(tenant)
    checked = parse_scopes(scopes)
    name = check_name(name if name is not None else f"{tenant} token")
    principal_id, token, digest = new_token()
    with db.transaction() as s:
        row = PrincipalRow(id=principal_id, name=name, tenant=tenant, scopes=list(checked), token_hash=digest,
                           created_at=utcnow())
        s.add(row)
        s.flush()
        return _record(row), token


def list_principals(db: Database, *, tenant: str | None = None) -> list[PrincipalRecord]:
    with db.transaction() as s:
        q = select(PrincipalRow).order_by(PrincipalRow.created_at, PrincipalRow.id)
        if tenant is not None:
            q = q.where(PrincipalRow.tenant == tenant)
        return [_record(r) for r in s.scalars(q)]


def revoke(db: Database, principal_id: str) -> PrincipalRecord:
    """Revoke a principal's token at once (idempotent: a second revoke keeps the first time)."""
    with db.transaction() as s:
        row = s.get(PrincipalRow, principal_id, with_for_update=True)
        if row is None:
            raise NotFound(f"no principal {principal_id!r}")
        if row.revoked_at is None:
            row.revoked_at = utcnow()
        return _record(row)


def is_active(db: Database, principal_id: str) -> bool:
    """The principal exists and its token was not revoked (what a long-lived stream re-checks)."""
    with db.statement() as conn:
        row = conn.execute(select(PrincipalRow.revoked_at).where(PrincipalRow.id == principal_id)).first()
    return row is not None and row.revoked_at is None


def authenticate(db: Database, token: str) -> Principal | None:
    """The principal a bearer token stands for, or None (malformed, unknown, revoked).
    Looked up by the id inside the token, then the hash compared in constant time."""
    principal_id = principal_id_of(token)
    if principal_id is None:
        return None
    with db.transaction() as s:
        row = s.get(PrincipalRow, principal_id)
        if row is None or row.revoked_at is not None or not hash_matches(token, row.token_hash):
            return None
        principal = _record(row).principal
        _touch(s, row)
        return principal


def authenticate_session(db: Database, principal_id: str, message: str, mac: str) -> Principal | None:
    """The principal a browser session stands for, or None (unknown, revoked, or a MAC its
    token's stored hash does not make: :func:`storage.identity.session_mac`, compared in
    constant time). The hash never leaves this function."""
    with db.transaction() as s:
        row = s.get(PrincipalRow, principal_id)
        if row is None or row.revoked_at is not None:
            return None
        if not hmac.compare_digest(session_mac(row.token_hash, message), mac):
            return None
        _touch(s, row)
        return _record(row).principal


def _touch(s: Any, row: PrincipalRow) -> None:
    """Refresh ``last_used_at`` at most every :data:`TOUCH_EVERY`."""
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at >= TOUCH_EVERY:
        s.execute(update(PrincipalRow).where(PrincipalRow.id == row.id).values(last_used_at=now))
