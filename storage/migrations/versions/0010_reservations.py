"""reservations: a model call's worst case, held from before the call until its usage row

- ``reservations`` (id, plan_id, phase_id, attempt, tenant, tokens, cost_usd, created_at): one
  row per model call in flight under a budget (a plan's ``budget`` or a tenant's monthly
  budget), inserted only if it fits, deleted in the transaction that writes the call's usage
  row (``storage.spend``). A row of an attempt that died is released when its phase is claimed
  again, and by the reconciler.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import storage.models

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("plan_id", sa.String(length=36), nullable=False),
        sa.Column("phase_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("created_at", storage.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["phase_id"], ["phases.id"], name="fk_reservations_phase_id_phases",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], name="fk_reservations_plan_id_plans", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_reservations"),
    )
    op.create_index("ix_reservations_plan_id", "reservations", ["plan_id"])
    op.create_index("ix_reservations_phase_id", "reservations", ["phase_id"])
    op.create_index("ix_reservations_tenant", "reservations", ["tenant"])


def downgrade() -> None:
    op.drop_index("ix_reservations_tenant", table_name="reservations")
    op.drop_index("ix_reservations_phase_id", table_name="reservations")
    op.drop_index("ix_reservations_plan_id", table_name="reservations")
    op.drop_table("reservations")
