"""people at the table: a person's seat waits with a deadline; notes steer a meeting

- ``phases.due_at`` (nullable): when a person's seat (``awaiting_input``) ends by the plan's
  ``missing_expert`` rule if nobody answered; ``ix_phases_status_due_at`` (status, due_at)
  finds the seats past it without reading other phases (``storage.seats.expire``).
- ``plans.notes`` (JSON list, default ``[]``): the notes people sent to steer the meeting
  (``storage.steering``); a phase's claim reads them in the same statement.

The new statuses (``awaiting_input`` for a phase, ``awaiting_approval`` for a plan) fit the
existing ``status`` columns (``storage.status``).

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-10 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import storage.models

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("phases") as batch:
        batch.add_column(sa.Column("due_at", storage.models.UTCDateTime(), nullable=True))
    op.create_index("ix_phases_status_due_at", "phases", ["status", "due_at"])
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("notes", sa.JSON(), server_default="[]", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("notes")
    op.drop_index("ix_phases_status_due_at", table_name="phases")
    with op.batch_alter_table("phases") as batch:
        batch.drop_column("due_at")
