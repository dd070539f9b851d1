"""forks: contents by reference, what each phase was sent, and a fork's source

- ``phases.content_id`` (FK ``contents.id``, no cascade; indexed): a completed phase's text is
  the content row it points at. Filled from ``contents.phase_id`` for every stored result, then
  ``contents`` loses ``plan_id``, ``phase_id`` and ``attempt``: a content row belongs to no single
  plan any more — a what-if fork's copied phases point at the contents of the plan they were
  forked from — and retention deletes one only once no phase references it.
- ``contents.sha256``: the SHA-256 of the text (UTF-8), computed for every stored row.
- ``phases.sent_hash``: the hash of what the phase was sent (``orchestrator.plan.fingerprint``),
  stored by the completing write; NULL for phases completed before this migration (a fork never
  copies those: it cannot know what they were sent).
- ``phases.reused_from``: in a fork, the plan a copied phase came from.
- ``plans.forked_from``, ``plans.fork_phase``: a fork's source plan and the phase it runs anew from.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-10 10:00:00
"""

from __future__ import annotations

import hashlib
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BATCH = 1000


def upgrade() -> None:
    bind = op.get_bind()
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("forked_from", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("fork_phase", sa.String(length=120), nullable=True))
    with op.batch_alter_table("contents") as batch:
        batch.add_column(sa.Column("sha256", sa.String(length=64), nullable=True))
    with op.batch_alter_table("phases") as batch:
        batch.add_column(sa.Column("content_id", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("sent_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("reused_from", sa.String(length=36), nullable=True))
    op.execute("UPDATE phases SET content_id = (SELECT c.id FROM contents c WHERE c.phase_id = phases.id)")
    if bind.dialect.name == "postgresql":
        op.execute("UPDATE contents SET sha256 = encode(sha256(convert_to(text, 'UTF8')), 'hex')")
    else:  # SQLite has no SHA-256: computed here, a batch at a time
        _hash_in_python(bind)
    with op.batch_alter_table("contents") as batch:
        batch.drop_index("ix_contents_plan_id")
        batch.drop_constraint("uq_contents_phase_id", type_="unique")
        batch.drop_constraint("fk_contents_phase_id_phases", type_="foreignkey")
        batch.drop_constraint("fk_contents_plan_id_plans", type_="foreignkey")
        batch.drop_column("phase_id")
        batch.drop_column("plan_id")
        batch.drop_column("attempt")
        batch.alter_column("sha256", existing_type=sa.String(length=64), nullable=False)
    with op.batch_alter_table("phases") as batch:
        batch.create_foreign_key("fk_phases_content_id_contents", "contents", ["content_id"], ["id"])
        batch.create_index("ix_phases_content_id", ["content_id"])


def _hash_in_python(bind: sa.engine.Connection) -> None:
    after = ""
    while True:
        rows = bind.execute(sa.text("SELECT id, text FROM contents WHERE id > :after ORDER BY id LIMIT :n"),
                            {"after": after, "n": BATCH}).all()
        if not rows:
            return
        bind.execute(sa.text("UPDATE contents SET sha256 = :h WHERE id = :id"),
                     [{"id": r.id, "h": hashlib.sha256(r.text.encode()).hexdigest()} for r in rows])
        after = rows[-1].id


def downgrade() -> None:
    """Back to one content row per completed phase: a content shared by several phases (a fork's
    copies) is written again for each of them, and one no phase references is dropped."""
    bind = op.get_bind()
    with op.batch_alter_table("contents") as batch:
        batch.add_column(sa.Column("plan_id", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("phase_id", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=True))
    owners = bind.execute(sa.text("SELECT p.id, p.plan_id, p.attempt, p.content_id FROM phases p "
                                  "WHERE p.content_id IS NOT NULL ORDER BY p.content_id, p.id")).all()
    claimed: set[str] = set()
    for phase_id, plan_id, attempt, content_id in owners:
        if content_id not in claimed:
            claimed.add(content_id)
            bind.execute(sa.text("UPDATE contents SET plan_id = :plan, phase_id = :phase, attempt = :a "
                                 "WHERE id = :c"), {"plan": plan_id, "phase": phase_id, "a": attempt, "c": content_id})
        else:
            bind.execute(sa.text("INSERT INTO contents (id, plan_id, phase_id, attempt, text, chars, sha256, "
                                 "created_at) SELECT :id, :plan, :phase, :a, text, chars, sha256, created_at "
                                 "FROM contents WHERE id = :c"),
                         {"id": str(uuid.uuid4()), "plan": plan_id, "phase": phase_id, "a": attempt, "c": content_id})
    with op.batch_alter_table("phases") as batch:
        batch.drop_index("ix_phases_content_id")
        batch.drop_constraint("fk_phases_content_id_contents", type_="foreignkey")
        batch.drop_column("reused_from")
        batch.drop_column("sent_hash")
        batch.drop_column("content_id")
    op.execute("DELETE FROM contents WHERE phase_id IS NULL")
    with op.batch_alter_table("contents") as batch:
        batch.alter_column("plan_id", existing_type=sa.String(length=36), nullable=False)
        batch.alter_column("phase_id", existing_type=sa.String(length=36), nullable=False)
        batch.alter_column("attempt", existing_type=sa.Integer(), nullable=False)
        batch.drop_column("sha256")
        batch.create_foreign_key("fk_contents_phase_id_phases", "phases", ["phase_id"], ["id"], ondelete="CASCADE")
        batch.create_foreign_key("fk_contents_plan_id_plans", "plans", ["plan_id"], ["id"], ondelete="CASCADE")
        batch.create_unique_constraint("uq_contents_phase_id", ["phase_id"])
        batch.create_index("ix_contents_plan_id", ["plan_id"])
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("fork_phase")
        batch.drop_column("forked_from")
