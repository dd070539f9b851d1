"""fair share: held phases, a plan's priority, the tenants' turns

- ``phases.held_at``: set when a ready phase was refused because its tenant (or the fleet) had
  its share in flight; the phase waits in Postgres until a finishing phase or the sweep
  releases it (``storage.fairshare``). Partial index on the held phases only.
- ``phases.released_at``: when a release let a held phase go; only a released phase may take a
  slot while other phases wait held (a fresh one is held behind them).
- ``plans.priority`` (-2..2, default 0): higher first among a tenant's held phases.
- ``tenant_turns``: each tenant's pass in the weighted round-robin of releases.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03 12:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import storage.models

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("phases") as batch:
        batch.add_column(sa.Column("held_at", storage.models.UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("released_at", storage.models.UTCDateTime(), nullable=True))
    op.create_index("ix_phases_held_at", "phases", ["held_at"], postgresql_where=sa.text("held_at IS NOT NULL"),
                    sqlite_where=sa.text("held_at IS NOT NULL"))
    op.create_table(
        "tenant_turns",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("pass", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name="pk_tenant_turns"),
    )


def downgrade() -> None:
    op.drop_table("tenant_turns")
    op.drop_index("ix_phases_held_at", table_name="phases")
    with op.batch_alter_table("phases") as batch:
        batch.drop_column("released_at")
        batch.drop_column("held_at")
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("priority")
