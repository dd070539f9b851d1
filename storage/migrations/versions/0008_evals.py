"""evals: the record of an evaluation (``conclave eval``)

- ``evals`` (id, tenant, name, spec, created_at): one row per evaluation, ``name`` unique
  per tenant; ``spec`` is the resolved spec (items, arms, each arm's plan template), so a
  report is rebuilt from the database alone. The eval's plans are ordinary plans, labelled
  ``eval=<name>`` and ``arm=<arm>``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "evals",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_evals"),
        sa.UniqueConstraint("tenant", "name", name="uq_evals_tenant_name"),
    )
    op.create_index("ix_evals_tenant_created_at", "evals", ["tenant", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_evals_tenant_created_at", table_name="evals")
    op.drop_table("evals")
