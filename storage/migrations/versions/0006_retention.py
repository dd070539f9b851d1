"""retention: finished plans by when they finished, and the fleet's retention marks

- ``ix_plans_finished_at`` (finished_at, id): retention walks finished plans in the order
  they finished — the whole-plan deletion oldest first, the event trimming by keyset from
  its watermark — so a pass costs the same however many finished plans are kept.
- ``fleet_state``: one row per fleet-wide mark (``storage.retention``): when retention
  last ran, and the keyset watermarks of its event trimming.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import storage.models

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.create_index("ix_plans_finished_at", ["finished_at", "id"])
    op.create_table(
        "fleet_state",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("at", storage.models.UTCDateTime(), nullable=True),
        sa.Column("ref", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_fleet_state")),
    )


def downgrade() -> None:
    op.drop_table("fleet_state")
    with op.batch_alter_table("plans") as batch:
        batch.drop_index("ix_plans_finished_at")
