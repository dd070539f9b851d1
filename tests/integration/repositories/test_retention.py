"""Retention at the storage boundary, on Postgres and SQLite: a finished plan past
``CONCLAVE_RETAIN_FINISHED_DAYS`` is deleted from every table (its search rows too) while a
recent and a running plan are untouched; a pass is bounded; a pass killed between batches
leaves whole plans only; event trimming visits each finished plan once (a watermark, not
a scan of history); and retention runs once per interval between two housekeepers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, text

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus
from orchestrator.core.settings import Settings
from storage import Database, NotFound, briefings, connect, contents, outbox, phases, plans, retention, webhook_outbox
from storage.event_shapes import NewEvent
from storage.identity import DEFAULT_TENANT
from storage.models import FleetState, utcnow
from storage.read_models import NewChunk, NewDocument, NewPhase
from tasks.housekeeping import Housekeeper
from tests.integration.durability import wait_for
from tests.integration.repositories import ledger
from tests.integration.repositories.ledger import claim, complete, spend
from tests.statement_gate import statement_gate

TABLES = ("phases", "contents", "usage", "events", "documents", "chunks")
WORD = "heliotrope"


def _plan(db: Database, title: str, *, finished_days_ago: float | None, events_n: int = 3) -> str:
    """A plan with a briefing (two chunks), a completed phase (content, usage) and events;
    finished ``finished_days_ago`` days ago, or still running when None."""
    text_ = f"{WORD} {title} first passage. Second passage of {title}."
    doc = NewDocument("brief", 0, "Brief", "text", text_, len(text_), "0" * 64,
                      [NewChunk(0, 0, 20, [], text_[:20], 5), NewChunk(1, 20, len(text_), [], text_[20:], 5)])
    created = plans.create_plan(
        db, title=title, kind="board", spec={"title": title}, task_id=None, max_active=1000, briefing=[doc],
        phases=[NewPhase("opening", "opening", 0, []),
                NewPhase("final", "final", 1, ["opening"], meta={"terminal": True})])
    pid = created.plan_id
    assert claim(db, pid, "opening", "test:1")
    spend(db, pid, "opening", 1, 10, 20)
    complete(db, pid, "opening", 1, f"result of {title}")
    for i in range(events_n):
        outbox.append_event(db, pid, NewEvent("note", {"i": i}))
    if finished_days_ago is not None:
        plans.finish_plan(db, pid, "completed")
        _set_finished(db, pid, finished_days_ago)
    return pid


def _set_finished(db: Database, pid: str, days_ago: float) -> None:
    at = (utcnow() - timedelta(days=days_ago)).replace(tzinfo=None)
    with db.engine.begin() as c:
        c.execute(text("UPDATE plans SET finished_at = :at WHERE id = :p"), {"at": at, "p": pid})


def _rows(db: Database, pid: str) -> dict[str, int]:
    """How many rows of ``pid`` each table holds (``plans`` included; ``contents``: those its
    phases point at)."""
    with db.engine.connect() as c:
        got = {t: int(c.scalar(text(f"SELECT count(*) FROM {t} WHERE plan_id = :p"), {"p": pid}) or 0)
               for t in TABLES if t != "contents"}
        got["contents"] = int(c.scalar(text("SELECT count(*) FROM contents c WHERE EXISTS (SELECT 1 FROM phases p "
                                            "WHERE p.content_id = c.id AND p.plan_id = :p)"), {"p": pid}) or 0)
        got["plans"] = int(c.scalar(text("SELECT count(*) FROM plans WHERE id = :p"), {"p": pid}) or 0)
    return got


def _contents(db: Database) -> int:
    """Every content row stored, whoever references it."""
    with db.engine.connect() as c:
        return int(c.scalar(text("SELECT count(*) FROM contents")) or 0)


def _search_rows(db: Database) -> int | None:
    """SQLite: rows of the full-text index (kept in step with chunks by triggers)."""
    if db.dialect != "sqlite":
        return None
    with db.engine.connect() as c:
        return int(c.scalar(text("SELECT count(*) FROM chunks_fts")) or 0)


def _prune(db: Database, *, keep_days: float = 7, **kw: Any) -> retention.Pruned:
    now = utcnow()
    return retention.prune(db, older_than=now - timedelta(days=30), max_events_per_plan=100,
                           delete_before=now - timedelta(days=keep_days), **kw)


def test_a_plan_past_retention_is_gone_from_every_table_and_the_others_are_untouched(db: Database) -> None:
    old = _plan(db, "old", finished_days_ago=10)
    recent = _plan(db, "recent", finished_days_ago=1)
    running = _plan(db, "running", finished_days_ago=None)
    before = {pid: _rows(db, pid) for pid in (old, recent, running)}
    assert all(n > 0 for n in before[old].values()), before[old]
    assert briefings.search(db, old, WORD)

    done = _prune(db)

    assert done.plans == 1
    assert _rows(db, old) == dict.fromkeys((*TABLES, "plans"), 0)
    assert _contents(db) == 2  # the old plan's content went with it: only the survivors' are left
    assert briefings.search(db, old, WORD) == []
    assert _rows(db, recent) == before[recent] and _rows(db, running) == before[running]
    assert [c.ordinal for c in briefings.search(db, recent, WORD)] == [0]  # the survivors' search still works
    assert _search_rows(db) in (None, 4)  # SQLite: exactly the survivors' four chunks stay indexed
    assert plans.load_state(db, running).plan.status == "running"


def _fork_of(db: Database, source: str, title: str) -> str:
    """A plan whose ``opening`` is copied from ``source``'s (as a what-if fork stores it: pointing at
    the source's content, no new row) and whose ``final`` is its own."""
    opening = plans.load_state(db, source).by_key()["opening"]
    assert opening.content_id is not None and opening.sent_hash is None  # completed by ledger.complete
    fork = plans.Fork(source=source, from_phase="final", skipped={}, reused={"opening": plans.Reused(
        content_id=opening.content_id, sent_hash="0" * 64, summary=opening.summary, truncated=False, verdict=None)})
    created = plans.create_plan(
        db, title=title, kind="board", spec={"title": title}, task_id=None, max_active=1000, fork=fork,
        phases=[NewPhase("opening", "opening", 0, []),
                NewPhase("final", "final", 1, ["opening"], meta={"terminal": True})])
    assert claim(db, created.plan_id, "final", "test:1")
    complete(db, created.plan_id, "final", 1, f"result of {title}")
    plans.finish_plan(db, created.plan_id, "completed")
    return created.plan_id


def test_a_content_a_fork_points_at_outlives_its_source_and_goes_with_the_last_plan_that_does(db: Database) -> None:
    source = _plan(db, "source", finished_days_ago=10)
    fork = _fork_of(db, source, "fork")
    assert _contents(db) == 2  # the source's opening (shared) and the fork's final: none copied
    shared = plans.load_state(db, fork).by_key()["opening"].content_id

    assert _prune(db).plans == 1  # the source goes; the content the fork points at stays, readable
    assert _rows(db, source)["plans"] == 0 and _contents(db) == 2
    assert contents.read_text(db, fork, "opening") == "result of source"
    assert plans.load_state(db, fork).by_key()["opening"].content_id == shared

    _set_finished(db, fork, 10)
    assert _prune(db).plans == 1 and _contents(db) == 0  # the last plan that pointed at them: gone with it


def test_nothing_is_deleted_unless_the_operator_asks(db: Database) -> None:
    old = _plan(db, "ancient", finished_days_ago=3650)
    now = utcnow()
    retention.prune(db, older_than=now - timedelta(days=30), max_events_per_plan=100)  # delete_before=None
    assert _rows(db, old)["plans"] == 1 and _rows(db, old)["contents"] == 1


def test_a_pass_deletes_at_most_its_limit_oldest_first(db: Database) -> None:
    aged = [_plan(db, f"aged {i}", finished_days_ago=20 - i) for i in range(5)]  # aged[0] finished first

    assert _prune(db, batch=1, per_pass=2).plans == 2
    assert [_rows(db, pid)["plans"] for pid in aged] == [0, 0, 1, 1, 1]
    assert _prune(db, batch=2, per_pass=2).plans == 2
    assert [_rows(db, pid)["plans"] for pid in aged] == [0, 0, 0, 0, 1]
    assert _prune(db, batch=2, per_pass=2).plans == 1 and _prune(db).plans == 0


def test_a_pass_killed_between_batches_leaves_whole_plans_only(db: Database) -> None:
    aged = [_plan(db, f"doomed {i}", finished_days_ago=20 - i) for i in range(3)]
    before = {pid: _rows(db, pid) for pid in aged}
    deletes_of_plans = []

    def die_on_the_second_batch(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM PLANS"):
            deletes_of_plans.append(statement)
            if len(deletes_of_plans) == 2:  # the first batch has committed; the second is mid-way
                raise RuntimeError("worker killed")

    event.listen(db.engine, "before_cursor_execute", die_on_the_second_batch)
    try:
        with pytest.raises(Exception, match="worker killed"):
            _prune(db, batch=1)
    finally:
        event.remove(db.engine, "before_cursor_execute", die_on_the_second_batch)

    assert _rows(db, aged[0]) == dict.fromkeys((*TABLES, "plans"), 0)  # the first batch: gone whole
    assert {pid: _rows(db, pid) for pid in aged[1:]} == {pid: before[pid] for pid in aged[1:]}  # the rest: whole
    assert _prune(db).plans == 2  # the next pass finishes the job
    assert all(_rows(db, pid)["plans"] == 0 for pid in aged)


def test_event_trimming_visits_each_finished_plan_once_from_its_watermark(db: Database) -> None:
    first = _plan(db, "first", finished_days_ago=1, events_n=130)
    running = _plan(db, "running", finished_days_ago=None, events_n=130)
    first_ids = [e.id for e in outbox.list_events(db, first, limit=1000)]
    ran = _prune(db)
    # the newest 100 are kept (the plan's end among them), whatever became of the ones before
    assert ran.trimmed == 1 and [e.id for e in outbox.list_events(db, first, limit=1000)] == first_ids[-100:]
    assert len(outbox.list_events(db, running, limit=1000)) > 130  # an active plan is never pruned

    assert _prune(db).trimmed == 0  # nothing finished since: the pass looks at no plan
    plans.finish_plan(db, running, "completed")
    _set_finished(db, running, 0.5)
    running_ids = [e.id for e in outbox.list_events(db, running, limit=1000)]
    ran = _prune(db)
    assert ran.trimmed == 1 and [e.id for e in outbox.list_events(db, running, limit=1000)] == running_ids[-100:]

    _set_finished(db, first, 31)  # it finished before the event retention period: its events go
    assert _prune(db, keep_days=365).trimmed == 1
    assert outbox.list_events(db, first, limit=1000) == [] and _rows(db, first)["contents"] == 1


def test_a_just_finished_plan_is_trimmed_after_the_grace_period(db: Database) -> None:
    pid = _plan(db, "just now", finished_days_ago=0, events_n=130)
    assert _prune(db).trimmed == 0  # a finish may commit out of order: it waits GRACE
    before = [e.id for e in outbox.list_events(db, pid, limit=1000)]
    assert _prune(db, now=utcnow() + retention.GRACE + timedelta(seconds=1)).trimmed == 1
    assert [e.id for e in outbox.list_events(db, pid, limit=1000)] == before[-100:]


@pytest.fixture()
def second(db: Database) -> Iterator[Database]:
    """Another process's database: its own engine on the same store."""
    other = connect(db.engine.url.render_as_string(hide_password=False), pool_size=2)
    yield other
    other.dispose()


def _housekeeper(db: Database) -> Housekeeper:
    url = db.engine.url.render_as_string(hide_password=False)
    settings = Settings(database_url=url, broker_url="memory://", retain_finished_days=7)
    return Housekeeper(db, Coordinator(db, settings, RecordingDispatcher(), MemoryBus()), interval=60,
                       stalled_after=60)


def test_two_housekeepers_run_retention_once_per_interval_between_them(db: Database, second: Database) -> None:
    a, b = _housekeeper(db), _housekeeper(second)
    first = _plan(db, "first", finished_days_ago=10)
    assert a.sweep() and _rows(db, first)["plans"] == 0  # due: a ran retention

    late = _plan(db, "late", finished_days_ago=10)
    assert b.sweep() and a.sweep()  # both swept (reconciled) …
    assert _rows(db, late)["plans"] == 1  # … but retention had run within the hour, fleet-wide

    ran = last_run(db)
    assert ran is not None
    with db.engine.begin() as c:  # an hour passes
        c.execute(text("UPDATE fleet_state SET at = :at WHERE name = 'retention'"),
                  {"at": (ran - timedelta(hours=1)).replace(tzinfo=None)})
    assert b.sweep() and _rows(db, late)["plans"] == 0


def last_run(db: Database) -> datetime | None:
    """When retention last ran, fleet-wide."""
    with db.transaction() as s:
        return s.scalar(select(FleetState.at).where(FleetState.name == retention.RAN))


def test_of_processes_claiming_at_once_one_runs_retention(pg: Database) -> None:
    racers = 8
    barrier = threading.Barrier(racers)
    got: list[bool] = []
    dbs = [connect(pg.engine.url.render_as_string(hide_password=False), pool_size=1) for _ in range(racers)]

    def race(mine: Database) -> None:
        barrier.wait()
        got.append(retention.claim(mine, 3600))

    threads = [threading.Thread(target=race, args=(d,)) for d in dbs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for d in dbs:
        d.dispose()
    assert sorted(got) == [False] * (racers - 1) + [True]


def test_a_fork_made_while_retention_deletes_its_source_keeps_what_it_reuses_or_is_refused(pg: Database) -> None:
    """Postgres: a fork locks the contents it reuses (``FOR KEY SHARE``) before it points at them;
    retention locks a deleted plan's contents (``FOR UPDATE``) before it counts their references.
    Fork first: retention waits for it, then sees its reference and keeps the content. Retention
    first: the fork waits, then finds the content gone and is refused whole (the source is gone)."""
    source = _plan(pg, "source", finished_days_ago=10)
    other = connect(pg.engine.url.render_as_string(hide_password=False), pool_size=2)
    held, go = threading.Event(), threading.Event()

    def hold_after_the_lock(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FOR KEY SHARE" in statement and not held.is_set():
            held.set()  # the fork's lock on the content is about to be taken; its phases come next
        elif held.is_set() and statement.lstrip().upper().startswith("INSERT INTO PHASES"):
            go.wait(10)

    event.listen(other.engine, "after_cursor_execute", hold_after_the_lock)
    made: list[str] = []
    fork = threading.Thread(target=lambda: made.append(_fork_of(other, source, "fork")))
    try:
        fork.start()
        assert held.wait(10)
        pruning = threading.Thread(target=lambda: _prune(pg))
        pruning.start()
        pruning.join(1.0)
        assert pruning.is_alive()  # retention waits on the content the fork holds
        go.set()
        fork.join(10)
        pruning.join(10)
        assert not pruning.is_alive() and made
    finally:
        go.set()
        event.remove(other.engine, "after_cursor_execute", hold_after_the_lock)
        other.dispose()
    assert _rows(pg, source)["plans"] == 0
    assert contents.read_text(pg, made[0], "opening") == "result of source"  # kept: the fork points at it

    # retention first: a fork of a plan being deleted finds its contents gone, and stores nothing
    late = _plan(pg, "late", finished_days_ago=10)
    opening = plans.load_state(pg, late).by_key()["opening"]
    assert _prune(pg).plans == 1
    with pytest.raises(NotFound, match="was deleted while the fork was made"):
        plans.create_plan(pg, title="too late", kind="board", spec={"title": "too late"}, task_id=None,
                          max_active=1000, phases=[NewPhase("opening", "opening", 0, [])],
                          fork=plans.Fork(source=late, from_phase="final", skipped={}, reused={"opening": plans.Reused(
                              content_id=opening.content_id or "", sent_hash="0" * 64, summary=None, truncated=False,
                              verdict=None)}))
    with pg.engine.connect() as c:
        assert c.scalar(text("SELECT count(*) FROM plans WHERE title = 'too late'")) == 0


def test_a_plan_resumed_while_a_pass_trims_it_keeps_its_events(pg: Database) -> None:
    """Postgres: a pass reads which plans finished (one statement), then trims their events (the
    next). A failed plan resumed between the two is running again when the trim runs: its events
    and its resume stay (an active plan is never pruned). The resume is committed from inside the
    pass, from another connection, just before the pass's first delete of events."""
    pid = ledger.new_plan(pg, "resumed")
    assert claim(pg, pid, "opening", "test:1")
    ledger.fail(pg, pid, "opening", 1)
    for i in range(3):
        outbox.append_event(pg, pid, NewEvent("note", {"i": i}))
    plans.finish_plan(pg, pid, "failed")
    _set_finished(pg, pid, 40)
    with pg.engine.begin() as c:  # every event older than the event retention period: all due to go
        c.execute(text("UPDATE events SET created_at = :at WHERE plan_id = :p"),
                  {"at": (utcnow() - timedelta(days=40)).replace(tzinfo=None), "p": pid})
    before = [e.id for e in outbox.list_events(pg, pid, limit=1000)]
    other = connect(pg.engine.url.render_as_string(hide_password=False), pool_size=2)
    resumed: list[plans.Reopened] = []

    def resume_before_the_trim(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM EVENTS") and not resumed:
            resumed.append(plans.reopen(other, pid, retry_failed=True))  # commits: the pass has read its plans

    event.listen(pg.engine, "before_cursor_execute", resume_before_the_trim)
    try:
        now = utcnow()
        done = retention.prune(pg, older_than=now - timedelta(days=30), max_events_per_plan=100, now=now)
    finally:
        event.remove(pg.engine, "before_cursor_execute", resume_before_the_trim)
        other.dispose()
    assert resumed and "opening" in resumed[0].keys  # the gate fired, and the plan runs again
    assert done.trimmed == 1 and done.events == 0
    state = plans.load_state(pg, pid)
    assert state.plan.status == "running" and state.plan.finished_at is None
    kept = [e.id for e in outbox.list_events(pg, pid, limit=1000)]
    assert kept[:len(before)] == before and len(kept) == len(before) + 2  # + retry_requested, resume_requested


def test_a_plan_reopened_and_enqueued_while_a_pass_clears_its_marks_keeps_the_new_mark(pg: Database) -> None:
    """Postgres: a pass clears the enqueue marks of the plans it read as final, by one statement
    that reads with the snapshot it took at its start. A failed plan reopened, and its retried
    phase marked enqueued (the resume's advance), after that start but before the statement
    reaches the phase's row: the mark is the running plan's, and stays. The pass's statement is
    held at a gate after it took its snapshot, before it read a row (``tests/statement_gate.py``).
    A clear that matched every phase of those plans, not only the marked ones, would find the
    row changed since its snapshot, re-check it with the plan still read as final, and clear the
    fresh mark: the reconciler would then take the enqueued phase for one nobody sent."""
    pid = ledger.new_plan(pg, "reopened")
    assert claim(pg, pid, "opening", "test:1")
    ledger.fail(pg, pid, "opening", 1)
    plans.finish_plan(pg, pid, "failed")
    _set_finished(pg, pid, 1)  # past the grace period: step 2 visits it
    opening = ledger.phase(pg, pid, "opening").id
    assert _transient(pg, pid) == (None, False, 0)  # no mark at the pass's snapshot: nothing for it to clear
    ran: list[retention.Pruned] = []
    with statement_gate(pg, name="clear-gate", event="UPDATE", table="phases",
                        query_like="UPDATE phases SET enqueued_at%") as gate:
        passing = connect(gate.url(pg.engine.url.render_as_string(hide_password=False)), pool_size=2)
        pruning = threading.Thread(target=lambda: ran.append(retention.prune(
            passing, older_than=utcnow() - timedelta(days=30), max_events_per_plan=100)))
        try:
            pruning.start()
            wait_for(gate.waiting, 30, interval=0.02, what="the pass's clear of enqueue marks at the gate")
            reopened = plans.reopen(pg, pid, retry_failed=True)  # both commit while the clear is held
            marked = phases.mark_enqueued(pg, [opening], stale_before=None)
            gate.open()
            pruning.join(30)
        finally:
            gate.open()
            pruning.join(30)
            passing.dispose()
    assert not pruning.is_alive() and ran and ran[0].trimmed == 1  # the pass visited the plan
    assert "opening" in reopened.keys and marked == [opening]
    assert plans.load_state(pg, pid).plan.status == "running"
    assert _transient(pg, pid) == (None, False, 1)  # the reopened plan's mark is kept


def _trimmed_to(db: Database, pid: str) -> int:
    return len(outbox.list_events(db, pid, limit=1000))


def test_the_walk_visits_every_plan_once_whatever_the_ties_and_the_order_of_ids(db: Database) -> None:
    """Three plans finished at the same instant, and two whose ids run against their finishing
    order, walked one plan a batch: each is trimmed once, and the next pass visits none. The tied
    are written largest id first, so Postgres reads them in that order: a walk that did not
    break ties by id would move its watermark past the others and never visit them."""
    pids = [_plan(db, f"walked {i}", finished_days_ago=1, events_n=102) for i in range(5)]
    tied, crossed = pids[:3], sorted(pids[3:])
    at = (utcnow() - timedelta(days=1)).replace(tzinfo=None)
    with db.engine.begin() as c:
        for pid in sorted(tied, reverse=True):  # an UPDATE writes a new row version after the others
            c.execute(text("UPDATE plans SET finished_at = :at WHERE id = :p"), {"at": at, "p": pid})
        for days, pid in zip((1, 2), crossed, strict=True):  # the larger id finished earlier
            c.execute(text("UPDATE plans SET finished_at = :at WHERE id = :p"),
                      {"at": at + timedelta(hours=days), "p": pid})
    assert all(_trimmed_to(db, pid) > 100 for pid in pids)
    assert retention.prune(db, older_than=utcnow() - timedelta(days=30), max_events_per_plan=100,
                           batch=1).trimmed == 5
    assert [_trimmed_to(db, pid) for pid in pids] == [100] * 5
    assert retention.prune(db, older_than=utcnow() - timedelta(days=30), max_events_per_plan=100,
                           batch=1).trimmed == 0


def test_a_pass_visits_at_most_its_limit_and_an_idle_pass_reads_each_step_once(db: Database) -> None:
    for i in range(3):
        _plan(db, f"aged {i}", finished_days_ago=40)
    # steps 2 and 3 each visit at most per_pass plans
    assert retention.prune(db, older_than=utcnow() - timedelta(days=30), max_events_per_plan=100,
                           batch=2, per_pass=2).trimmed == 4
    _prune(db, keep_days=365)
    reads: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM plans" in statement:
            reads.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        done = _prune(db, keep_days=365, batch=1)
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    assert (done.plans, done.trimmed, len(reads)) == (0, 0, 3)  # nothing to do: one read a step, not per_pass


def test_a_plan_finished_yesterday_keeps_its_events_when_an_older_one_ages_out(db: Database) -> None:
    old = _plan(db, "old", finished_days_ago=40)
    recent = _plan(db, "recent", finished_days_ago=1)
    before = _trimmed_to(db, recent)
    _prune(db, keep_days=365)
    assert _trimmed_to(db, old) == 0 and _trimmed_to(db, recent) == before > 0


def test_retention_is_due_again_exactly_one_interval_later(db: Database) -> None:
    t0 = utcnow()
    assert retention.claim(db, 60, now=t0)
    assert not retention.claim(db, 60, now=t0 + timedelta(seconds=59))
    assert retention.claim(db, 60, now=t0 + timedelta(seconds=60))


def test_a_pass_skips_a_plan_another_transaction_holds_and_deletes_the_rest(pg: Database) -> None:
    held, free = _plan(pg, "held", finished_days_ago=10), _plan(pg, "free", finished_days_ago=9)
    other = connect(pg.engine.url.render_as_string(hide_password=False), pool_size=2)
    try:
        with other.engine.connect() as holder:
            holder.begin()
            holder.execute(text("SELECT id FROM plans WHERE id = :p FOR UPDATE"), {"p": held})
            pruning = threading.Thread(target=lambda: _prune(pg))
            pruning.start()
            pruning.join(20)
            assert not pruning.is_alive()  # it did not wait for the held plan
            holder.rollback()
    finally:
        other.dispose()
    assert _rows(pg, held)["plans"] == 1 and _rows(pg, free)["plans"] == 0


def _transient(db: Database, pid: str) -> tuple[Any, ...]:
    """``pid``'s resume guard (owner, until) and how many of its phases hold an enqueue mark."""
    with db.engine.connect() as c:
        owner, until = c.execute(text("SELECT resume_owner, resume_until FROM plans WHERE id = :p"), {"p": pid}).one()
        marked = c.scalar(text("SELECT count(*) FROM phases WHERE plan_id = :p AND enqueued_at IS NOT NULL"),
                          {"p": pid})
    return owner, until is not None, int(marked or 0)


def test_a_pass_caps_each_plan_of_a_batch_clears_its_transient_rows_and_counts_what_it_deleted(db: Database) -> None:
    """Two finished plans in one batch are each capped to their own newest events, lose their
    resume guard (both columns) and enqueue marks; a running plan keeps all of it; ``events``
    is the number of events deleted."""
    done_pids = [_plan(db, f"capped {i}", finished_days_ago=1, events_n=130) for i in range(2)]
    running = _plan(db, "running", finished_days_ago=None, events_n=130)
    soon = (utcnow() + timedelta(minutes=10)).replace(tzinfo=None)
    with db.engine.begin() as c:
        c.execute(text("UPDATE plans SET resume_owner = 'w:1', resume_until = :t"), {"t": soon})
        c.execute(text("UPDATE phases SET enqueued_at = :t"), {"t": soon})
    before = {pid: [e.id for e in outbox.list_events(db, pid, limit=1000)] for pid in (*done_pids, running)}
    assert all(len(ids) > 130 for ids in before.values())
    with db.engine.begin() as c:  # the first's oldest ten are past the period: step 2 deletes them, then caps
        c.execute(text("UPDATE events SET created_at = :at WHERE plan_id = :p AND id <= :last"),
                  {"at": (utcnow() - timedelta(days=40)).replace(tzinfo=None), "p": done_pids[0],
                   "last": before[done_pids[0]][9]})

    ran = _prune(db)

    assert ran.trimmed == 2
    for pid in done_pids:  # the newest 100 of each, not 100 between them
        assert [e.id for e in outbox.list_events(db, pid, limit=1000)] == before[pid][-100:]
        assert _transient(db, pid) == (None, False, 0)
    assert ran.events == sum(len(before[pid]) - 100 for pid in done_pids)
    assert [e.id for e in outbox.list_events(db, running, limit=1000)] == before[running]
    assert _transient(db, running) == ("w:1", True, 2)  # an active plan is never pruned


def _deliveries(db: Database, pid: str) -> list[str]:
    with db.engine.connect() as c:
        return sorted(c.scalars(text("SELECT status FROM webhook_deliveries WHERE plan_id = :p"), {"p": pid}))


def test_a_plan_past_the_event_period_loses_its_final_deliveries_and_keeps_a_pending_one(db: Database) -> None:
    """Step 3 deletes a plan's delivered and failed webhook deliveries with its events; a pending
    one stays until it ends, and a plan still within the period (step 2 only) keeps all of them.
    A pass of one plan a batch counts every event it deleted, across its batches."""
    for _ in range(3):  # three endpoints: each plan_finished event makes one delivery per endpoint
        webhook_outbox.create_endpoint(db, tenant=DEFAULT_TENANT, url="https://hooks.example/x", events=["*"],
                                       description=None, created_by=None, limit=10)
    aged = [_plan(db, f"old {i}", finished_days_ago=40 + i) for i in range(2)]
    recent = _plan(db, "recent", finished_days_ago=1)
    with db.engine.begin() as c:  # of each plan's three deliveries: one delivered, one failed, one pending
        for pid in (*aged, recent):
            ids = sorted(c.scalars(text("SELECT id FROM webhook_deliveries WHERE plan_id = :p"), {"p": pid}))
            assert len(ids) == 3
            for id_, status in zip(ids, ("delivered", "failed", "pending"), strict=True):
                c.execute(text("UPDATE webhook_deliveries SET status = :s WHERE id = :i"), {"s": status, "i": id_})
    events = sum(_trimmed_to(db, pid) for pid in aged)

    done = _prune(db, keep_days=365, batch=1)

    assert done.events == events > 0 and [_trimmed_to(db, pid) for pid in aged] == [0, 0]
    assert [_deliveries(db, pid) for pid in aged] == [["pending"]] * 2
    assert _deliveries(db, recent) == ["delivered", "failed", "pending"]
