"""Verdicts, decisions and early stops at the storage boundary, on Postgres (and SQLite):

- an expert's verdict is written by the folded completion statement — no extra statement —
  and read back through ``plans.load_state`` as it was given; a phase without one stores SQL
  NULL;
- the decision phase completes on the plain path, its ``decision_recorded`` event stored
  before ``phase_completed`` in the same transaction;
- an early stop skips the later rounds and rewires what waited for them in the round
  summary's completing transaction; a fenced attempt skips nothing; and the completion
  retried after its COMMIT was lost changes nothing (no second event, no second skip).

Repository calls only (``storage.phases``, ``storage.plans``); the verdicts and the decision
are built by the deliberation code the worker uses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from orchestrator.deliberation.verdicts import read_verdict
from orchestrator.plan import tally
from orchestrator.plan.expand import expand
from orchestrator.plan.schema import BoardPlan, dump_plan, load_plan
from storage import Database, connect, event_shapes, outbox, phases, plans
from storage.models import Phase
from storage.status import Outcome, PhaseStatus
from tests.sqlcount import StatementCounter
from tests.stored_rows import content_rows

COMPLETE = "storage.phases.complete_phase"
CHOICE = {"type": "choice", "options": ["Adopt usage pricing", "Keep the flat plan"]}
LEASE = timedelta(seconds=60)


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest) -> Iterator[Database]:
    url = request.getfixturevalue("clean_db" if request.param == "postgresql" else "sqlite_url")
    database = connect(url, pool_size=4)
    yield database
    database.dispose()


def tallied_board(rounds: int = 1, **changes: Any) -> BoardPlan:
    plan = load_plan({
        "kind": "board", "title": "Pricing, by vote", "question": "Should Ledgerly move to usage pricing?",
        "rounds": rounds, "moderator": {"name": "Morgan", "role": "Chair"},
        "experts": [{"name": "Dana", "role": "CFO"}, {"name": "Ravi", "role": "CTO"}],
        "answer": CHOICE, "decide": "vote", **changes,
    })
    assert isinstance(plan, BoardPlan)
    return plan


def store(db: Database, plan: BoardPlan) -> str:
    """The plan and its phases as submit stores them."""
    created = plans.create_plan(db, title=plan.title, kind=plan.kind, spec=dump_plan(plan), phases=expand(plan),
                                task_id=None, max_active=100)
    assert created.created
    return created.plan_id


def by_key(db: Database, plan_id: str) -> dict[str, Any]:
    return plans.load_state(db, plan_id).by_key()


def claim(db: Database, plan_id: str, key: str, owner: str = "w1") -> int:
    claimed = phases.claim_phase(db, by_key(db, plan_id)[key].id, owner=owner, lease=LEASE)
    assert claimed is not None, key
    return claimed.phase.attempt


def finish(db: Database, plan_id: str, key: str, attempt: int, text: str, **kw: Any) -> phases.Finished:
    return phases.complete_phase(db, plan_id=plan_id, phase_id=by_key(db, plan_id)[key].id, attempt=attempt,
                                 text=text, summary=text[:40], truncated=False, fallback=False, offloaded=False, **kw)


def turn(name: str, answer: str, confidence: float) -> tuple[str, dict[str, Any]]:
    """An expert's text ending with its verdict line, and the verdict the worker reads from it."""
    text = (f"Position: SUPPORT — {name} weighs it — with care ✓.\n"
            f'Verdict: {{"answer": "{answer}", "confidence": {confidence}, "reason": "margin — 12 % ✓"}}')
    return text, read_verdict(text, tallied_board().answer).as_json()  # type: ignore[arg-type]


def run_round_one(db: Database, plan_id: str) -> None:
    for key, (text, verdict) in {"opening": ("We meet.", None),
                                 "r1.dana": turn("Dana", "A", 0.8),
                                 "r1.ravi": turn("Ravi", "Adopt usage pricing", 0.65)}.items():
        assert finish(db, plan_id, key, claim(db, plan_id, key), text, verdict=verdict).status == Outcome.COMPLETED


def events(db: Database, plan_id: str) -> list[tuple[str | None, str]]:
    return [(e.phase_key, e.type) for e in outbox.list_events(db, plan_id, limit=10_000)]


# ---------------------------------------------------------------- an expert's verdict


def test_a_verdict_is_written_by_the_completion_and_read_back_as_given(db: Database) -> None:
    plan_id = store(db, tallied_board())
    attempt = claim(db, plan_id, "opening")
    assert finish(db, plan_id, "opening", attempt, "We meet.").status == Outcome.COMPLETED

    text, verdict = turn("Dana", "A", 0.8)
    attempt = claim(db, plan_id, "r1.dana")
    counter = StatementCounter().attach(db.engine)
    try:
        done = finish(db, plan_id, "r1.dana", attempt, text, verdict=verdict)
        cost = counter.snapshot()["statements"][COMPLETE]
    finally:
        counter.detach()
    assert done.status == Outcome.COMPLETED and [e.type for e in done.events] == ["phase_completed"]
    if db.sql.folds:
        assert cost == 3  # lock, the one folded statement, COMMIT: the verdict costs no statement

    stored = by_key(db, plan_id)["r1.dana"]
    assert stored.verdict == verdict == {"answer": "Adopt usage pricing", "confidence": 0.8,
                                         "reason": "margin — 12 % ✓"}
    assert (stored.status, stored.attempt, stored.lease_owner) == (PhaseStatus.COMPLETED, attempt, None)
    with db.transaction() as s:  # no verdict is SQL NULL, not the JSON literal null
        empty = set(s.scalars(select(Phase.key).where(Phase.plan_id == plan_id, Phase.verdict.is_(None))))
    assert empty == {p.key for p in expand(tallied_board())} - {"r1.dana"}
    assert by_key(db, plan_id)["opening"].verdict is None


def test_a_stale_attempts_verdict_is_never_stored(db: Database) -> None:
    plan_id = store(db, tallied_board())
    assert finish(db, plan_id, "opening", claim(db, plan_id, "opening"), "We meet.").status == Outcome.COMPLETED
    phase_id = by_key(db, plan_id)["r1.dana"].id
    assert phases.claim_phase(db, phase_id, owner="w1", lease=timedelta(milliseconds=1)) is not None
    time.sleep(0.02)  # w1 goes silent and its lease runs out; w2 takes the turn over
    fresh = phases.claim_phase(db, phase_id, owner="w2", lease=LEASE)
    assert fresh is not None and fresh.phase.attempt == 2
    stale_text, stale_verdict = turn("Dana", "B", 0.99)
    text, verdict = turn("Dana", "A", 0.7)
    assert finish(db, plan_id, "r1.dana", 1, stale_text, verdict=stale_verdict).status == Outcome.FENCED
    assert finish(db, plan_id, "r1.dana", 2, text, verdict=verdict).status == Outcome.COMPLETED
    assert finish(db, plan_id, "r1.dana", 1, stale_text, verdict=stale_verdict).status == Outcome.FENCED
    stored = by_key(db, plan_id)["r1.dana"]
    assert (stored.attempt, stored.verdict) == (2, verdict) and content_rows(db, plan_id)[phase_id] == 1


# ---------------------------------------------------------------- the decision


def test_the_decision_is_stored_with_its_event_before_phase_completed(db: Database) -> None:
    plan = tallied_board()
    plan_id = store(db, plan)
    run_round_one(db, plan_id)
    finish(db, plan_id, "r1.summary", claim(db, plan_id, "r1.summary"), "Both lean to adopting.")

    attempt = claim(db, plan_id, "decision")
    state = plans.load_state(db, plan_id)
    inputs = [p for p in state.phases if p.key in state.by_key()["decision"].inputs]
    decision = tally.decide(plan, plan_id, inputs)
    record = decision.as_json()
    done = finish(db, plan_id, "decision", attempt, tally.decision_text(decision), verdict=record,
                  events=[event_shapes.decision_recorded("decision", record)])
    assert done.status == Outcome.COMPLETED
    assert [e.type for e in done.events] == ["decision_recorded", "phase_completed"]  # what is published

    stored = by_key(db, plan_id)["decision"]
    assert stored.verdict == record and stored.verdict["key"] == "Adopt usage pricing"
    assert [v["phase"] for v in stored.verdict["votes"]] == ["r1.dana", "r1.ravi"]
    assert events(db, plan_id)[-2:] == [("decision", "decision_recorded"), ("decision", "phase_completed")]
    [recorded] = [e for e in outbox.list_events(db, plan_id, limit=10_000) if e.type == "decision_recorded"]
    assert recorded.data == record == done.events[0].data
    assert done.events[1].data["k"] == 5 and done.events[1].data["n"] == 6

    # the completion retried after its COMMIT was lost: the stored outcome, nothing written again
    before = (plans.load_state(db, plan_id), events(db, plan_id))
    again = finish(db, plan_id, "decision", attempt, tally.decision_text(decision), verdict=record,
                   events=[event_shapes.decision_recorded("decision", record)])
    assert again.status == Outcome.COMPLETED and again.events == ()
    assert (plans.load_state(db, plan_id), events(db, plan_id)) == before


# ---------------------------------------------------------------- an early stop


def _stop(plan: BoardPlan, after: int = 1) -> phases.EarlyStop:
    later = [p.key for p in expand(plan) if (p.round or 0) > after and p.kind in ("turn", "round_summary")]
    event = event_shapes.rounds_skipped(after_round=after, rounds=list(range(after + 1, plan.rounds + 1)),
                                        phases=later, agreement=1.0, threshold=0.8, tokens_saved=120 * len(later))
    return phases.EarlyStop(skip=later, resume_from=f"r{after}.summary", reason="100% agreed after round 1",
                            tokens_per_phase=120, event=event)


def test_an_early_stop_skips_the_later_rounds_and_rewires_what_waited(db: Database) -> None:
    plan = tallied_board(rounds=3, stop_when={"agreement": 0.8})
    plan_id = store(db, plan)
    run_round_one(db, plan_id)
    stop = _stop(plan)
    attempt = claim(db, plan_id, "r1.summary")
    done = finish(db, plan_id, "r1.summary", attempt, "Both adopt.", early_stop=stop)
    assert done.status == Outcome.COMPLETED
    assert [e.type for e in done.events] == ["rounds_skipped", "phase_completed"]
    assert done.events[-1].data["k"] == 4 + 6 and done.events[-1].data["n"] == 12  # skipped phases are final

    state = plans.load_state(db, plan_id)
    rows = state.by_key()
    assert set(stop.skip) == {"r2.dana", "r2.ravi", "r2.summary", "r3.dana", "r3.ravi", "r3.summary"}
    for key in stop.skip:
        row = rows[key]
        assert (row.status, row.error_code, row.error_message) == (PhaseStatus.SKIPPED, "plan.early_stop",
                                                                   "100% agreed after round 1")
        assert row.meta["tokens_saved"] == 120 and row.finished_at is not None and row.enqueued_at is None
        assert phases.claim_phase(db, row.id, owner="w9", lease=LEASE) is None  # never runs
    assert rows["decision"].depends_on == ["r1.summary"] and rows["final"].depends_on == ["decision"]
    assert rows["r2.dana"].depends_on == ["r1.summary"]  # the skipped keep theirs
    assert rows["r1.summary"].status == PhaseStatus.COMPLETED
    [skipped] = [e for e in outbox.list_events(db, plan_id, limit=10_000) if e.type == "rounds_skipped"]
    assert skipped.data == stop.event.data and skipped.data["tokens_saved"] == 720
    assert claim(db, plan_id, "decision") == 1  # ready at once: it waits for round one only

    # the round summary's completion retried after its COMMIT was lost: nothing changes
    before = (plans.load_state(db, plan_id), events(db, plan_id))
    again = finish(db, plan_id, "r1.summary", attempt, "Both adopt.", early_stop=stop)
    assert again.status == Outcome.COMPLETED and again.events == ()
    assert (plans.load_state(db, plan_id), events(db, plan_id)) == before


def test_a_fenced_round_summary_skips_nothing(db: Database) -> None:
    plan = tallied_board(rounds=2, stop_when={"agreement": 0.8})
    plan_id = store(db, plan)
    run_round_one(db, plan_id)
    attempt = claim(db, plan_id, "r1.summary")
    assert finish(db, plan_id, "r1.summary", attempt + 1, "Both adopt.", early_stop=_stop(plan)).status == "fenced"
    rows = plans.load_state(db, plan_id).by_key()
    assert {rows[k].status for k in ("r2.dana", "r2.ravi", "r2.summary")} == {PhaseStatus.PENDING}
    assert rows["decision"].depends_on == ["r2.summary"]
    assert "rounds_skipped" not in [t for _, t in events(db, plan_id)]


def test_resume_leaves_an_early_stop_in_place(db: Database) -> None:
    plan = tallied_board(rounds=2, stop_when={"agreement": 0.8})
    plan_id = store(db, plan)
    run_round_one(db, plan_id)
    finish(db, plan_id, "r1.summary", claim(db, plan_id, "r1.summary"), "Both adopt.", early_stop=_stop(plan))
    reopened = plans.reopen(db, plan_id, retry_failed=True)
    assert reopened.keys == []
    rows = plans.load_state(db, plan_id).by_key()
    assert {rows[k].status for k in ("r2.dana", "r2.ravi", "r2.summary")} == {PhaseStatus.SKIPPED}
