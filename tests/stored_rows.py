"""Readings of stored rows that only tests make (production code never needs them)."""

from __future__ import annotations

from sqlalchemy import func, select

from storage import Database
from storage.models import Content, Phase


def content_rows(db: Database, plan_id: str) -> dict[str, int]:
    """Content rows per phase id of the plan: a completed phase points at exactly one (its own,
    or in a fork its source's). Fails when some content row is referenced by no phase at all
    — a result written by an attempt that was fenced or rolled back, which must never be."""
    with db.transaction() as s:
        referenced = select(Phase.id).where(Phase.content_id == Content.id).exists()
        orphans = s.scalar(select(func.count()).select_from(Content).where(~referenced))
        assert orphans == 0, f"{orphans} content row(s) no phase references"
        rows = s.execute(select(Phase.id).where(Phase.plan_id == plan_id, Phase.content_id.is_not(None)))
        return {pid: 1 for (pid,) in rows}


def content_count(db: Database) -> int:
    """Every content row stored (what a fork must not add to for the phases it reuses)."""
    with db.transaction() as s:
        return int(s.scalar(select(func.count()).select_from(Content)) or 0)
