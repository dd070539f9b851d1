"""The content store: the full text of every completed phase.

Everything that consumes a result (a later expert's context, a debate, the
synthesis, the API) reads it here, through :func:`read_texts` — never from a
phase's short summary.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from storage.db import Database
from storage.models import Content, Phase


def read_texts(db: Database, phase_ids: Sequence[str]) -> dict[str, str]:
    """Full text of each completed phase in ``phase_ids`` (phase id -> text)."""
    if not phase_ids:
        return {}
    with db.transaction() as s:
        rows = s.execute(select(Content.phase_id, Content.text).where(Content.phase_id.in_(phase_ids)))
        return {pid: text for pid, text in rows}


def read_text(db: Database, plan_id: str, key: str) -> str | None:
    with db.transaction() as s:
        return s.scalar(select(Content.text).join(Phase, Phase.id == Content.phase_id)
                        .where(Phase.plan_id == plan_id, Phase.key == key))


def count_for_plan(db: Database, plan_id: str) -> dict[str, int]:
    """Content rows per phase id (a completed phase has exactly one)."""
    with db.transaction() as s:
        rows = s.execute(select(Content.phase_id).where(Content.plan_id == plan_id))
        out: dict[str, int] = {}
        for (pid,) in rows:
            out[pid] = out.get(pid, 0) + 1
        return out
