"""The plan aggregate at the storage boundary, on Postgres and SQLite: idempotent
submission, the active-plan cap (also under racing submissions), the resume guard,
what a resume may reopen, which plans the reconciler sees as stalled, finishing once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from storage import Conflict, Database, NotFound, outbox, phases, plans
from storage.exceptions import Busy, CapacityExceeded
from storage.read_models import NewPhase
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, complete, event_types, new_plan, phase

SPEC = {"title": "same"}


def _submit(db: Database, task_id: str | None, spec: dict[str, str] = SPEC, *, max_active: int = 100) -> tuple[
        str, bool]:
    created = plans.create_plan(db, title="t", kind="board", spec=spec, task_id=task_id, max_active=max_active,
                                phases=[NewPhase("opening", "opening", 0, [])])
    return created.plan_id, created.created


def test_resubmitting_a_task_id_returns_the_plan_and_a_different_plan_conflicts(db: Database) -> None:
    plan_id, created = _submit(db, "crm-1")
    assert created
    assert _submit(db, "crm-1") == (plan_id, False)
    again = plans.create_plan(db, title="t", kind="board", spec=SPEC, task_id="crm-1", max_active=100,
                              phases=[NewPhase("opening", "opening", 0, [])])
    assert (again.plan_id, again.created, again.events) == (plan_id, False, ())  # nothing stored, nothing to publish
    with pytest.raises(Conflict, match="crm-1"):
        _submit(db, "crm-1", {"title": "another plan"})
    assert [p.key for p in plans.load_state(db, plan_id).phases] == ["opening"]
    assert event_types(db, plan_id).count("plan_submitted") == 1


def test_the_active_plan_cap_refuses_the_plan_past_it(db: Database) -> None:
    for i in range(2):
        _submit(db, f"cap-{i}", max_active=2)
    with pytest.raises(CapacityExceeded, match="2 plans are active, the limit is 2"):
        _submit(db, "cap-2", max_active=2)
    plans.finish_plan(db, plans.resolve(db, "cap-0"), "completed")  # a finished plan frees its slot
    assert _submit(db, "cap-2", max_active=2)[1]


def test_the_cap_holds_when_submissions_race(pg: Database) -> None:
    """Deterministic race: the test blocks every INSERT into plans (a SHARE table lock,
    which reads pass) until all racers are waiting, so a racer that counted before
    taking the capacity lock would count too few and get in."""
    db = pg  # SQLite serialises writers at BEGIN IMMEDIATE; the advisory lock is Postgres's
    for i in range(2):
        _submit(db, f"held-{i}", max_active=3)
    racers = 4
    outcomes: list[str] = []
    with db.engine.connect() as blocker:
        tx = blocker.begin()
        blocker.execute(text("LOCK TABLE plans IN SHARE MODE"))

        def submit(i: int) -> None:
            try:
                _submit(db, f"race-{i}", max_active=3)
                outcomes.append("created")
            except CapacityExceeded:
                outcomes.append("refused")

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(racers)]
        for t in threads:
            t.start()

        def waiting() -> bool:
            with db.engine.connect() as c:
                n = c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND wait_event_type = 'Lock'")).scalar()
            return n == racers

        try:
            wait_for(waiting, 30, interval=0.02, what="every racer waiting")
        finally:
            tx.rollback()
        for t in threads:
            t.join(30)
    assert sorted(outcomes) == ["created"] + ["refused"] * (racers - 1)
    assert len(plans.running_plan_ids(db)) == 3


def test_one_resume_guard_at_a_time_until_it_lapses(db: Database) -> None:
    plan_id = new_plan(db)
    hold = timedelta(seconds=0.3)
    plans.acquire_resume_guard(db, plan_id, "first", hold)
    taken_at = datetime.now(UTC)
    with pytest.raises(Busy, match="resume already in progress"):
        plans.acquire_resume_guard(db, plan_id, "second", hold)
    wait_for(lambda: datetime.now(UTC) > taken_at + hold, 10, interval=0.02, what="the guard to lapse")
    plans.acquire_resume_guard(db, plan_id, "third", hold)  # a later resume gets it


def _fail(db: Database, plan_id: str, claimed: phases.Claimed, message: str = "refused",
          code: str = "llm.fatal") -> str:
    """Fail the claimed attempt as its worker does when the model call raised; the outcome."""
    return phases.fail_phase(db, plan_id=plan_id, phase_id=claimed.phase.id, attempt=claimed.phase.attempt,
                             code=code, message=message).status


def _failed_opening(db: Database) -> str:
    """``opening`` failed, ``final`` skipped because of it, the plan failed."""
    plan_id = new_plan(db)
    first = claim(db, plan_id, "opening", "w1")
    assert first is not None
    assert _fail(db, plan_id, first) == "failed"
    phases.skip_phases(db, plan_id, {"a phase it depends on did not complete": ["final"]})
    assert plans.finish_plan(db, plan_id, "failed", error_code="llm.fatal", error_message="refused")
    return plan_id


def test_resume_without_retry_failed_leaves_failed_phases_failed(db: Database) -> None:
    plan_id = _failed_opening(db)
    reopened = plans.reopen(db, plan_id, retry_failed=False)
    assert reopened.keys == []
    state = plans.load_state(db, plan_id)
    assert state.plan.status == "failed"
    assert {p.key: p.status for p in state.phases} == {"opening": "failed", "final": "skipped"}
    assert state.by_key()["opening"].retries_requested == 0
    # every resume is recorded (departure 11), even one that reset nothing; no retry is
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "resume_requested"]
    assert event.data == {"retry_failed": False, "reset": [], "actor": None}
    assert "retry_requested" not in event_types(db, plan_id)
    assert [(e.id, e.type, e.data) for e in reopened.events] == [(event.id, event.type, event.data)]


def test_retry_failed_reopens_failed_and_skipped_phases_and_records_it(db: Database) -> None:
    plan_id = _failed_opening(db)
    reopened = plans.reopen(db, plan_id, retry_failed=True)
    assert sorted(reopened.keys) == ["final", "opening"]
    state = plans.load_state(db, plan_id)
    assert state.plan.status == "running" and state.plan.error_code is None and state.plan.finished_at is None
    by_key = state.by_key()
    assert {k: p.status for k, p in by_key.items()} == {"opening": "pending", "final": "pending"}
    assert by_key["opening"].retries_requested == 1 and by_key["final"].retries_requested == 0
    assert all(p.error_code is None and p.error_message is None and p.finished_at is None for p in state.phases)
    assert event_types(db, plan_id).count("retry_requested") == 1
    stored = [e for e in outbox.list_events(db, plan_id) if e.type in ("retry_requested", "resume_requested")]
    assert [(e.id, e.type, e.data) for e in reopened.events] == [(e.id, e.type, e.data) for e in stored]
    assert stored[1].data == {"retry_failed": True, "reset": reopened.keys, "actor": None}
    again = claim(db, plan_id, "opening", "w2")  # claimable again: the next attempt
    assert again is not None and again.phase.attempt == 2


def test_retry_failed_never_reopens_a_completed_phase_or_a_completed_plan(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1") is not None
    assert complete(db, plan_id, "opening", 1, "done").status == "completed"
    second = claim(db, plan_id, "final", "w1")
    assert second is not None
    assert _fail(db, plan_id, second) == "failed"

    assert plans.reopen(db, plan_id, retry_failed=True).keys == ["final"]  # a running plan: only the failed one
    assert phase(db, plan_id, "opening").status == "completed"

    done = new_plan(db, "completed plan")
    assert claim(db, done, "opening", "w1") is not None
    assert complete(db, done, "opening", 1, "done").status == "completed"
    last = claim(db, done, "final", "w1")
    assert last is not None
    assert _fail(db, done, last) == "failed"
    assert plans.finish_plan(db, done, "completed")
    assert plans.reopen(db, done, retry_failed=True).keys == []  # a completed plan is final for good
    state = plans.load_state(db, done)
    assert state.plan.status == "completed"
    assert {p.key: p.status for p in state.phases} == {"opening": "completed", "final": "failed"}


def test_a_plan_is_finished_once(db: Database) -> None:
    plan_id = new_plan(db)
    finished = plans.finish_plan(db, plan_id, "completed")
    assert finished is not None
    assert plans.finish_plan(db, plan_id, "failed", error_code="x", error_message="late") is None
    assert plans.get_plan(db, plan_id).status == "completed"
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "plan_finished"]
    assert (finished.id, finished.type, finished.data) == (event.id, event.type, event.data)  # what is published


def test_the_reconciler_sees_exactly_the_plans_that_stopped_moving(db: Database) -> None:
    """Stalled: a lease that expired (its worker died) at once; no stored progress for
    ``requeue_after`` (a lost chord body) only while nothing runs on a live lease — a
    phase still running on a live lease is the plan moving, however long its call takes."""
    requeue = timedelta(seconds=60)
    moving = new_plan(db, "moving")  # a phase running under a live lease
    assert claim(db, moving, "opening", "w1", lease=timedelta(seconds=600)) is not None
    expired = new_plan(db, "expired")  # a phase whose lease has passed
    assert claim(db, expired, "opening", "w1", lease=timedelta(seconds=0.2)) is not None
    idle = new_plan(db, "idle")  # every phase final, and the advance that would finish it never came
    for key in ("opening", "final"):
        assert claim(db, idle, key, "w1") is not None
        assert complete(db, idle, key, 1, "done").status == "completed"
    finished = new_plan(db, "finished")
    assert plans.finish_plan(db, finished, "completed")
    lease_end = phase(db, expired, "opening").lease_expires_at
    assert lease_end is not None
    wait_for(lambda: datetime.now(UTC) > lease_end, 10, interval=0.02, what="the lease to pass")

    later = datetime.now(UTC)
    assert set(plans.stalled_plan_ids(db, now=later, requeue_after=requeue)) == {expired}
    # no stored progress for requeue_after: every running plan but the one with a live lease
    quiet = later + requeue + timedelta(seconds=1)
    assert set(plans.stalled_plan_ids(db, now=quiet, requeue_after=requeue)) == {expired, idle}
    past_the_lease = later + timedelta(seconds=601)
    assert set(plans.stalled_plan_ids(db, now=past_the_lease, requeue_after=requeue)) == {moving, expired, idle}
    assert finished not in plans.stalled_plan_ids(db, now=quiet + timedelta(days=1), requeue_after=requeue)


def test_a_phase_enqueued_long_ago_and_never_claimed_makes_its_plan_stalled(db: Database) -> None:
    requeue = timedelta(seconds=60)
    lost = new_plan(db, "lost message")
    opening = phase(db, lost, "opening")
    assert phases.mark_enqueued(db, [opening.id], stale_before=None) == [opening.id]
    sent_at = phase(db, lost, "opening").enqueued_at
    assert sent_at is not None
    wait_for(lambda: datetime.now(UTC) > sent_at, 10, interval=0.01, what="the clock to move")
    final = phase(db, lost, "final")
    phases.mark_enqueued(db, [final.id], stale_before=None)  # the plan moved on; opening's message is lost
    moved = plans.get_plan(db, lost).updated_at
    assert moved > sent_at
    now = sent_at + (moved - sent_at) / 2 + requeue  # the cutoff falls between the two writes
    assert plans.stalled_plan_ids(db, now=now, requeue_after=requeue) == [lost]
    assert plans.stalled_plan_ids(db, now=sent_at + requeue, requeue_after=requeue) == []  # not yet lost


def test_a_phase_is_lost_only_once_it_has_been_ready_for_requeue_after_unclaimed(db: Database) -> None:
    """Departure 5: a canvas marks every phase it carries when it is sent, so a mark alone
    says nothing — ``final`` was marked long before ``opening`` ended and waits for it. It is
    lost once it has been READY (its inputs final, since their ``finished_at``) for
    ``requeue_after`` without a claim or a newer mark. ``side`` runs on a live lease, so the
    plan never looks quiet: only the lost phase can make it stalled."""
    requeue = timedelta(seconds=60)
    plan_id = plans.create_plan(
        db, title="canvas", kind="team", spec={"title": "canvas"}, task_id=None, max_active=100,
        phases=[NewPhase("opening", "opening", 0, []), NewPhase("side", "turn", 1, []),
                NewPhase("final", "final", 2, ["opening"], meta={"terminal": True})]).plan_id
    ids = {p.key: p.id for p in plans.load_state(db, plan_id).phases}
    assert phases.mark_enqueued(db, list(ids.values()), stale_before=None) == list(ids.values())  # one canvas
    assert claim(db, plan_id, "side", "w1", lease=timedelta(seconds=600)) is not None
    sent_at = phase(db, plan_id, "final").enqueued_at
    assert sent_at is not None
    wait_for(lambda: datetime.now(UTC) > sent_at, 10, interval=0.01, what="the clock to move")
    assert claim(db, plan_id, "opening", "w1") is not None
    assert complete(db, plan_id, "opening", 1, "done").status == "completed"
    ready_at = phase(db, plan_id, "opening").finished_at
    assert ready_at is not None and ready_at > sent_at

    def stalled(cutoff: datetime) -> list[str]:
        return plans.stalled_plan_ids(db, now=cutoff + requeue, requeue_after=requeue)

    assert stalled(sent_at + (ready_at - sent_at) / 2) == []  # marked long ago, but ready only recently
    assert stalled(ready_at + timedelta(seconds=1)) == [plan_id]  # ready for requeue_after, never claimed
    wait_for(lambda: datetime.now(UTC) > ready_at, 10, interval=0.01, what="the clock to move")
    assert phases.mark_enqueued(db, [ids["final"]], stale_before=None) == [ids["final"]]  # sent again
    resent_at = phase(db, plan_id, "final").enqueued_at
    assert resent_at is not None and resent_at > ready_at
    assert stalled(ready_at + (resent_at - ready_at) / 2) == []  # its new message is not lost yet
    assert stalled(resent_at + timedelta(seconds=1)) == [plan_id]
    assert claim(db, plan_id, "final", "w1", lease=timedelta(seconds=600)) is not None
    assert stalled(resent_at + timedelta(seconds=1)) == []  # claimed: running on a live lease


def test_a_plan_is_stored_with_its_phases_as_given_and_read_in_plan_order(db: Database) -> None:
    given = [NewPhase("r1.ada", "turn", 1, ["opening"], expert="Ada", round=1, group_key="r1",
                      meta={"tolerate_failed_deps": False}, inputs=["opening"]),
             NewPhase("opening", "opening", 0, [], expert="Mo", meta={"agenda": ["price"]})]
    created = plans.create_plan(db, title="Pricing", kind="board", spec=SPEC, task_id="crm-9", max_active=10,
                                phases=given)
    assert created.created
    plan_id = created.plan_id
    state = plans.load_state(db, plan_id)
    assert (state.plan.title, state.plan.kind, state.plan.spec, state.plan.task_id) == (
        "Pricing", "board", SPEC, "crm-9")
    assert (state.plan.status, state.plan.cancel_requested, state.plan.finished_at) == ("running", False, None)
    assert [p.key for p in state.phases] == ["opening", "r1.ada"]  # by position, not by insertion
    for new, stored in zip(sorted(given, key=lambda p: p.position), state.phases, strict=True):
        assert (stored.kind, stored.expert, stored.round, stored.group_key, stored.position) == (
            new.kind, new.expert, new.round, new.group_key, new.position)
        assert (stored.depends_on, stored.inputs, stored.meta, stored.status, stored.attempt) == (
            new.depends_on, new.inputs, new.meta, "pending", 0)
        assert (stored.plan_id, stored.enqueued_at, stored.lease_owner, stored.finished_at) == (
            plan_id, None, None, None)
    assert plans.get_spec(db, plan_id) == SPEC
    (event,) = outbox.list_events(db, plan_id)
    assert (event.type, event.phase_key, event.data) == ("plan_submitted", None, {
        "title": "Pricing", "kind": "board", "phases": 2, "tenant": "default", "principal": None,
        "documents": 0, "chunks": 0})
    assert [(e.id, e.type, e.data) for e in created.events] == [(event.id, event.type, event.data)]


def test_a_plan_whose_phases_cannot_all_be_stored_stores_nothing(db: Database) -> None:
    """The plan row, its phases and its ``plan_submitted`` event commit together or not at
    all: a phase that cannot be stored (here a duplicate key) leaves no plan behind, and the
    same ``task_id`` is then free."""
    broken = [NewPhase("opening", "opening", 0, []), NewPhase("opening", "final", 1, [])]
    with pytest.raises(Conflict):
        plans.create_plan(db, title="t", kind="board", spec=SPEC, task_id="atomic", max_active=100, phases=broken)
    with pytest.raises(NotFound):
        plans.resolve(db, "atomic")
    assert plans.running_plan_ids(db) == []
    plan_id, created = _submit(db, "atomic")
    assert created and [p.key for p in plans.load_state(db, plan_id).phases] == ["opening"]
    assert event_types(db, plan_id) == ["plan_submitted"]


def test_a_resubmission_is_answered_even_at_the_cap_and_a_cap_of_one_admits_one(db: Database) -> None:
    first, _ = _submit(db, "only", max_active=1)
    assert _submit(db, "only", max_active=1) == (first, False)  # not a new plan: answered, not refused
    with pytest.raises(CapacityExceeded):
        _submit(db, "second", max_active=1)


def test_identical_submissions_that_race_store_one_plan(pg: Database) -> None:
    """Both racers find no plan under the task_id; the first stores it, the second hits
    the unique task_id and answers with the stored plan instead of an error."""
    db = pg
    outcomes: list[tuple[str, bool]] = []

    def submit() -> None:
        outcomes.append(_submit(db, "crm-race"))

    with db.engine.connect() as blocker:
        tx = blocker.begin()
        blocker.execute(text("LOCK TABLE plans IN SHARE MODE"))  # reads pass, inserts wait
        racers = [threading.Thread(target=submit) for _ in range(2)]
        for t in racers:
            t.start()
        try:
            wait_for(lambda: _lock_waiters(db) == len(racers), 30, interval=0.02, what="both racers waiting")
        finally:
            tx.rollback()
        for t in racers:
            t.join(30)
    stored = plans.resolve(db, "crm-race")
    assert sorted(outcomes, key=lambda o: not o[1]) == [(stored, True), (stored, False)]
    assert plans.running_plan_ids(db) == [stored]


def test_different_plans_that_race_for_a_task_id_conflict(pg: Database) -> None:
    db = pg
    outcomes: list[object] = []

    def submit(spec: dict[str, str]) -> None:
        try:
            outcomes.append(_submit(db, "crm-race-2", spec))
        except Conflict as exc:
            outcomes.append(exc)

    with db.engine.connect() as blocker:
        tx = blocker.begin()
        blocker.execute(text("LOCK TABLE plans IN SHARE MODE"))
        racers = [threading.Thread(target=submit, args=(spec,)) for spec in (SPEC, {"title": "another plan"})]
        for t in racers:
            t.start()
        try:
            wait_for(lambda: _lock_waiters(db) == len(racers), 30, interval=0.02, what="both racers waiting")
        finally:
            tx.rollback()
        for t in racers:
            t.join(30)
    stored = plans.resolve(db, "crm-race-2")
    assert [o for o in outcomes if isinstance(o, tuple)] == [(stored, True)]
    (lost,) = [o for o in outcomes if isinstance(o, Conflict)]
    assert str(lost) == f"task_id 'crm-race-2' was already submitted with a different plan ({stored})"


def _lock_waiters(db: Database) -> int:
    with db.engine.connect() as c:
        return int(c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                  "AND wait_event_type = 'Lock'")).scalar() or 0)


def test_a_plan_is_found_by_id_or_task_id_and_an_unknown_one_is_named(db: Database) -> None:
    plan_id, _ = _submit(db, "crm:deal/42")
    other, _ = _submit(db, "crm:deal/43")
    assert plans.resolve(db, plan_id) == plan_id
    assert plans.resolve(db, "crm:deal/42") == plan_id
    assert plans.resolve(db, other) == other
    assert plans.resolve(db, plan_id.upper()) == plan_id  # shaped like a plan id: looked up as one (I20)
    with pytest.raises(NotFound, match="no plan with task_id 'nope'"):
        plans.resolve(db, "nope")
    unknown = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(NotFound, match=f"no plan with id '{unknown}'"):
        plans.resolve(db, unknown)
    for read in (plans.get_plan, plans.load_state, plans.get_spec):
        with pytest.raises(NotFound, match="no plan 'nope'"):
            read(db, "nope")  # type: ignore[operator]
    with pytest.raises(NotFound, match="no plan 'nope'"):
        plans.acquire_resume_guard(db, "nope", "x", timedelta(seconds=1))
    with pytest.raises(NotFound, match="no plan 'nope'"):
        plans.reopen(db, "nope", retry_failed=True)


def test_the_state_of_a_phase_is_its_plans(db: Database) -> None:
    """What a worker reads about the phase it runs is its own plan's: the claim hands back
    the phase with its plan id and the inputs of that plan (two plans with the same keys),
    and the spec it parses is read by that plan id (``plans.state_of_phase`` is gone: the
    claim reads what the worker needs, I33). An unknown phase is never claimed."""
    def chain(title: str) -> str:  # opening -> final, with final's inputs stored as expansion stores them
        return plans.create_plan(db, title=title, kind="board", spec={"title": title}, task_id=None,
                                 max_active=100, phases=[
                                     NewPhase("opening", "opening", 0, []),
                                     NewPhase("final", "final", 1, ["opening"], inputs=["opening"])]).plan_id

    plan_id = chain("this plan")
    other = chain("another plan")
    for pid, text_ in ((plan_id, "this plan's opening"), (other, "another plan's opening")):
        assert claim(db, pid, "opening", "w1") is not None
        assert complete(db, pid, "opening", 1, text_).status == "completed"
    got = claim(db, plan_id, "final", "w1")
    assert got is not None
    assert (got.phase.id, got.phase.plan_id, got.phase.key) == (phase(db, plan_id, "final").id, plan_id, "final")
    opening = phase(db, plan_id, "opening")
    assert [p.id for p in got.inputs] == [opening.id] and got.inputs[0].plan_id == plan_id
    assert got.texts == {opening.id: "this plan's opening"}
    assert plans.get_spec(db, plan_id) == {"title": "this plan"}
    assert plans.get_spec(db, other) == {"title": "another plan"}
    assert phases.claim_phase(db, "00000000-0000-0000-0000-000000000000", owner="w1",
                              lease=timedelta(seconds=5)) is None


def test_a_resume_guard_holds_one_plan_only(db: Database) -> None:
    plan_id = new_plan(db)
    other = new_plan(db, "another plan")
    plans.acquire_resume_guard(db, plan_id, "first", timedelta(seconds=600))
    plans.acquire_resume_guard(db, other, "second", timedelta(seconds=600))  # another plan: free
    with pytest.raises(Busy):
        plans.acquire_resume_guard(db, other, "third", timedelta(seconds=600))


def test_retry_failed_counts_each_retry_and_touches_only_its_plan(db: Database) -> None:
    plan_id = _failed_opening(db)
    other = _failed_opening(db)
    assert sorted(plans.reopen(db, plan_id, retry_failed=True).keys) == ["final", "opening"]
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "retry_requested"]
    assert sorted(event.data["phases"]) == ["final", "opening"]
    assert {p.status for p in plans.load_state(db, other).phases} == {"failed", "skipped"}

    assert {p.retries_requested for p in plans.load_state(db, other).phases} == {0}

    again = claim(db, plan_id, "opening", "w1")  # the retry fails too, and is retried again
    assert again is not None and again.phase.attempt == 2
    assert _fail(db, plan_id, again, "refused again") == "failed"
    phases.skip_phases(db, plan_id, {"a phase it depends on did not complete": ["final"]})
    assert plans.finish_plan(db, plan_id, "failed", error_code="llm.fatal", error_message="refused again")
    assert sorted(plans.reopen(db, plan_id, retry_failed=True).keys) == ["final", "opening"]
    assert phase(db, plan_id, "opening").retries_requested == 2
    assert phase(db, plan_id, "final").retries_requested == 0  # skipped, never failed


def test_retry_failed_reopens_a_plan_that_ran_out_of_budget(db: Database) -> None:
    plan_id = new_plan(db)
    got = claim(db, plan_id, "opening", "w1")
    assert got is not None
    assert _fail(db, plan_id, got, "spent", code="llm.budget_exhausted") == "failed"
    assert plans.finish_plan(db, plan_id, "budget_exhausted", error_code="plan.budget_exhausted",
                             error_message="spent")
    assert plans.reopen(db, plan_id, retry_failed=True).keys == ["opening"]
    plan = plans.get_plan(db, plan_id)
    assert (plan.status, plan.error_code, plan.error_message, plan.finished_at) == ("running", None, None, None)


def test_finishing_records_the_outcome(db: Database) -> None:
    plan_id = new_plan(db)
    before = datetime.now(UTC)
    assert plans.finish_plan(db, plan_id, "failed", error_code="llm.auth", error_message="phase opening failed")
    plan = plans.get_plan(db, plan_id)
    assert (plan.status, plan.error_code, plan.error_message) == ("failed", "llm.auth", "phase opening failed")
    assert plan.finished_at is not None and plan.finished_at >= before and plan.updated_at >= before
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "plan_finished"]
    assert event.data == {"status": "failed", "error_code": "llm.auth", "error": "phase opening failed"}


def test_the_reconciler_takes_the_longest_stalled_plans_first(db: Database) -> None:
    ids = [new_plan(db, f"plan {i}") for i in range(3)]
    first = phase(db, ids[0], "opening")
    phases.mark_enqueued(db, [first.id], stale_before=None)  # the oldest plan moved last
    latest = plans.get_plan(db, ids[0]).updated_at
    assert all(plans.get_plan(db, pid).updated_at < latest for pid in ids[1:])
    later = latest + timedelta(seconds=120)
    assert plans.stalled_plan_ids(db, now=later, requeue_after=timedelta(seconds=60), limit=2) == ids[1:]
    assert plans.running_plan_ids(db, limit=2) == ids[1:]


def test_a_completed_phase_with_an_old_enqueue_mark_does_not_stall_its_plan(db: Database) -> None:
    plan_id = new_plan(db)
    opening = phase(db, plan_id, "opening")
    assert claim(db, plan_id, "opening", "w1") is not None
    phases.mark_enqueued(db, [opening.id], stale_before=None)  # a late advance marks the running phase
    marked_at = phase(db, plan_id, "opening").enqueued_at
    assert marked_at is not None
    wait_for(lambda: datetime.now(UTC) > marked_at, 10, interval=0.01, what="the clock to move")
    assert complete(db, plan_id, "opening", 1, "done").status == "completed"  # bumps updated_at
    moved = plans.get_plan(db, plan_id).updated_at
    assert moved > marked_at and phase(db, plan_id, "opening").enqueued_at == marked_at
    requeue = timedelta(seconds=60)
    now = marked_at + (moved - marked_at) / 2 + requeue  # the mark is older than the cutoff, the progress not
    assert plans.stalled_plan_ids(db, now=now, requeue_after=requeue) == []
