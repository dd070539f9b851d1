"""The webhook aggregate: a tenant's endpoints, and the outbox of their deliveries.

**Endpoints** belong to a tenant and name the event types they receive (:data:`EVENTS`, or
``*`` for every one of them, including types added later). No secret is stored: the
signing secret is derived from the operator's key, the endpoint's id and its
``secret_version`` (:mod:`orchestrator.webhooks.signing`); a rotation bumps the version
and may keep the previous one signing for a while (``previous_valid_until``).

**Deliveries** are written by the database itself, in the transaction that stores the
event: migration 0013's trigger on ``events`` inserts one row per endpoint of the plan's
tenant that subscribes to the event's type, unique per (endpoint, event). Whatever code
stores an event of a deliverable type — an ORM outbox, a folded statement of the hot path —
its deliveries exist iff it commits, and no caller sends a statement for them.

**The courier's side** (:func:`claim_due`, :func:`record_attempt`): a delivery is taken with
``FOR UPDATE SKIP LOCKED`` in a transaction that only moves its ``next_attempt_at`` past the
attempt's deadline (that is its lease) and counts the attempt, and commits before any HTTP
is sent; the outcome is written later, fenced by the attempt number. A courier killed
mid-delivery leaves the row pending: once its lease has passed, any courier takes it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update

from storage.db import Database
from storage.exceptions import CapacityExceeded, NotFound
from storage.locks import lock_key
from storage.models import WebhookDelivery, WebhookEndpoint, utcnow
from storage.status import DeliveryStatus

#: The event types a webhook may receive. Migration 0013's trigger fires for these only.
EVENTS = ("input_requested", "awaiting_approval", "plan_finished")
#: Subscribes to every type of :data:`EVENTS`, including types added later.
ALL = "*"
MAX_LISTED = 200
#: What an endpoint's signing secret starts with (``orchestrator.webhooks.signing`` derives it;
#: no row holds one): the shape log redaction looks for.
SECRET_PREFIX = "whsec_"


@dataclass(frozen=True)
class EndpointRecord:
    """An endpoint as stored: never a secret."""

    id: str
    tenant: str
    url: str
    events: tuple[str, ...]
    description: str | None
    secret_version: int
    previous_valid_until: datetime | None
    created_by: dict[str, Any] | None
    created_at: datetime
    rotated_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "url": self.url, "events": list(self.events),
                "description": self.description, "secret_version": self.secret_version,
                "previous_secret_valid_until": _iso(self.previous_valid_until), "created_by": self.created_by,
                "created_at": self.created_at.isoformat(), "rotated_at": _iso(self.rotated_at)}


@dataclass(frozen=True)
class DeliveryRecord:
    """A delivery as an operator sees it: what it is about and what became of it."""

    id: str
    endpoint_id: str
    event_id: int
    event_type: str
    plan_id: str
    task_id: str | None
    phase_key: str | None
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", DeliveryStatus(self.status))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "endpoint_id": self.endpoint_id, "event_id": self.event_id,
                "event_type": self.event_type, "plan_id": self.plan_id, "task_id": self.task_id,
                "phase": self.phase_key, "status": str(self.status), "attempts": self.attempts,
                "next_attempt_at": _iso(self.next_attempt_at), "last_attempt_at": _iso(self.last_attempt_at),
                "last_status_code": self.last_status_code, "last_error": self.last_error,
                "delivered_at": _iso(self.delivered_at), "created_at": self.created_at.isoformat()}


@dataclass(frozen=True)
class DeliveryPage:
    deliveries: list[DeliveryRecord]
    next_cursor: int | None  # the event id to pass as ``before`` for the next page; None: the last page


@dataclass(frozen=True)
class Due:
    """A delivery a courier took: everything its request is made of, and the attempt it is."""

    id: str
    attempt: int  # 1 for the first
    endpoint_id: str
    url: str
    secret_version: int
    previous_valid_until: datetime | None
    tenant: str
    plan_id: str
    task_id: str | None
    event_id: int
    event_type: str
    phase_key: str | None
    data: dict[str, Any]
    occurred_at: datetime
    created_at: datetime


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _endpoint(row: WebhookEndpoint) -> EndpointRecord:
    return EndpointRecord(row.id, row.tenant, row.url, tuple(row.events), row.description, row.secret_version,
                          row.previous_valid_until, row.created_by, row.created_at, row.rotated_at)


def _delivery(row: WebhookDelivery) -> DeliveryRecord:
    return DeliveryRecord(row.id, row.endpoint_id, row.event_id, row.event_type, row.plan_id, row.task_id,
                          row.phase_key, DeliveryStatus(row.status), row.attempts, row.next_attempt_at,
                          row.last_attempt_at, row.last_status_code, row.last_error, row.delivered_at, row.created_at)


def subscribes(events: Sequence[str], event_type: str) -> bool:
    """Whether an endpoint subscribed to ``events`` receives an event of ``event_type`` —
    what the trigger decides in SQL, said once in Python."""
    return event_type in EVENTS and (event_type in events or ALL in events)


# ------------------------------------------------------------------ endpoints


def create_endpoint(db: Database, *, tenant: str, url: str, events: Sequence[str], description: str | None,
                    created_by: dict[str, Any] | None, limit: int) -> EndpointRecord:
    """Store a new endpoint of ``tenant``; :class:`CapacityExceeded` when the tenant already
    has ``limit`` (counted under the tenant's lock, so racing creations cannot pass it)."""
    with db.transaction() as s:
        if db.dialect == "postgresql":
            s.execute(select(func.pg_advisory_xact_lock(lock_key(f"webhooks:{tenant}"))))
        held = s.scalar(select(func.count()).select_from(WebhookEndpoint).where(WebhookEndpoint.tenant == tenant))
        if (held or 0) >= limit:
            raise CapacityExceeded(f"tenant {tenant} has {held} webhook endpoints, the most it may have: "
                                   "delete one first")
        row = WebhookEndpoint(id=str(uuid.uuid4()), tenant=tenant, url=url, events=list(events),
                              description=description, secret_version=1, created_by=created_by, created_at=utcnow())
        s.add(row)
        s.flush()
        return _endpoint(row)


def _reached(endpoint_id: str, tenant: str | None) -> Any:
    q = select(WebhookEndpoint).where(WebhookEndpoint.id == endpoint_id)
    return q if tenant is None else q.where(WebhookEndpoint.tenant == tenant)


def get_endpoint(db: Database, endpoint_id: str, *, tenant: str | None) -> EndpointRecord:
    """The endpoint, if ``tenant`` reaches it (None: every tenant); another tenant's is :class:`NotFound`."""
    with db.transaction() as s:
        row = s.scalar(_reached(endpoint_id, tenant))
        if row is None:
            raise NotFound(f"no webhook endpoint {endpoint_id!r}")
        return _endpoint(row)


def list_endpoints(db: Database, *, tenant: str | None) -> list[EndpointRecord]:
    """The endpoints ``tenant`` reaches (None: every tenant's), oldest first."""
    q = select(WebhookEndpoint).order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)
    if tenant is not None:
        q = q.where(WebhookEndpoint.tenant == tenant)
    with db.transaction() as s:
        return [_endpoint(r) for r in s.scalars(q.limit(MAX_LISTED))]


def delete_endpoint(db: Database, endpoint_id: str, *, tenant: str | None) -> EndpointRecord:
    """Delete the endpoint and its deliveries: nothing more is sent to it (a delivery in flight
    finds its row gone and records nothing)."""
    with db.transaction() as s:
        row = s.scalar(_reached(endpoint_id, tenant).with_for_update())
        if row is None:
            raise NotFound(f"no webhook endpoint {endpoint_id!r}")
        record = _endpoint(row)
        s.execute(delete(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id)
                  .execution_options(synchronize_session=False))
        s.delete(row)
        return record


def rotate_secret(db: Database, endpoint_id: str, *, tenant: str | None,
                  previous_valid_until: datetime | None, now: datetime | None = None) -> EndpointRecord:
    """Bump the endpoint's secret version; the previous secret signs too until
    ``previous_valid_until`` (None: it stops at once)."""
    now = now or utcnow()
    with db.transaction() as s:
        row = s.scalar(_reached(endpoint_id, tenant).with_for_update())
        if row is None:
            raise NotFound(f"no webhook endpoint {endpoint_id!r}")
        row.secret_version += 1
        row.previous_valid_until = previous_valid_until
        row.rotated_at = now
        s.flush()
        return _endpoint(row)


def list_deliveries(db: Database, endpoint_id: str, *, tenant: str | None, status: DeliveryStatus | None = None,
                    limit: int = 50, before: int | None = None) -> DeliveryPage:
    """The endpoint's deliveries, newest event first, a page at a time (keyset on the event
    id, unique per endpoint: a page costs the same however many deliveries are kept)."""
    limit = max(1, min(limit, MAX_LISTED))
    with db.transaction() as s:
        if s.scalar(_reached(endpoint_id, tenant)) is None:
            raise NotFound(f"no webhook endpoint {endpoint_id!r}")
        q = select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint_id)
        if status is not None:
            q = q.where(WebhookDelivery.status == status)
        if before is not None:
            q = q.where(WebhookDelivery.event_id < before)
        rows = [_delivery(r) for r in s.scalars(q.order_by(WebhookDelivery.event_id.desc()).limit(limit + 1))]
    more = len(rows) > limit
    rows = rows[:limit]
    return DeliveryPage(rows, rows[-1].event_id if more else None)


# ------------------------------------------------------------------ the courier's side


def claim_due(db: Database, *, now: datetime, lease_until: datetime, limit: int) -> list[Due]:
    """Take up to ``limit`` pending deliveries due at ``now``, oldest due first, skipping rows
    another courier holds: each is counted as an attempt and leased until ``lease_until``
    (its ``next_attempt_at``), committed before this returns — the caller holds no
    connection while it sends them."""
    with db.transaction() as s:
        ids = list(s.scalars(
            select(WebhookDelivery.id)
            .where(WebhookDelivery.status == DeliveryStatus.PENDING, WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.next_attempt_at).limit(limit).with_for_update(skip_locked=True)))
        if not ids:
            return []
        s.execute(update(WebhookDelivery).where(WebhookDelivery.id.in_(ids))
                  .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=lease_until, last_attempt_at=now)
                  .execution_options(synchronize_session=False))
        rows = s.execute(select(WebhookDelivery, WebhookEndpoint.url, WebhookEndpoint.secret_version,
                                WebhookEndpoint.previous_valid_until)
                         .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
                         .where(WebhookDelivery.id.in_(ids))).all()
        return [Due(d.id, d.attempts, d.endpoint_id, url, version, previous, d.tenant, d.plan_id, d.task_id,
                    d.event_id, d.event_type, d.phase_key, dict(d.data), d.occurred_at, d.created_at)
                for d, url, version, previous in rows]


def record_attempt(db: Database, delivery_id: str, *, attempt: int, now: datetime, delivered: bool,
                   next_attempt_at: datetime | None, status_code: int | None, error: str | None) -> bool:
    """Write what attempt ``attempt`` came to: delivered; or failed, to be tried again at
    ``next_attempt_at`` (None: given up, ``failed``). Fenced: only while the row is pending at
    that attempt — a courier whose lease passed and whose row another took records nothing.
    True when it was written."""
    if delivered:
        values: dict[str, Any] = {"status": DeliveryStatus.DELIVERED, "delivered_at": now, "next_attempt_at": None}
    elif next_attempt_at is None:
        values = {"status": DeliveryStatus.FAILED, "next_attempt_at": None}
    else:
        values = {"next_attempt_at": next_attempt_at}
    values |= {"last_status_code": status_code, "last_error": None if error is None else error[:300]}
    with db.statement() as conn:
        res = conn.execute(update(WebhookDelivery)
                           .where(WebhookDelivery.id == delivery_id, WebhookDelivery.attempts == attempt,
                                  WebhookDelivery.status == DeliveryStatus.PENDING)
                           .values(**values))
        return bool(res.rowcount)
