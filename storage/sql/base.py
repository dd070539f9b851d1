"""The hot path's shared SQL, and each operation as plain statements in one transaction.

Every statement here is the same on Postgres and SQLite except the few building
blocks a dialect overrides (:meth:`Statements.json_elements`, :meth:`Statements.insert`).
:class:`~storage.sql.postgres.PostgresStatements` additionally folds whole operations
into single statements with the same pieces.

Statements are built once per :class:`Statements` (one per database) with bind
parameters, and executed with values: building and cache-keying SQLAlchemy constructs
costs more CPU than running them on a local Postgres.

What the pieces guarantee:

- the claim is ONE conditional UPDATE: the phase is pending (or running with an expired
  lease), it is no person's seat (a person answers that one: ``storage.seats``), its plan is
  running and not cancelled, and every direct dependency is complete (final, for a phase that
  tolerates missing inputs) — so a message that arrives before its inputs, after a cancel,
  for a final phase or for a seat changes nothing; it returns the plan's steering notes too,
  read in the same statement (what the phase, starting now, is given);
- the completing UPDATE is fenced by the attempt;
- the usage INSERT is idempotent per (phase, attempt, seq);
- no statement reads a plan's spec or every phase of a plan: inputs are read through the
  phase's stored transitive ``inputs`` (one indexed SELECT joined to their contents).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from sqlalchemy import (
    JSON,
    Integer,
    Row,
    String,
    and_,
    bindparam,
    case,
    false,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session
from sqlalchemy.sql import ColumnElement, Select, Update
from sqlalchemy.sql.expression import Exists

from storage import event_shapes
from storage.event_shapes import NewEvent
from storage.models import Base
from storage.read_models import EventRecord, PhaseRecord
from storage.status import GIVEN_UP, PHASE_FINAL, TIMED_OUT, PhaseStatus, PlanStatus

Executor = Session | Connection

PLANS = Base.metadata.tables["plans"]
PHASES = Base.metadata.tables["phases"]
CONTENTS = Base.metadata.tables["contents"]
USAGE = Base.metadata.tables["usage"]
EVENTS = Base.metadata.tables["events"]
RESERVATIONS = Base.metadata.tables["reservations"]

PHASE_FIELDS = tuple(f.name for f in fields(PhaseRecord))
USAGE_VALUES = ("plan_id", "phase_id", "attempt", "seq", "purpose", "model", "input_tokens", "output_tokens",
                "source", "method", "cost_usd")
_ABOUT = (PHASES.c.key, PHASES.c.expert, PHASES.c.kind, PHASES.c.round)


def phase_record(row: Any, prefix: str = "") -> PhaseRecord:
    """A phase record from a result row's mapping (columns named by field, after ``prefix``)."""
    return PhaseRecord(**{name: row[prefix + name] for name in PHASE_FIELDS})


#: The plan row's lock for a write of the plan: ``FOR NO KEY UPDATE`` on Postgres, the lock an
#: ``UPDATE plans`` takes (a worker's completion locks the plan with one). Every write of a plan
#: takes it before it touches a phase row, so two writes of a plan never wait on each other in
#: opposite orders; a claim takes it in its own statement, before its phase row. Inserting an
#: event takes it too (migration 0016's trigger), and only then the event's id: one plan's
#: events commit in the order of their ids, so a watcher following them by id misses none.
#: Not ``FOR UPDATE``, which also blocks the foreign-key check of every row inserted for the plan.
PLAN_LOCK = {"key_share": True}


def plan_first(*conditions: ColumnElement[bool]) -> Exists:
    """A condition of an ``UPDATE`` of phases that locks each one's plan row (:data:`PLAN_LOCK`)
    where ``conditions`` hold, before the statement locks the phase's row."""
    return (select(PLANS.c.id).where(PLANS.c.id == PHASES.c.plan_id, *conditions)
            .with_for_update(key_share=PLAN_LOCK["key_share"]).exists())


@dataclass(frozen=True)
class Claimed:
    """A claim as stored: the phase as it is now (running, its new attempt), the
    ``phase_started`` event, its transitive inputs in plan order with the full text
    of each completed one (phase id -> text), and the plan's steering notes as the claim
    read them (those sent before the phase started)."""

    phase: PhaseRecord
    event: EventRecord
    inputs: list[PhaseRecord]
    texts: dict[str, str]
    notes: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    """What a completing write stores besides the status (see :meth:`Statements.complete`)."""

    phase_id: str
    attempt: int
    content_id: str
    text: str
    summary: str
    truncated: bool
    fallback: bool
    offloaded: bool
    verdict: dict[str, Any] | None = None
    sent_hash: str | None = None  # what the phase was sent (orchestrator.plan.fingerprint)

    def values(self, plan_id: str, now: datetime) -> dict[str, Any]:
        """The bind parameters of the completing statements. Prefixed: an execution
        parameter named like a column of an UPDATE's table would become a SET value."""
        return {"r_plan": plan_id, "r_phase": self.phase_id, "r_attempt": self.attempt,
                "r_content": self.content_id, "r_text": self.text, "r_chars": len(self.text),
                "r_sha256": text_sha256(self.text), "r_summary": self.summary, "r_truncated": self.truncated,
                "r_fallback": self.fallback, "r_offloaded": self.offloaded, "r_verdict": self.verdict,
                "r_sent": self.sent_hash, "r_now": now}


def text_sha256(text: str) -> str:
    """A content's hash as ``contents.sha256`` stores it: SHA-256 of the text's UTF-8, in hex."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ShareCheck:
    """A claim within fair share (:mod:`storage.fairshare`): the phase's tenant, its limit of
    phases in flight (0: none) and the fleet's (0: none)."""

    tenant: str
    limit: int
    fleet: int = 0

    @property
    def fleet_capped(self) -> bool:
        return self.fleet > 0

    def params(self) -> dict[str, Any]:
        return {"share_tenant": self.tenant, "share_limit": self.limit or 2**31 - 1, "fleet_limit": self.fleet}


@dataclass(frozen=True)
class PlanLock:
    """The plan row, locked by the write that finishes one of its phases."""

    cancel_requested: bool
    max_debates: int
    held: bool = False  # some phase is held for its tenant's share (storage.fairshare), as the lock saw it


class Statements:
    """The shared SQL. ``folds``: whole operations are single statements (data-modifying
    CTEs); ``autocommit``: a one-statement unit needs no BEGIN/COMMIT."""

    folds = False
    autocommit = False

    # ------------------------------------------------------------ dialect building blocks

    def json_elements(self, column: ColumnElement[Any]) -> Any:
        """The elements of a JSON array of strings, as a table-valued function with a
        ``value`` column (correlated to ``column``'s row)."""
        raise NotImplementedError

    def insert(self, table: Any) -> Any:
        """The dialect's INSERT, which has ``on_conflict_do_nothing``."""
        raise NotImplementedError

    # ------------------------------------------------------------ shared expressions

    def ready(self, phase: Any = PHASES) -> ColumnElement[bool]:
        """Every direct dependency of ``phase``'s row is complete — or final, for a phase
        that tolerates missing inputs (a board's round summary), or a person's seat that ended
        unanswered under ``missing_expert: tolerate`` (:func:`orchestrator.plan.dag.absent`).
        Unknown keys never count."""
        dep = PHASES.alias("dep")
        deps = self.json_elements(phase.c.depends_on)
        tolerant = func.coalesce(phase.c.meta["tolerate_failed_deps"].as_boolean(), false())
        absent = and_(dep.c.status == PhaseStatus.FAILED, dep.c.error_code == TIMED_OUT,
                      dep.c.meta["missing_expert"].as_string() == "tolerate")
        usable = or_(dep.c.status == PhaseStatus.COMPLETED, absent, and_(tolerant, dep.c.status.in_(GIVEN_UP)))
        satisfied = (select(func.count()).select_from(dep)
                     .where(dep.c.plan_id == phase.c.plan_id, dep.c.key.in_(select(deps.c.value)), usable)
                     .scalar_subquery())
        return satisfied == func.json_array_length(phase.c.depends_on)

    def ready_since_cutoff(self, cutoff: datetime) -> ColumnElement[bool]:
        """A pending phase whose direct dependencies all became final before ``cutoff``
        (a phase without dependencies qualifies): it could have been claimed since."""
        dep = PHASES.alias("dep")
        deps = self.json_elements(PHASES.c.depends_on)
        settled = (select(func.count()).select_from(dep)
                   .where(dep.c.plan_id == PHASES.c.plan_id, dep.c.key.in_(select(deps.c.value)),
                          dep.c.status.in_(PHASE_FINAL), dep.c.finished_at < cutoff)
                   .scalar_subquery())
        return settled == func.json_array_length(PHASES.c.depends_on)

    @staticmethod
    def final_count() -> ColumnElement[int]:
        return func.coalesce(func.sum(case((PHASES.c.status.in_(PHASE_FINAL), 1), else_=0)), 0)

    def inputs_of(self, plan_id: Any, keys: Any) -> Select[Any]:
        """The phases named by ``keys`` (a list, or a SELECT of keys) with the full text of
        the completed ones, in plan order: one indexed SELECT on (plan_id, key), joined to the
        content each points at — its own, or in a fork the one its source phase stored."""
        return (select(*[PHASES.c[name] for name in PHASE_FIELDS], CONTENTS.c.text)
                .select_from(PHASES.outerjoin(CONTENTS, CONTENTS.c.id == PHASES.c.content_id))
                .where(PHASES.c.plan_id == plan_id, PHASES.c.key.in_(keys))
                .order_by(PHASES.c.position))

    def finish_update(self, plan_id: Any, phase_id: Any, attempt: Any, **values: Any) -> Update:
        """The fenced UPDATE that ends a running attempt; clears the lease with it. Scoped to
        the plan whose row the caller locked: a phase id of another plan matches nothing."""
        return (update(PHASES)
                .where(PHASES.c.plan_id == plan_id, PHASES.c.id == phase_id, PHASES.c.attempt == attempt,
                       PHASES.c.status == PhaseStatus.RUNNING)
                .values(lease_owner=None, lease_expires_at=None, **values))

    # ------------------------------------------------------------ statements, built once

    @staticmethod
    def human(phase: Any = PHASES) -> ColumnElement[bool]:
        """The phase is a person's seat (``meta.human``): a person answers it, never a worker."""
        return func.coalesce(phase.c.meta["human"].as_boolean(), false())

    @staticmethod
    def plan_notes() -> Any:
        """The claimed phase's plan's steering notes, read in the claim's own statement."""
        return select(PLANS.c.notes).where(PLANS.c.id == PHASES.c.plan_id).scalar_subquery().label("plan_notes")

    @cached_property
    def claim_update(self) -> Update:
        """The conditional UPDATE that claims a phase (see the module docstring).
        Parameters: ``phase_id``, ``owner``, ``now``, ``expires``."""
        live_plan = plan_first(PLANS.c.status == PlanStatus.RUNNING, PLANS.c.cancel_requested.is_(False))
        now = bindparam("now", type_=PHASES.c.started_at.type)
        takeable = or_(PHASES.c.status == PhaseStatus.PENDING,
                       and_(PHASES.c.status == PhaseStatus.RUNNING, PHASES.c.lease_expires_at < now))
        return (update(PHASES)
                .where(PHASES.c.id == bindparam("phase_id"), takeable, ~self.human(), live_plan, self.ready())
                .values(status=PhaseStatus.RUNNING, attempt=PHASES.c.attempt + 1, lease_owner=bindparam("owner"),
                        lease_expires_at=bindparam("expires", type_=PHASES.c.started_at.type), started_at=now,
                        enqueued_at=None))

    def within_share(self, fleet: bool) -> ColumnElement[bool]:
        """Fair share (:mod:`storage.fairshare`): the claiming phase's tenant has fewer phases
        running on a live lease than ``share_limit`` (and, with ``fleet``, the fleet fewer than
        ``fleet_limit``). Read in the claim's own snapshot: the caller holds the share's lock."""
        now = bindparam("now", type_=PHASES.c.started_at.type)
        run, plan = PHASES.alias("run"), PLANS.alias("run_plan")
        # in flight: running on a live lease, or released and not claimed yet (a slot kept for it) —
        # this phase itself not counted
        live = or_((run.c.status == PhaseStatus.RUNNING) & (run.c.lease_expires_at >= now),
                   (run.c.status == PhaseStatus.PENDING) & run.c.released_at.is_not(None) & run.c.held_at.is_(None)
                   & (run.c.id != PHASES.c.id)) & (plan.c.status == PlanStatus.RUNNING)
        running = select(func.count()).select_from(run.join(plan, plan.c.id == run.c.plan_id))
        tenant = bindparam("share_tenant", type_=String)
        mine = running.where(live, plan.c.tenant == tenant).scalar_subquery()
        within = mine < bindparam("share_limit", type_=Integer)
        if fleet:
            within = within & (running.where(live).scalar_subquery() < bindparam("fleet_limit", type_=Integer))
        # no jumping the queue: while phases wait held (the tenant's; any, under a fleet cap), only
        # a released one takes a slot — the others are held behind them, in the release order
        waits = select(run.c.id).select_from(run.join(plan, plan.c.id == run.c.plan_id)).where(
            run.c.held_at.is_not(None), run.c.status == PhaseStatus.PENDING, plan.c.status == PlanStatus.RUNNING)
        if not fleet:
            waits = waits.where(plan.c.tenant == tenant)
        return within & (PHASES.c.released_at.is_not(None) | ~waits.exists())

    def claim_statement(self, fleet: bool | None) -> Update:
        """The claim (:attr:`claim_update`), within the share when ``fleet`` is not None."""
        key = ("claim", fleet)
        if key not in self._variants:
            update_ = self.claim_update if fleet is None else self.claim_update.where(self.within_share(fleet))
            self._variants[key] = update_.returning(*[PHASES.c[name] for name in PHASE_FIELDS], self.plan_notes())
        return self._variants[key]

    @cached_property
    def _variants(self) -> dict[Any, Any]:
        return {}

    @cached_property
    def _claim_returning(self) -> Update:
        return self.claim_statement(None)

    @cached_property
    def _progress(self) -> Any:
        return select(self.final_count(), func.count()).where(PHASES.c.plan_id == bindparam("plan_id"))

    @cached_property
    def _event_insert(self) -> Any:
        return (insert(EVENTS).values(plan_id=bindparam("plan_id"), phase_key=bindparam("phase_key"),
                                      type=bindparam("type"), data=bindparam("data", type_=JSON),
                                      created_at=bindparam("now", type_=EVENTS.c.created_at.type))
                .returning(EVENTS.c.id))

    @cached_property
    def _inputs(self) -> Select[Any]:
        return self.inputs_of(bindparam("plan_id"), bindparam("keys", expanding=True))

    @cached_property
    def _lock(self) -> Update:
        return (update(PLANS).where(PLANS.c.id == bindparam("plan_id"))
                .values(updated_at=bindparam("now", type_=PLANS.c.updated_at.type))
                .returning(PLANS.c.cancel_requested, PLANS.c.max_debates, self.any_held()))

    def any_held(self) -> Any:
        """Some phase is held for its tenant's share (:mod:`storage.fairshare`): read by the lock
        of every finishing write, so a finish with nothing held pays no statement for a release."""
        return select(PHASES.c.id).where(PHASES.c.held_at.is_not(None), PHASES.c.status == PhaseStatus.PENDING).exists()

    @cached_property
    def _content_insert(self) -> Any:
        return (insert(CONTENTS)
                .values(id=bindparam("r_content"), text=bindparam("r_text"), chars=bindparam("r_chars"),
                        sha256=bindparam("r_sha256"), created_at=bindparam("r_now", type_=CONTENTS.c.created_at.type)))

    def completed_values(self) -> dict[str, Any]:
        """The status columns of a completion, as bind parameters."""
        return {"status": PhaseStatus.COMPLETED, "summary": bindparam("r_summary", type_=PHASES.c.summary.type),
                "truncated": bindparam("r_truncated", type_=PHASES.c.truncated.type),
                "verdict": bindparam("r_verdict", type_=PHASES.c.verdict.type),
                "content_id": bindparam("r_content", type_=PHASES.c.content_id.type),
                "sent_hash": bindparam("r_sent", type_=PHASES.c.sent_hash.type),
                "finished_at": bindparam("r_now", type_=PHASES.c.finished_at.type),
                "error_code": None, "error_message": None}

    @cached_property
    def _store(self) -> Update:
        return (self.finish_update(bindparam("r_plan"), bindparam("r_phase"), bindparam("r_attempt"),
                                   **self.completed_values())
                .returning(*_ABOUT))

    @cached_property
    def _usage_insert(self) -> Any:
        return (self.insert(USAGE).values({c: bindparam(c) for c in USAGE_VALUES})
                .on_conflict_do_nothing(index_elements=[USAGE.c.phase_id, USAGE.c.attempt, USAGE.c.seq]))

    @cached_property
    def _renew(self) -> Update:
        cancelled = select(PLANS.c.cancel_requested).where(PLANS.c.id == PHASES.c.plan_id).scalar_subquery()
        return (update(PHASES)
                .where(tuple_(PHASES.c.id, PHASES.c.attempt).in_(bindparam("held", expanding=True)),
                       PHASES.c.status == PhaseStatus.RUNNING)
                .values(lease_expires_at=bindparam("expires", type_=PHASES.c.lease_expires_at.type))
                .returning(PHASES.c.id, cancelled))

    @cached_property
    def _release(self) -> Update:
        return (update(PHASES).where(PHASES.c.id == bindparam("phase_id"), PHASES.c.status == PhaseStatus.PENDING,
                                     ~self.ready(), plan_first())
                .values(enqueued_at=None))

    # ------------------------------------------------------------ operations, as plain statements

    def claim(self, conn: Executor, phase_id: str, *, owner: str, now: datetime, lease: timedelta,
              share: ShareCheck | None = None) -> Claimed | None:
        """Claim a phase, store ``phase_started`` and read its inputs, in the caller's
        transaction. None when the claim was refused (nothing written). With ``share``, only
        within it (:meth:`within_share`)."""
        statement = self._claim_returning if share is None else self.claim_statement(share.fleet_capped)
        row = conn.execute(statement, {"phase_id": phase_id, "owner": owner, "now": now, "expires": now + lease,
                                       **(share.params() if share else {})}).first()
        if row is None:
            return None
        phase = phase_record(row._mapping)
        k, n = self.progress(conn, phase.plan_id)
        event = self.append(conn, phase.plan_id, event_shapes.phase_started(phase, attempt=phase.attempt, worker=owner,
                                                                        k=k, n=n), now)
        inputs, texts = self.read_inputs(conn, phase.plan_id, phase.inputs)
        return Claimed(phase, event, inputs, texts, list(row.plan_notes or []))

    def read_inputs(self, conn: Executor, plan_id: str,
                    keys: Sequence[str]) -> tuple[list[PhaseRecord], dict[str, str]]:
        if not keys:
            return [], {}
        return split_inputs(conn.execute(self._inputs, {"plan_id": plan_id, "keys": list(keys)}).all())

    def progress(self, conn: Executor, plan_id: str) -> tuple[int, int]:
        """(k, n): phases of the plan final, and in all."""
        k, n = conn.execute(self._progress, {"plan_id": plan_id}).one()
        return int(k or 0), int(n or 0)

    def append(self, conn: Executor, plan_id: str, event: NewEvent, now: datetime) -> EventRecord:
        """Append one event (transactional outbox); returns it as stored."""
        event_id = conn.execute(self._event_insert, {"plan_id": plan_id, "phase_key": event.phase_key,
                                                     "type": event.type, "data": event.data,
                                                     "now": now}).scalar_one()
        return EventRecord(id=event_id, plan_id=plan_id, phase_key=event.phase_key, type=event.type,
                           data=event.data, created_at=now)

    def lock_plan(self, conn: Executor, plan_id: str, now: datetime) -> PlanLock | None:
        """Lock the plan row — the first act of every write that finishes a phase, so those
        writes serialise per plan (progress k/n is exact) and never deadlock — and read the
        plan's mutable settings under the lock."""
        row = conn.execute(self._lock, {"plan_id": plan_id, "now": now}).first()
        return None if row is None else PlanLock(bool(row[0]), int(row[1]), bool(row[2]))

    def store_result(self, conn: Executor, plan_id: str, r: Result, now: datetime) -> Row[Any] | None:
        """The content, then the fenced status update pointing the phase at it. Returns the
        phase's (key, expert, kind, round), or None when the phase is not this attempt's to
        finish — another attempt owns it, or no such phase runs in this plan — and then the
        caller rolls the transaction back, content included: a content row exists iff the
        fenced update matched (the folded statement inserts it only from the update's row)."""
        values = r.values(plan_id, now)
        conn.execute(self._content_insert, values)  # first: the phase's content_id references it
        return conn.execute(self._store, values).first()

    def complete(self, conn: Executor, plan_id: str, r: Result,
                 now: datetime) -> tuple[EventRecord, int, int] | None:
        """The happy path of a completion after the plan lock: content → fenced status →
        ``phase_completed`` with the progress counted after it. None when fenced."""
        about = self.store_result(conn, plan_id, r, now)
        if about is None:
            return None
        k, n = self.progress(conn, plan_id)
        event = self.append(conn, plan_id, completed_event(about, r, k, n), now)
        return event, k, n

    def renew(self, conn: Executor, held: Sequence[tuple[str, int]], expires: datetime) -> dict[str, bool]:
        """Renew every held lease in one statement and learn, in the same statement, which
        plans were cancelled. ``{phase_id: keep_going}``."""
        rows = conn.execute(self._renew, {"held": [tuple(h) for h in held], "expires": expires}).all()
        renewed = {pid: not bool(c) for pid, c in rows}
        return {pid: renewed.get(pid, False) for pid, _ in held}

    def insert_usage(self, conn: Executor, values: Mapping[str, Any]) -> bool:
        """One model call's usage; False when that (phase, attempt, seq) is already on record."""
        res = conn.execute(self._usage_insert, dict(values))
        return bool(res.rowcount)  # type: ignore[attr-defined]

    @cached_property
    def _settle(self) -> Any:
        return RESERVATIONS.delete().where(RESERVATIONS.c.id == bindparam("reservation"))

    def settle_usage(self, conn: Executor, values: Mapping[str, Any], reservation: int) -> bool:
        """One model call's usage, and its reservation released, in the caller's transaction
        (:mod:`storage.spend`): the call is counted once, as one or the other."""
        conn.execute(self._settle, {"reservation": reservation})
        return self.insert_usage(conn, values)

    def release_waiting(self, conn: Executor, phase_id: str) -> bool:
        """A message arrived before its phase was ready: clear its enqueue mark so the next
        advance (or the reconciler) sends it again. True when the phase is waiting."""
        res = conn.execute(self._release, {"phase_id": phase_id})
        return bool(res.rowcount)  # type: ignore[attr-defined]


def split_inputs(rows: Sequence[Any]) -> tuple[list[PhaseRecord], dict[str, str]]:
    inputs, texts = [], {}
    for row in rows:
        record = phase_record(row._mapping)
        inputs.append(record)
        if row.text is not None:
            texts[record.id] = row.text
    return inputs, texts


def completed_event(about: Any, r: Result, k: int, n: int) -> NewEvent:
    return event_shapes.phase_completed(about, attempt=r.attempt, chars=len(r.text), truncated=r.truncated,
                                    fallback=r.fallback, offloaded=r.offloaded, summary=r.summary, k=k, n=n)
