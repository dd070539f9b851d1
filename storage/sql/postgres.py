"""Postgres: the shared statements, folded into one statement per operation with
data-modifying CTEs.

- claim: the conditional UPDATE, the ``phase_started`` INSERT and the SELECT of the inputs
  with their full texts — one statement, run in autocommit (atomic on its own);
- completion (after the plan lock): the fenced UPDATE (which points the phase at its new
  content), the content INSERT (only if the UPDATE matched) and the ``phase_completed``
  INSERT with progress counted in the same snapshot — one statement.

The events are still made by their builders in :mod:`storage.event_shapes`: the builder is
called once, when the statement is built, with column expressions and bind parameters
for its values, and :func:`json_object` renders the dict it returns, keys in its order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    Integer,
    String,
    Text,
    bindparam,
    cast,
    func,
    insert,
    literal,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql import ColumnElement, Select

from storage import event_shapes
from storage.models import UTCDateTime, utcnow
from storage.read_models import EventRecord
from storage.sql.base import (
    CONTENTS,
    EVENTS,
    PHASE_FIELDS,
    PHASES,
    RESERVATIONS,
    USAGE,
    USAGE_VALUES,
    Claimed,
    Executor,
    Result,
    ShareCheck,
    Statements,
    phase_record,
    split_inputs,
)

_EVENT_COLUMNS = ["plan_id", "phase_key", "type", "data", "created_at"]


def sql(expression: Any) -> Any:
    """A column expression or bind parameter standing in for a value the statement knows."""
    return expression


class _Columns:
    """A phase's columns, standing in for its values in an event builder."""

    def __init__(self, c: Any) -> None:
        self.key: Any = c.key
        self.expert: Any = c.expert
        self.kind: Any = c.kind
        self.round: Any = c.round


def json_value(value: Any) -> ColumnElement[Any]:
    if isinstance(value, ColumnElement):
        return value
    if value is None:
        return null()
    if isinstance(value, bool):
        return literal(value, Boolean)
    if isinstance(value, int):
        return literal(value, Integer)
    if isinstance(value, float):
        return literal(value, Float)
    if isinstance(value, str):
        return literal(value, Text)
    return cast(literal(json.dumps(value), Text), JSON)


def json_object(data: Mapping[str, Any]) -> ColumnElement[Any]:
    """An event builder's data as a ``json_build_object`` (keys in the builder's order)."""
    args: list[ColumnElement[Any]] = []
    for key, value in data.items():
        args += [literal(key, String), json_value(value)]
    return func.json_build_object(*args, type_=JSON)


def _now(name: str = "now") -> Any:
    return bindparam(name, type_=UTCDateTime())


class PostgresStatements(Statements):
    folds = True
    autocommit = True

    def json_elements(self, column: ColumnElement[Any]) -> Any:
        return func.json_array_elements_text(column).table_valued("value")

    def insert(self, table: Any) -> Any:
        return pg_insert(table)

    @cached_property
    def _claim_fold(self) -> tuple[Select[Any], str]:
        return self._fold(None)

    def _fold(self, fleet: bool | None) -> tuple[Select[Any], str]:
        """The claim folded with its event and inputs; within fair share when ``fleet`` is not None."""
        key = ("fold", fleet)
        if key not in self._variants:
            self._variants[key] = self._build_fold(self.claim_statement(fleet))
        return self._variants[key]

    def _build_fold(self, claim: Any) -> tuple[Select[Any], str]:
        claimed = claim.cte("claimed")
        counts = (select(self.final_count().label("k"), func.count().label("n")).select_from(PHASES)
                  .where(PHASES.c.plan_id == select(claimed.c.plan_id).scalar_subquery()).cte("counts"))
        event = event_shapes.phase_started(_Columns(claimed.c), attempt=sql(claimed.c.attempt),
                                       worker=sql(bindparam("owner", type_=Text)), k=sql(counts.c.k),
                                       n=sql(counts.c.n))
        started = (insert(EVENTS)
                   .from_select(_EVENT_COLUMNS,
                                select(claimed.c.plan_id, json_value(event.phase_key), literal(event.type, String),
                                       json_object(event.data), _now())
                                .select_from(claimed.join(counts, true())))
                   .returning(EVENTS.c.id, EVENTS.c.data).cte("started"))
        inputs = self.inputs_of(claimed.c.plan_id, select(self.json_elements(claimed.c.inputs).c.value)).lateral("inp")
        statement = (select(*[claimed.c[name].label(f"p_{name}") for name in PHASE_FIELDS],
                            claimed.c.plan_notes, started.c.id.label("event_id"), started.c.data.label("event_data"),
                            *[inputs.c[name] for name in PHASE_FIELDS], inputs.c.text)
                     .select_from(claimed.join(started, true()).outerjoin(inputs, true()))
                     .order_by(inputs.c.position))
        return statement, event.type

    def claim(self, conn: Executor, phase_id: str, *, owner: str, now: datetime, lease: timedelta,
              share: ShareCheck | None = None) -> Claimed | None:
        statement, kind = self._claim_fold if share is None else self._fold(share.fleet_capped)
        rows = conn.execute(statement, {"phase_id": phase_id, "owner": owner, "now": now, "expires": now + lease,
                                        **(share.params() if share else {})}).all()
        if not rows:
            return None
        first = rows[0]._mapping
        phase = phase_record(first, "p_")
        stored = EventRecord(id=first["event_id"], plan_id=phase.plan_id, phase_key=phase.key, type=kind,
                             data=first["event_data"], created_at=now)
        inputs, texts = split_inputs([r for r in rows if r.id is not None])
        return Claimed(phase, stored, inputs, texts, list(first["plan_notes"] or []))

    @cached_property
    def _settle_fold(self) -> Any:
        released = (RESERVATIONS.delete().where(RESERVATIONS.c.id == bindparam("reservation"))
                    .returning(RESERVATIONS.c.id).cte("released"))
        # its time is a parameter: a column's Python default does not reach an INSERT with a CTE
        return (self.insert(USAGE).values({**{c: bindparam(c) for c in USAGE_VALUES}, "created_at": _now("u_now")})
                .on_conflict_do_nothing(index_elements=[USAGE.c.phase_id, USAGE.c.attempt, USAGE.c.seq])
                .add_cte(released))

    def settle_usage(self, conn: Executor, values: Mapping[str, Any], reservation: int) -> bool:
        """The usage row and the release of its reservation in one statement (a data-modifying
        CTE runs whether or not it is read): as many statements as a call without a budget."""
        res = conn.execute(self._settle_fold, {**values, "reservation": reservation, "u_now": utcnow()})
        return bool(res.rowcount)  # type: ignore[attr-defined]

    @cached_property
    def _complete_fold(self) -> tuple[Select[Any], str]:
        done = (self.finish_update(bindparam("r_plan", type_=String), bindparam("r_phase"), bindparam("r_attempt"),
                                   **self.completed_values())
                .returning(PHASES.c.id, PHASES.c.key, PHASES.c.expert, PHASES.c.kind, PHASES.c.round).cte("done"))
        plan_id = bindparam("r_plan", type_=String)
        # the content only from the fenced update's row: it exists iff the fence matched (the
        # phase's content_id, set by that update, is checked against it at the statement's end)
        stored = (insert(CONTENTS)
                  .from_select(["id", "text", "chars", "sha256", "created_at"],
                               select(bindparam("r_content", type_=String), bindparam("r_text", type_=Text),
                                      bindparam("r_chars", type_=Integer), bindparam("r_sha256", type_=String),
                                      _now("r_now")).select_from(done))
                  .returning(CONTENTS.c.id).cte("stored"))
        # the phase is still running in this statement's snapshot: it is the +1
        counts = (select((self.final_count() + 1).label("k"), func.count().label("n")).select_from(PHASES)
                  .where(PHASES.c.plan_id == plan_id).cte("counts"))
        event = event_shapes.phase_completed(
            _Columns(done.c), attempt=sql(bindparam("r_attempt", type_=Integer)),
            chars=sql(bindparam("r_chars", type_=Integer)),
            truncated=sql(bindparam("r_truncated", type_=Boolean)),
            fallback=sql(bindparam("r_fallback", type_=Boolean)),
            offloaded=sql(bindparam("r_offloaded", type_=Boolean)),
            summary=sql(bindparam("r_summary", type_=Text)), k=sql(counts.c.k), n=sql(counts.c.n))
        appended = (insert(EVENTS)
                    .from_select(_EVENT_COLUMNS,
                                 select(plan_id, json_value(event.phase_key), literal(event.type, String),
                                        json_object(event.data), _now("r_now"))
                                 .select_from(done.join(stored, true()).join(counts, true())))
                    .returning(EVENTS.c.id, EVENTS.c.phase_key, EVENTS.c.data).cte("appended"))
        return select(appended.c.id, appended.c.phase_key, appended.c.data), event.type

    def complete(self, conn: Executor, plan_id: str, r: Result,
                 now: datetime) -> tuple[EventRecord, int, int] | None:
        statement, kind = self._complete_fold
        row = conn.execute(statement, r.values(plan_id, now)).first()
        if row is None:
            return None
        data = dict(row.data)
        return (EventRecord(id=row.id, plan_id=plan_id, phase_key=row.phase_key, type=kind, data=data,
                            created_at=now), int(data["k"]), int(data["n"]))
