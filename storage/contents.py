"""The content store: the full text of every completed phase, by reference.

A completed phase points at its content (``phases.content_id``): the row its completing write
stored, or — in a what-if fork — the row its source phase stored, shared, never copied. A
content belongs to no single plan; retention deletes it once no phase references it
(:mod:`storage.retention`).

Everything that consumes a result reads the content row, never a phase's short
summary: a later expert's context, a debate and the synthesis get their inputs' full
texts in the claim (the inputs SELECT joins ``contents``, :mod:`storage.sql.base`);
the API and the client read them here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select

from storage.db import Database
from storage.models import Content, Phase


def read_text(db: Database, plan_id: str, key: str) -> str | None:
    with db.transaction() as s:
        return s.scalar(select(Content.text).join(Phase, Phase.content_id == Content.id)
                        .where(Phase.plan_id == plan_id, Phase.key == key))


@dataclass(frozen=True)
class Stored:
    """A phase's content as stored: its row's id, its text's SHA-256 and the text."""

    content_id: str
    sha256: str
    text: str


def of_phases(db: Database, phase_ids: Sequence[str]) -> dict[str, Stored]:
    """The contents of these phases (phase id -> :class:`Stored`), one read; a phase without
    one (not completed) is absent."""
    if not phase_ids:
        return {}
    with db.transaction() as s:
        rows = s.execute(select(Phase.id, Content.id.label("cid"), Content.sha256, Content.text)
                         .join(Content, Content.id == Phase.content_id).where(Phase.id.in_(list(phase_ids))))
        return {r.id: Stored(r.cid, r.sha256, r.text) for r in rows}


def hashes(db: Database, plan_id: str) -> dict[str, tuple[str, str]]:
    """Each completed phase's content, by phase key: its row's id and its text's SHA-256 (what a
    comparison of two plans reads to tell a text that is shared, the same or different, without
    reading either)."""
    with db.transaction() as s:
        rows = s.execute(select(Phase.key, Content.id, Content.sha256).join(Content, Content.id == Phase.content_id)
                         .where(Phase.plan_id == plan_id))
        return {r.key: (r.id, r.sha256) for r in rows}
