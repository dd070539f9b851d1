"""events in plan order: one plan's events commit in the order of their ids

A watcher follows a plan's events by id (``id > last``, SSE ``Last-Event-ID``). Ids come
from one sequence, taken at insert, so two transactions of one plan could commit out of id
order (two claims of one round at the same moment), and a watcher that had read the later
id moved past the earlier one for good.

On Postgres a ``BEFORE INSERT`` trigger on ``events`` now locks the plan's row (``FOR NO KEY
UPDATE``: what an ``UPDATE plans`` takes; a no-op when the transaction holds it already) and
only then takes the event's id from the sequence. The lock lasts until the transaction ends,
so a second transaction of the same plan gets its ids after the first has committed (or
rolled back). SQLite has one writer at a time: its ids are already in commit order.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03 19:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


PG_FUNCTION = """
CREATE FUNCTION conclave_event_in_plan_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM plans WHERE id = NEW.plan_id FOR NO KEY UPDATE;
    NEW.id := nextval('events_id_seq');
    RETURN NEW;
END $$"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(PG_FUNCTION)
    op.execute("CREATE TRIGGER events_in_plan_order BEFORE INSERT ON events "
               "FOR EACH ROW EXECUTE FUNCTION conclave_event_in_plan_order()")
    # the trigger is the one place an id is taken: a default would spend a value before the lock
    op.execute("ALTER TABLE events ALTER COLUMN id DROP DEFAULT")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE events ALTER COLUMN id SET DEFAULT nextval('events_id_seq')")
    op.execute("DROP TRIGGER events_in_plan_order ON events")
    op.execute("DROP FUNCTION conclave_event_in_plan_order()")
