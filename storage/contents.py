"""The content store: the full text of every completed phase.

Everything that consumes a result reads the content row, never a phase's short
summary: a later expert's context, a debate and the synthesis get their inputs' full
texts in the claim (the inputs SELECT joins ``contents``, :mod:`storage.sql.base`);
the API and the client read them here.
"""

from __future__ import annotations

from sqlalchemy import select

from storage.db import Database
from storage.models import Content, Phase


def read_text(db: Database, plan_id: str, key: str) -> str | None:
    with db.transaction() as s:
        return s.scalar(select(Content.text).join(Phase, Phase.id == Content.phase_id)
                        .where(Phase.plan_id == plan_id, Phase.key == key))
