"""What a claim hands its phase, on Postgres (one folded statement) and on SQLite (one
transaction): the phase's transitive inputs — stored with it at expansion, not only its
direct dependencies — in plan order, each with its full text from the content store
(never the short summary the phase row keeps), and the ``phase_started`` event it stored
in the same unit, published as stored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus, drain
from orchestrator.core.settings import Settings
from orchestrator.gateway.providers.offline import OfflineProvider
from storage import Database, connect, contents, outbox, phases, plans
from storage.status import Outcome
from tasks.lease import Lease
from tasks.runner import PhaseRunner
from tests.integration.durability import board_plan

OWNER = "it:1:claim"


class InProcess:
    """The control plane and a phase runner in this process, on one database."""

    def __init__(self, url: str) -> None:
        self.settings = Settings(database_url=url, offline_latency=0.0)
        self.db: Database = connect(url)
        self.coordinator = Coordinator(self.db, self.settings, RecordingDispatcher(), MemoryBus())
        self.bus = MemoryBus()
        self.runner = PhaseRunner(self.db, self.settings, self.bus, {"offline": OfflineProvider()})

    def deliver(self, plan_id: str, key: str) -> Outcome | None:
        phase_id = plans.load_state(self.db, plan_id).by_key()[key].id
        work = self.runner.claim(phase_id, owner=OWNER, plan_id=plan_id)
        return None if work is None else self.runner.execute(work, Lease(phase_id, work.attempt))


@pytest.fixture(params=["postgresql", "sqlite"])
def planes(request: pytest.FixtureRequest) -> Iterator[InProcess]:
    if request.param == "postgresql":
        url = request.getfixturevalue("clean_db")
    else:
        url = request.getfixturevalue("sqlite_url")
    p = InProcess(url)
    yield p
    p.db.dispose()


def test_a_claim_reads_every_transitive_input_in_full_and_stores_its_start(planes: InProcess) -> None:
    plan_id = planes.coordinator.submit(board_plan("claim inputs", experts=2, words=200)).plan_id
    done = ["opening", "r1.dana", "r1.ravi", "r1.summary"]
    for key in done:
        assert planes.deliver(plan_id, key) == Outcome.COMPLETED
    by_key = plans.load_state(planes.db, plan_id).by_key()
    final = by_key["final"]
    assert final.depends_on == ["r1.summary"] and final.inputs == done  # one direct input, four in all
    sub = planes.bus.subscribe(plan_id)

    work = planes.runner.claim(final.id, owner=OWNER, plan_id=plan_id)

    assert work is not None and work.attempt == 1
    assert [p.key for p in work.inputs] == done  # transitive, in plan order
    assert all(p.status == "completed" for p in work.inputs)
    for key in done:
        full = contents.read_text(planes.db, plan_id, key)
        summary = by_key[key].summary
        assert full is not None and summary is not None and len(summary) < len(full)  # a summary is not the text
        assert work.texts[by_key[key].id] == full
    assert set(work.texts) == {by_key[k].id for k in done}

    [started] = [e for e in outbox.list_events(planes.db, plan_id)
                 if e.type == "phase_started" and e.phase_key == "final"]
    assert started.data == {"attempt": 1, "expert": final.expert, "kind": "final_summary", "round": 2,
                            "worker": OWNER, "k": 4, "n": 5}
    assert list(drain(sub, 0)) == [started.message()]  # published as stored, once
    assert planes.runner.claim(final.id, owner=OWNER, plan_id=plan_id) is None  # a duplicate claims nothing
    assert [e.type for e in outbox.list_events(planes.db, plan_id, after=started.id)] == []


def _fail(planes: InProcess, plan_id: str, key: str) -> None:
    phase_id = plans.load_state(planes.db, plan_id).by_key()[key].id
    work = planes.runner.claim(phase_id, owner=OWNER, plan_id=plan_id)
    assert work is not None
    assert phases.fail_phase(planes.db, plan_id=plan_id, phase_id=phase_id, attempt=work.attempt,
                             code="llm.unavailable", message="the model refused").status == "failed"


def test_a_tolerant_claim_gets_its_failed_and_skipped_inputs_without_text(planes: InProcess) -> None:
    """A board's round summary goes on without a missing expert: its claim hands it every
    input — the failed and the skipped ones too, with their status and no text — and the
    request names the absent experts."""
    plan_id = planes.coordinator.submit(board_plan("missing experts", experts=3)).plan_id
    assert planes.deliver(plan_id, "opening") == Outcome.COMPLETED
    assert planes.deliver(plan_id, "r1.dana") == Outcome.COMPLETED
    _fail(planes, plan_id, "r1.ravi")
    phases.skip_phases(planes.db, plan_id, {"the expert left": ["r1.sofia"]})
    by_key = plans.load_state(planes.db, plan_id).by_key()
    summary = by_key["r1.summary"]
    assert summary.meta.get("tolerate_failed_deps") is True

    work = planes.runner.claim(summary.id, owner=OWNER, plan_id=plan_id)

    assert work is not None and work.attempt == 1
    assert [(p.key, p.status) for p in work.inputs] == [
        ("opening", "completed"), ("r1.dana", "completed"), ("r1.ravi", "failed"), ("r1.sofia", "skipped")]
    assert set(work.texts) == {by_key["opening"].id, by_key["r1.dana"].id}  # text of completed inputs only
    assert work.texts[by_key["r1.dana"].id] == contents.read_text(planes.db, plan_id, "r1.dana")
    _, request = planes.runner.prepare(work)
    assert request.hints["absent"] == ["Ravi", "Sofia"] and request.hints["speakers"] == ["Dana"]
    assert [b.source for b in request.context] == ["opening", "r1.dana"]


def test_a_claim_refuses_a_phase_whose_needed_input_failed(planes: InProcess) -> None:
    """With ``missing_expert: fatal`` the summary needs every turn: while a failed turn's
    successors are still pending (no advance has skipped them yet), a claim of them takes
    nothing and stores nothing; after the advance they are skipped and never claimed."""
    plan_id = planes.coordinator.submit(board_plan("fatal", plan={"missing_expert": "fatal"})).plan_id
    assert planes.deliver(plan_id, "opening") == Outcome.COMPLETED
    assert planes.deliver(plan_id, "r1.dana") == Outcome.COMPLETED
    _fail(planes, plan_id, "r1.ravi")
    state = plans.load_state(planes.db, plan_id).by_key()
    assert not state["r1.summary"].meta.get("tolerate_failed_deps")
    before = [e.id for e in outbox.list_events(planes.db, plan_id)]

    for key in ("r1.summary", "final"):
        assert planes.runner.claim(state[key].id, owner=OWNER, plan_id=plan_id) is None, key
    after = plans.load_state(planes.db, plan_id).by_key()
    assert [(after[k].status, after[k].attempt) for k in ("r1.summary", "final")] == [("pending", 0)] * 2
    assert [e.id for e in outbox.list_events(planes.db, plan_id)] == before  # no phase_started

    planes.coordinator.advance(plan_id)
    done = plans.load_state(planes.db, plan_id)
    assert {k: done.by_key()[k].status for k in ("r1.summary", "final")} == {"r1.summary": "skipped",
                                                                             "final": "skipped"}
    assert done.plan.status == "failed" and done.plan.error_code == "llm.unavailable"
    assert planes.runner.claim(done.by_key()["r1.summary"].id, owner=OWNER, plan_id=plan_id) is None
