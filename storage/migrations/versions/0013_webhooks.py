"""webhooks: tenants' endpoints and the outbox of their deliveries

- ``webhook_endpoints`` (id, tenant, url, events, description, secret_version,
  previous_valid_until, created_by, created_at, rotated_at): where a tenant's events go.
  No secret: it is derived from the operator's key wherever it is needed.
- ``webhook_deliveries``: one row per (endpoint, event), unique, with a copy of the event.
- A trigger on ``events`` (per dialect, like 0003's search structures, and likewise outside
  the models' metadata) writes those rows in the transaction that inserts the event: for an
  event of a deliverable type, one row per endpoint of the plan's tenant that subscribes to
  that type (or to ``*``). The trigger's ``WHEN`` leaves every other event alone, so the hot
  path (phase_started, phase_completed, …) sends no statement and runs no function for it.

On Postgres the endpoints are read ``FOR KEY SHARE``: an endpoint deleted while the event's
transaction inserts is either waited for or skipped, never a foreign-key error in the
transaction that finishes a plan.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import storage.models

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

#: The event types a webhook may receive (``storage.webhook_outbox.EVENTS``, as of this migration).
DELIVERABLE = ("input_requested", "awaiting_approval", "plan_finished")
_TYPES = ", ".join(f"'{t}'" for t in DELIVERABLE)

_COLUMNS = ("id, endpoint_id, tenant, plan_id, task_id, event_id, event_type, phase_key, data, occurred_at, "
            "status, attempts, next_attempt_at, created_at")

PG_FUNCTION = f"""
CREATE FUNCTION conclave_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries ({_COLUMNS})
    SELECT replace(gen_random_uuid()::text, '-', ''), e.id, e.tenant, NEW.plan_id, p.task_id, NEW.id, NEW.type,
           NEW.phase_key, NEW.data, NEW.created_at, 'pending', 0, NEW.created_at, NEW.created_at
    FROM webhook_endpoints e JOIN plans p ON p.id = NEW.plan_id
    WHERE e.tenant = p.tenant AND (e.events::jsonb ? NEW.type OR e.events::jsonb ? '*')
    FOR KEY SHARE OF e;
    RETURN NULL;
END
$$
"""

PG_TRIGGER = f"""
CREATE TRIGGER webhook_outbox AFTER INSERT ON events FOR EACH ROW
WHEN (NEW.type IN ({_TYPES})) EXECUTE FUNCTION conclave_webhook_outbox()
"""

SQLITE_TRIGGER = f"""
CREATE TRIGGER webhook_outbox AFTER INSERT ON events WHEN NEW.type IN ({_TYPES})
BEGIN
    INSERT INTO webhook_deliveries ({_COLUMNS})
    SELECT lower(hex(randomblob(16))), e.id, e.tenant, NEW.plan_id, p.task_id, NEW.id, NEW.type,
           NEW.phase_key, NEW.data, NEW.created_at, 'pending', 0, NEW.created_at, NEW.created_at
    FROM webhook_endpoints e JOIN plans p ON p.id = NEW.plan_id
    WHERE e.tenant = p.tenant
      AND EXISTS (SELECT 1 FROM json_each(e.events) j WHERE j.value = NEW.type OR j.value = '*');
END
"""


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(length=200), nullable=True),
        sa.Column("secret_version", sa.Integer(), nullable=False),
        sa.Column("previous_valid_until", storage.models.UTCDateTime(), nullable=True),
        sa.Column("created_by", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("created_at", storage.models.UTCDateTime(), nullable=False),
        sa.Column("rotated_at", storage.models.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_endpoints"),
    )
    op.create_index("ix_webhook_endpoints_tenant_created_at", "webhook_endpoints", ["tenant", "created_at", "id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("endpoint_id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("plan_id", sa.String(length=36), nullable=False),
        sa.Column("task_id", sa.String(length=200), nullable=True),
        sa.Column("event_id", BIG_ID, nullable=False),
        sa.Column("event_type", sa.String(length=40), nullable=False),
        sa.Column("phase_key", sa.String(length=120), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("occurred_at", storage.models.UTCDateTime(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", storage.models.UTCDateTime(), nullable=True),
        sa.Column("last_attempt_at", storage.models.UTCDateTime(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=300), nullable=True),
        sa.Column("delivered_at", storage.models.UTCDateTime(), nullable=True),
        sa.Column("created_at", storage.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoints.id"],
                                name="fk_webhook_deliveries_endpoint_id_webhook_endpoints", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], name="fk_webhook_deliveries_plan_id_plans",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_endpoint_event"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_plan_id", "webhook_deliveries", ["plan_id"])
    if op.get_context().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS webhook_outbox ON events" if op.get_context().dialect.name == "postgresql"
               else "DROP TRIGGER IF EXISTS webhook_outbox")
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS conclave_webhook_outbox()")
    op.drop_index("ix_webhook_deliveries_plan_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_webhook_endpoints_tenant_created_at", table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")
