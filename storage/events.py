"""The event outbox. Ids are a global, increasing sequence: watchers replay from
the last id they saw (SSE ``Last-Event-ID``)."""

from __future__ import annotations

from sqlalchemy import select

from storage.db import Database
from storage.models import Event
from storage.records import EventRecord, snapshot


def list_events(db: Database, plan_id: str, *, after: int = 0, limit: int = 1000) -> list[EventRecord]:
    with db.transaction() as s:
        rows = s.scalars(select(Event).where(Event.plan_id == plan_id, Event.id > after)
                         .order_by(Event.id).limit(limit))
        return [snapshot(EventRecord, r) for r in rows]


def append_event(db: Database, plan_id: str, type: str, data: dict[str, object], *,
                 phase_key: str | None = None) -> None:
    with db.transaction() as s:
        s.add(Event(plan_id=plan_id, phase_key=phase_key, type=type, data=data))
