"""usage cost: what each model call cost, priced when it was made

- ``usage.cost_usd`` (float, nullable): the call's tokens at its model's price in the
  operator's registry (``price: {input, output}``, US dollars per million tokens) at the time
  of the call, so a later change of price does not rewrite what was spent. NULL for a model
  without a price (every row written before this revision, and the offline model unless priced).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 08:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.add_column(sa.Column("cost_usd", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("cost_usd")
