"""The event outbox. Ids are a global, increasing sequence: watchers replay from
the last id they saw (SSE ``Last-Event-ID``).

Every repository that changes state appends its events through an :class:`Outbox`
in the same transaction, and returns the records it stored (with their ids), so
the caller can publish exactly those after commit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from storage.db import Database
from storage.event_shapes import NewEvent
from storage.models import Event
from storage.read_models import EventRecord, snapshot


class Outbox:
    """The events appended in one transaction. :meth:`records` flushes them (one
    flush, at the end of the transaction's writes) and returns them as stored."""

    def __init__(self, session: Any, plan_id: str) -> None:
        self._session = session
        self._plan_id = plan_id
        self._rows: list[Event] = []

    def append(self, event: NewEvent) -> None:
        row = Event(plan_id=self._plan_id, phase_key=event.phase_key, type=event.type, data=event.data)
        self._session.add(row)
        self._rows.append(row)

    def records(self) -> tuple[EventRecord, ...]:
        if not self._rows:
            return ()
        self._session.flush()
        return tuple(snapshot(EventRecord, r) for r in self._rows)


def list_events(db: Database, plan_id: str, *, after: int = 0, limit: int = 1000) -> list[EventRecord]:
    with db.transaction() as s:
        rows = s.scalars(select(Event).where(Event.plan_id == plan_id, Event.id > after)
                         .order_by(Event.id).limit(limit))
        return [snapshot(EventRecord, r) for r in rows]


def last_event_id(db: Database, plan_id: str) -> int:
    """The id of the plan's latest stored event (0: none): where a watcher that has just
    read the plan's state starts following its events."""
    with db.transaction() as s:
        return int(s.scalar(select(func.max(Event.id)).where(Event.plan_id == plan_id)) or 0)


def append_event(db: Database, plan_id: str, event: NewEvent) -> EventRecord:
    with db.transaction() as s:
        outbox = Outbox(s, plan_id)
        outbox.append(event)
        return outbox.records()[0]


def last_of_type(db: Database, plan_id: str, event_type: str) -> EventRecord | None:
    """The plan's latest stored event of ``event_type`` (``ix_events_plan_id_id``), or None."""
    with db.transaction() as s:
        row = s.scalar(select(Event).where(Event.plan_id == plan_id, Event.type == event_type)
                       .order_by(Event.id.desc()).limit(1))
        return snapshot(EventRecord, row) if row is not None else None
