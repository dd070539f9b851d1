"""hot path: plans.max_debates, phases.inputs, usage.counted derived

- ``plans.max_debates``: the debate limit, read in the completing transaction, so the
  stored spec can be immutable (workers cache it parsed); backfilled from the spec.
- ``phases.inputs``: the keys of every phase a phase depends on, directly or not, so a
  claim reads its inputs in one SELECT; backfilled from ``depends_on``.
- ``usage.counted`` is dropped: a row is its phase's cost iff its attempt is the attempt
  that completed the phase, which the phases table already says.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _closure(deps: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in deps:
        seen: set[str] = set()
        stack = list(deps[key])
        while stack:
            k = stack.pop()
            if k in seen or k not in deps:
                continue
            seen.add(k)
            stack.extend(deps[k])
        out[key] = sorted(seen)
    return out


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("max_debates", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("phases") as batch:
        batch.add_column(sa.Column("inputs", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("counted")

    conn = op.get_bind()
    plans = sa.table("plans", sa.column("id", sa.String), sa.column("spec", sa.JSON),
                     sa.column("max_debates", sa.Integer))
    phases = sa.table("phases", sa.column("id", sa.String), sa.column("plan_id", sa.String),
                      sa.column("key", sa.String), sa.column("depends_on", sa.JSON), sa.column("inputs", sa.JSON))
    for plan_id, spec in conn.execute(sa.select(plans.c.id, plans.c.spec)).all():
        limit = int((_json(spec) or {}).get("max_debates", 0) or 0)
        if limit:
            conn.execute(plans.update().where(plans.c.id == plan_id).values(max_debates=limit))
        rows = conn.execute(sa.select(phases.c.id, phases.c.key, phases.c.depends_on)
                            .where(phases.c.plan_id == plan_id)).all()
        deps = {key: list(_json(d) or []) for _, key, d in rows}
        closure = _closure(deps)
        for phase_id, key, _ in rows:
            if closure[key]:
                conn.execute(phases.update().where(phases.c.id == phase_id).values(inputs=closure[key]))


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.add_column(sa.Column("counted", sa.Boolean(), nullable=False, server_default=sa.false()))
    conn = op.get_bind()
    conn.execute(sa.text("UPDATE usage SET counted = EXISTS (SELECT 1 FROM phases p WHERE p.id = usage.phase_id "
                         "AND p.status = 'completed' AND p.attempt = usage.attempt)"))
    with op.batch_alter_table("phases") as batch:
        batch.drop_column("inputs")
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("max_debates")
