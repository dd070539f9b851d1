"""The eval aggregate: the stored record of an evaluation, created once per (tenant, name).

An eval's record is immutable, like a plan's spec: :func:`create_eval` stores it, or returns
the one already stored under that name when it is the same record, and refuses with
:class:`Conflict` a different record under a name that is taken (two runs of one name must
measure the same thing, or a resumed eval would mix two experiments). The eval's plans are
ordinary plans (:mod:`storage.plans`), found by their ``eval=<name>`` label.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from storage.db import Database
from storage.exceptions import Conflict, NotFound
from storage.identity import DEFAULT_TENANT
from storage.models import EvalRow, utcnow

MAX_LISTED = 500


@dataclass(frozen=True)
class EvalRecord:
    id: str
    tenant: str
    name: str
    spec: dict[str, Any]
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "name": self.name, "spec": self.spec,
                "created_at": self.created_at.isoformat()}


@dataclass(frozen=True)
class EvalSummary:
    """An eval as listed: everything but its spec (which may hold thousands of items)."""

    id: str
    tenant: str
    name: str
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "name": self.name, "created_at": self.created_at.isoformat()}


@dataclass(frozen=True)
class EvalCreated:
    """What :func:`create_eval` did: the record, and whether this call stored it."""

    eval: EvalRecord
    created: bool


def _record(row: EvalRow) -> EvalRecord:
    return EvalRecord(row.id, row.tenant, row.name, dict(row.spec), row.created_at)


def create_eval(db: Database, *, name: str, spec: dict[str, Any], tenant: str = DEFAULT_TENANT) -> EvalCreated:
    """Store the eval ``name`` of ``tenant`` with ``spec``; idempotent: the same spec again
    returns the stored record (``created`` False), another spec is a :class:`Conflict`, also
    when two creations race (the unique (tenant, name) decides, the loser compares)."""
    existing = _by_name(db, tenant, name)
    if existing is not None:
        return EvalCreated(_same_or_conflict(existing, spec), False)
    try:
        with db.transaction() as s:
            row = EvalRow(id=str(uuid.uuid4()), tenant=tenant, name=name, spec=spec, created_at=utcnow())
            s.add(row)
            s.flush()
            created = _record(row)
    except Conflict:
        existing = _by_name(db, tenant, name)
        if existing is None:
            raise
        return EvalCreated(_same_or_conflict(existing, spec), False)
    return EvalCreated(created, True)


def _same_or_conflict(existing: EvalRecord, spec: dict[str, Any]) -> EvalRecord:
    if existing.spec != spec:
        differ = sorted(k for k in set(existing.spec) | set(spec) if existing.spec.get(k) != spec.get(k))
        raise Conflict(f"eval {existing.name!r} already exists with a different spec (they differ in "
                       f"{', '.join(differ) or 'their contents'}): give this one another name")
    return existing


def _by_name(db: Database, tenant: str, name: str) -> EvalRecord | None:
    with db.transaction() as s:
        row = s.scalar(select(EvalRow).where(EvalRow.tenant == tenant, EvalRow.name == name))
        return _record(row) if row is not None else None


def get_eval(db: Database, name: str, *, tenant: str | None) -> EvalRecord:
    """The eval ``name`` of ``tenant``; with ``tenant`` None (an admin, the operator) of any
    tenant, and a name used in several tenants is a :class:`Conflict` naming them."""
    q = select(EvalRow).where(EvalRow.name == name)
    if tenant is not None:
        q = q.where(EvalRow.tenant == tenant)
    with db.transaction() as s:
        rows = s.scalars(q.order_by(EvalRow.tenant).limit(2)).all()
        if not rows:
            raise NotFound(f"no eval named {name!r}")
        if len(rows) > 1:
            raise Conflict(f"eval {name!r} exists in several tenants ({', '.join(r.tenant for r in rows)}, …): "
                           "ask with a tenant's token")
        return _record(rows[0])


def list_evals(db: Database, *, tenant: str | None, limit: int = 100) -> list[EvalSummary]:
    """The evals of ``tenant`` (None: every tenant's), newest first, at most ``limit``."""
    limit = max(1, min(limit, MAX_LISTED))
    q = select(EvalRow.id, EvalRow.tenant, EvalRow.name, EvalRow.created_at)
    if tenant is not None:
        q = q.where(EvalRow.tenant == tenant)
    q = q.order_by(EvalRow.created_at.desc(), EvalRow.id.desc()).limit(limit)
    with db.transaction() as s:
        return [EvalSummary(*row) for row in s.execute(q).all()]
