"""verdicts: the machine-readable part of a phase's result

- ``phases.verdict`` (JSON, nullable): an expert's verdict (answer, confidence, reason), the
  decision phase's tally, or the chair's stated answer, written by the completing update
  (``orchestrator.deliberation``). Phases of plans that declare no ``answer:`` keep NULL.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("phases") as batch:
        batch.add_column(sa.Column("verdict", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("phases") as batch:
        batch.drop_column("verdict")
