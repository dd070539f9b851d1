"""Tables. The database is the only truth; everything else is derived from these rows.

The status vocabularies these rows store are :mod:`storage.status`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from storage.identity import DEFAULT_TENANT
from storage.status import DeliveryStatus, PhaseStatus, PlanStatus


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC, returns aware UTC — the same on Postgres and SQLite."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


# BIGINT autoincrement on Postgres, INTEGER PRIMARY KEY (rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Plan(Base):
    """A plan belongs to a tenant; its ``task_id`` is unique within that tenant only."""

    __tablename__ = "plans"
    __table_args__ = (
        UniqueConstraint("tenant", "task_id", name="uq_plans_tenant_task_id"),
        Index("ix_plans_tenant_created_at", "tenant", "created_at", "id"),  # the listing's keyset order
        Index("ix_plans_created_at", "created_at", "id"),  # an admin's listing, across tenants
        Index("ix_plans_tenant_status", "tenant", "status"),
        Index("ix_plans_finished_at", "finished_at", "id"),  # retention's order (storage.retention)
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), default=DEFAULT_TENANT, server_default=DEFAULT_TENANT)
    task_id: Mapped[str | None] = mapped_column(String(200))
    title: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), default=PlanStatus.RUNNING, index=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # Mutable settings live in columns, read by the transaction that needs them: the spec is
    # immutable once stored (workers cache it parsed, by plan id).
    max_debates: Mapped[int] = mapped_column(Integer, default=0)
    labels: Mapped[list[str]] = mapped_column(JSON, default=list, server_default="[]")
    # notes people sent to steer the meeting (``storage.steering``), in order: each phase that
    # starts later is given them, read by its claim in the same statement
    notes: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list, server_default="[]")
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    resume_owner: Mapped[str | None] = mapped_column(String(64))
    resume_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A what-if fork records its source: the plan it was forked from and the phase it runs
    # anew from (storage.forks). Plain values, no foreign key: the source may be deleted by
    # retention while the fork lives on (the contents it reuses are kept, by reference).
    forked_from: Mapped[str | None] = mapped_column(String(36))
    fork_phase: Mapped[str | None] = mapped_column(String(120))
    # Higher first among the tenant's held phases (storage.fairshare): -2..2, set at submit, patchable.
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Phase(Base):
    __tablename__ = "phases"
    __table_args__ = (
        UniqueConstraint("plan_id", "key", name="uq_phases_plan_key"),
        Index("ix_phases_plan_status", "plan_id", "status"),
        Index("ix_phases_status_due_at", "status", "due_at"),  # the deadline sweep (storage.seats)
        Index("ix_phases_content_id", "content_id"),  # retention: is a content still referenced?
        # fair share (storage.fairshare): the held phases, few, found without reading the others
        Index("ix_phases_held_at", "held_at", postgresql_where=text("held_at IS NOT NULL"),
              sqlite_where=text("held_at IS NOT NULL")),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(120))
    kind: Mapped[str] = mapped_column(String(20))
    expert: Mapped[str | None] = mapped_column(String(80))
    round: Mapped[int | None] = mapped_column(Integer)
    group_key: Mapped[str | None] = mapped_column(String(80))
    position: Mapped[int] = mapped_column(Integer)
    depends_on: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Keys of every phase this one depends on, directly or not: stored at expansion and
    # extended when a debate is inserted upstream, so a claim reads its inputs in one SELECT.
    inputs: Mapped[list[str]] = mapped_column(JSON, default=list)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(20), default=PhaseStatus.PENDING)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(120))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # a person's seat waiting for its answer (awaiting_input): when it ends by the plan's
    # missing_expert rule if nobody answered (storage.seats)
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    retries_requested: Mapped[int] = mapped_column(Integer, default=0)
    summary: Mapped[str | None] = mapped_column(Text)
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    # the machine-readable part of a completed result: an expert's verdict, the decision
    # phase's tally, the chair's stated answer (orchestrator.deliberation); None without one
    verdict: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))  # SQL NULL, not JSON null
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The full text of a completed phase, by reference: set by the completing write (a new
    # content row) or, in a fork, to the content its source phase stored (no new row). Not
    # ON DELETE CASCADE: retention deletes a content only once no phase references it.
    content_id: Mapped[str | None] = mapped_column(ForeignKey("contents.id"))
    # SHA-256 of what the phase was sent (orchestrator.plan.fingerprint), stored by the
    # completing write; a fork copies the phase only when its own hash for it is this one.
    sent_hash: Mapped[str | None] = mapped_column(String(64))
    # In a fork: the plan this completed phase was copied from (no attempt, no usage here).
    reused_from: Mapped[str | None] = mapped_column(String(36))
    # Fair share: set when a ready phase was refused because its tenant had its share of the fleet
    # in flight; it waits here, not in the broker, until a finishing phase or the sweep releases it.
    held_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # ... and when a release let it go: a released phase may take a slot while others wait; a
    # phase that was never held may not jump ahead of them (storage.fairshare)
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Content(Base):
    """A full text: the result of a completed phase, referenced by every phase that has it
    (``phases.content_id``) — the phase that wrote it and the forks that reuse it. It belongs
    to no single plan: it lives as long as some phase references it (:mod:`storage.retention`)."""

    __tablename__ = "contents"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    chars: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))  # of the text's UTF-8: an input's hash in a phase's sent_hash
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UsageRow(Base):
    """Tokens one model call spent, keyed by (phase, attempt, seq): writing it twice is a no-op.

    A row is its phase's cost iff its attempt is the attempt that completed the phase
    (derived by :func:`storage.usage.counted`, never stored); rows of attempts that died,
    were cancelled or lost the fence stay on record as waste.
    """

    __tablename__ = "usage"
    __table_args__ = (UniqueConstraint("phase_id", "attempt", "seq", name="uq_usage_call"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    phase_id: Mapped[str] = mapped_column(ForeignKey("phases.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    purpose: Mapped[str] = mapped_column(String(20))
    model: Mapped[str] = mapped_column(String(120))
    input_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(12))  # provider | estimated
    method: Mapped[str | None] = mapped_column(String(40))
    cost_usd: Mapped[float | None] = mapped_column(Float)  # priced at the call (the registry's price)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Reservation(Base):
    """A model call's worst case (tokens, dollars), held from before the call until its usage
    row is written — in the same transaction, which deletes it (:mod:`storage.spend`). Open
    rows are what is promised and not yet on record: a budget is the usage rows plus these.
    ``tenant`` is the plan's, so a tenant's monthly budget sums its open calls in one index."""

    __tablename__ = "reservations"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    phase_id: Mapped[str] = mapped_column(ForeignKey("phases.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float | None] = mapped_column(Float)  # None: the call's model has no price
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Event(Base):
    """Transactional outbox: written in the same transaction as the change it reports."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_plan_id_id", "plan_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    phase_key: Mapped[str | None] = mapped_column(String(120))
    type: Mapped[str] = mapped_column(String(40))
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PrincipalRow(Base):
    """A token holder. Only the SHA-256 of the token is stored (``storage.identity``)."""

    __tablename__ = "principals"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(80))
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    token_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Document(Base):
    """A briefing document, stored with its plan in the submitting transaction."""

    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("plan_id", "doc_id", name="uq_documents_plan_doc"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    doc_id: Mapped[str] = mapped_column(String(60))  # the slug a citation names: [doc_id:ordinal]
    position: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(String(300))
    format: Mapped[str] = mapped_column(String(12))  # markdown | text
    text: Mapped[str] = mapped_column(Text)
    length: Mapped[int] = mapped_column(Integer)  # UTF-16 code units
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Chunk(Base):
    """A citable passage of a document: ``text`` is the document's text from ``start_utf16``
    to ``end_utf16`` (UTF-16 code units, what browsers index by).

    Full-text search structures are dialect-specific and live outside this metadata
    (migration ``0003``): on Postgres a generated ``search`` tsvector column with a GIN
    index, on SQLite an FTS5 table ``chunks_fts`` kept in step by triggers.
    """

    __tablename__ = "chunks"
    __table_args__ = (UniqueConstraint("plan_id", "doc_id", "ordinal", name="uq_chunks_plan_doc_ordinal"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), index=True)
    doc_id: Mapped[str] = mapped_column(String(60))
    ordinal: Mapped[int] = mapped_column(Integer)
    start_utf16: Mapped[int] = mapped_column(Integer)
    end_utf16: Mapped[int] = mapped_column(Integer)
    heading_path: Mapped[list[str]] = mapped_column(JSON, default=list)
    text: Mapped[str] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)  # estimated


class EvalRow(Base):
    """An evaluation (``conclave eval``): its resolved spec — the items, the arms and each arm's
    plan template — stored once, so its report can be rebuilt from the database alone. The
    eval's plans are ordinary plans, labelled ``eval=<name>``; ``name`` is unique per tenant."""

    __tablename__ = "evals"
    __table_args__ = (
        UniqueConstraint("tenant", "name", name="uq_evals_tenant_name"),
        Index("ix_evals_tenant_created_at", "tenant", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class FleetState(Base):
    """A fleet-wide mark, one row per name (:mod:`storage.retention`): ``at`` is a moment,
    ``ref`` an id beside it (a keyset watermark is the pair)."""

    __tablename__ = "fleet_state"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ref: Mapped[str | None] = mapped_column(String(64))


class TenantTurn(Base):
    """Fair share's weighted round-robin (:mod:`storage.fairshare`): a tenant's ``pass``, which
    grows by 1/weight with each held phase of its released; the lowest waiting pass goes next."""

    __tablename__ = "tenant_turns"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    pass_: Mapped[float] = mapped_column("pass", Float, default=0.0)


class WebhookEndpoint(Base):
    """A tenant's webhook receiver (:mod:`storage.webhook_outbox`): where its plans' events of the
    types in ``events`` are POSTed, signed. No secret is stored: the signing secret is derived
    from the operator's key, the id and ``secret_version`` wherever it is needed."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (Index("ix_webhook_endpoints_tenant_created_at", "tenant", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[list[str]] = mapped_column(JSON)  # event types, or ["*"]: every deliverable type
    description: Mapped[str | None] = mapped_column(String(200))
    secret_version: Mapped[int] = mapped_column(Integer, default=1)  # bumped by a rotation
    previous_valid_until: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the old secret signs too until
    created_by: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))  # {id, name}, never a token
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    rotated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class WebhookDelivery(Base):
    """The webhook outbox: one row per (endpoint, event), written by the transaction that
    stores the event (migration 0013's trigger on ``events``), with a copy of what the event
    said, so trimming events never loses a delivery. ``next_attempt_at`` is when a courier
    may take it next — also the lease of the courier that holds it (:mod:`storage.webhook_outbox`)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_endpoint_event"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # what Conclave-Delivery says
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    tenant: Mapped[str] = mapped_column(String(64))
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    task_id: Mapped[str | None] = mapped_column(String(200))
    event_id: Mapped[int] = mapped_column(BigId)
    event_type: Mapped[str] = mapped_column(String(40))
    phase_key: Mapped[str | None] = mapped_column(String(120))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(String(12), default=DeliveryStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # None once final
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(300))  # our words, never the receiver's body
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


SEARCH_TABLE_PREFIX = "chunks_fts"  # SQLite FTS5 table and its shadow tables
SEARCH_COLUMN = "search"  # Postgres generated tsvector on chunks
SEARCH_INDEX = "ix_chunks_search"


def in_models(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic ``include_object``: the search structures created by migration 0003 are
    dialect-specific and deliberately not in the metadata; compare everything else."""
    if type_ == "table":
        return not (name or "").startswith(SEARCH_TABLE_PREFIX)
    if type_ == "column" and name == SEARCH_COLUMN:
        return getattr(getattr(obj, "table", None), "name", None) != Chunk.__tablename__
    return not (type_ == "index" and name == SEARCH_INDEX)
