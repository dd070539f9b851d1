"""plan labels, and the index that lists a tenant's plans newest first

- ``plans.labels``: a JSON array of short strings a client tags a plan with (filtered by
  ``GET /v1/plans?label=…``, changed by ``PATCH``); backfilled from the spec.
- ``ix_plans_tenant_created_at`` becomes (tenant, created_at, id): the listing's keyset
  order, so a page costs the same however many plans a tenant has; ``ix_plans_created_at``
  (created_at, id) is an admin's, across tenants.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 09:00:00
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=False, server_default="[]"))
        batch.drop_index("ix_plans_tenant_created_at")
        batch.create_index("ix_plans_tenant_created_at", ["tenant", "created_at", "id"])
        batch.create_index("ix_plans_created_at", ["created_at", "id"])
    conn = op.get_bind()
    plans = sa.table("plans", sa.column("id", sa.String), sa.column("spec", sa.JSON), sa.column("labels", sa.JSON))
    for plan_id, spec in conn.execute(sa.select(plans.c.id, plans.c.spec)).all():
        labels = (_json(spec) or {}).get("labels") or []
        if labels:
            conn.execute(plans.update().where(plans.c.id == plan_id).values(labels=list(labels)))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_index("ix_plans_created_at")
        batch.drop_index("ix_plans_tenant_created_at")
        batch.create_index("ix_plans_tenant_created_at", ["tenant", "created_at"])
        batch.drop_column("labels")
