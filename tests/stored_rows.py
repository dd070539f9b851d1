"""Readings of stored rows that only tests make (production code never needs them)."""

from __future__ import annotations

from sqlalchemy import select

from storage import Database
from storage.models import Content


def content_rows(db: Database, plan_id: str) -> dict[str, int]:
    """Content rows per phase id (a completed phase has exactly one)."""
    with db.transaction() as s:
        rows = s.execute(select(Content.phase_id).where(Content.plan_id == plan_id))
        out: dict[str, int] = {}
        for (pid,) in rows:
            out[pid] = out.get(pid, 0) + 1
        return out
