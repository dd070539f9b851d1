"""``conclave eval`` end to end on the in-process planes: the harness submits through the
:class:`Conclave` facade over the local backend, whose coordinator sends to the recording
dispatcher, and the planes run what it recorded whenever the harness reads a plan (the fleet
at work). Everything asserted is stored state or what the user is shown."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.client.backend import PlanSource
from orchestrator.client.conclave import Conclave
from orchestrator.client.local import LocalBackend
from orchestrator.control.coordinator import SubmitResult
from orchestrator.control.eval_records import EvalRecords
from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import EvalConflict, InvalidEval
from orchestrator.evaluation import commands
from orchestrator.evaluation.collect import collect
from orchestrator.evaluation.harness import Harness, RunResult
from orchestrator.evaluation.spec import resolve
from orchestrator.plan.views import PlanView
from storage import evals
from storage.models import Plan, UsageRow
from tests.unit.planes import Planes

SOLVER = {"provider": "offline", "options": {"latency": 0, "solver": {"skill": 0.7, "seed": 3}}}
# the same solver writing 12-word turns in one chunk each: the same answers, less prose to write and stream
# (for the cases that do not weigh tokens)
TERSE = {"provider": "offline", "options": {"latency": 0, "words": 12, "chunk_chars": 10_000,
                                            "solver": {"skill": 0.7, "seed": 3}}}
PANEL = {"kind": "team", "title": "Panel", "question": "Answer: {question}", "decide": "vote", "divergence": "off",
         "experts": [{"name": n, "role": "Solver", "model": "solver"} for n in ("Ada", "Bo", "Cy")],
         "phases": [{"id": n.lower(), "expert": n, "prompt": "Solve it."} for n in ("Ada", "Bo", "Cy")]}


class Crash(Exception):
    """The process running the eval dies (Ctrl-C, a lost machine) at a submission."""


class PlanesBackend(LocalBackend):
    """The local backend over the planes' database and coordinator: submitting stores the plan
    and records its canvas; reading plans first runs every recorded canvas, as a worker would."""

    def __init__(self, planes: Planes, *, crash_after: int | None = None) -> None:  # no Celery app, no worker
        self.settings, self.db, self.bus, self.coordinator = planes.settings, planes.db, planes.bus, planes.coordinator
        self.reads, self.evals = PlanReads(planes.db), EvalRecords(planes.db)
        self.planes, self.crash_after, self.submissions = planes, crash_after, 0

    def submit_result(self, plan: PlanSource) -> SubmitResult:
        if self.crash_after is not None and self.submissions >= self.crash_after:
            raise Crash
        self.submissions += 1
        return super().submit_result(plan)

    def get(self, plan_id: str) -> PlanView:
        self.planes.run_all(max_canvases=100_000)
        return super().get(plan_id)

    def list_plans(self, **query: Any) -> dict[str, Any]:
        self.planes.run_all(max_canvases=100_000)
        return super().list_plans(**query)

    def close(self) -> None:
        return None


def spec_file(tmp_path: Path, **changes: Any) -> Path:
    (tmp_path / "panel.yaml").write_text(yaml.safe_dump(PANEL))
    spec = {"name": "arith", "generate": {"n": 30, "options": 2, "seed": 7}, "plan": "panel.yaml",
            "models": {"solver": SOLVER},
            "baselines": {"single": {"model": "solver"}, "self_consistency": {"model": "solver", "n": 3}}}
    spec.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run(planes: Planes, path: Path, *, crash_after: int | None = None, in_flight: int = 8) -> RunResult:
    conclave = Conclave(backend=PlanesBackend(planes, crash_after=crash_after))
    return Harness(conclave, resolve(path), in_flight=in_flight, sleep=lambda s: None).run()


def stored_plans(planes: Planes) -> dict[str, Any]:
    with planes.db.transaction() as s:
        return {p.task_id: (p.id, p.status, list(p.labels)) for p in s.query(Plan).all()}


def usage_rows(planes: Planes) -> list[tuple[str, str, int, int]]:
    with planes.db.transaction() as s:
        return sorted((u.plan_id, u.phase_id, u.attempt, u.seq) for u in s.query(UsageRow).all())


@pytest.fixture()
def eval_spec(tmp_path: Path) -> Path:
    return spec_file(tmp_path)


def hand_count(planes: Planes, plan_id: str, expected: str) -> tuple[str, bool]:
    """The plurality of the stored expert verdicts, and whether it is the expected answer."""
    votes = Counter(p.verdict["answer"] for p in planes.state(plan_id).phases if p.kind == "expert" and p.verdict)
    (winner, n), *rest = votes.most_common()
    assert not rest or rest[0][1] < n  # an odd panel of two options never ties
    return winner, winner == expected


def test_a_small_eval_stores_every_plan_and_its_outcomes_are_the_stored_decisions(planes: Planes,
                                                                                   tmp_path: Path) -> None:
    eval_spec = spec_file(tmp_path, generate={"n": 10, "options": 2, "seed": 7},  # 30 plans, 8 in flight
                          models={"solver": TERSE})
    result = run(planes, eval_spec)
    stored = stored_plans(planes)
    assert len(stored) == 30 and result.submitted == 30 and result.reused == 0 and result.created
    record = evals.get_eval(planes.db, "arith", tenant="default")
    assert record.spec == resolve(eval_spec).record  # the record the report is rebuilt from
    for arm in ("panel", "single", "self_consistency"):
        for item in record.spec["items"]:
            _, status, labels = stored[f"eval:arith:{arm}:{item['id']}"]
            assert status == "completed" and labels == ["eval=arith", f"arm={arm}"]
    assert len(result.outcomes) == 30
    for o in result.outcomes:
        state = planes.state(o.plan_id)
        decision = next(p for p in state.phases if p.kind == "decision")
        assert o.answer == decision.verdict["answer"] and o.status == "completed"  # the stored decision
        winner, right = hand_count(planes, o.plan_id, str(o.expected))
        assert (o.answer, o.correct) == (winner, right)
        experts = [p for p in state.phases if p.kind == "expert"]
        assert o.rounds == [{p.expert: p.verdict["answer"] for p in experts}] and o.rounds_planned == 1
        assert o.rounds_correct == [{p.expert: p.verdict["answer"] == o.expected for p in experts}]
        assert o.tokens == sum(u.input_tokens + u.output_tokens for u in planes.usage(o.plan_id)) > 0
    by_arm = Counter(o.arm for o in result.outcomes if o.correct)
    assert by_arm == Counter({s.name: s.correct for s in result.stats})  # what the progress showed
    assert [len(o.rounds[0]) for o in result.outcomes[:1]] == [3]
    # the report rebuilt from the database alone says the same
    assert collect(Conclave(backend=PlanesBackend(planes)), record) == result.outcomes


def test_running_an_eval_again_runs_nothing_and_spends_nothing(planes: Planes, tmp_path: Path) -> None:
    path = spec_file(tmp_path, generate={"n": 8, "options": 2, "seed": 7}, models={"solver": TERSE})
    first = run(planes, path)
    plans, usage = stored_plans(planes), usage_rows(planes)
    assert len(plans) == 24 and usage
    again = run(planes, path)
    assert stored_plans(planes) == plans and usage_rows(planes) == usage  # no new plan, no new usage row
    assert again.submitted == 0 and again.reused == 24 and not again.created
    assert again.outcomes == first.outcomes


def test_an_interrupted_eval_goes_on_where_it_stopped_and_reruns_nothing_that_finished(
        planes: Planes, tmp_path: Path) -> None:
    eval_spec = spec_file(tmp_path, generate={"n": 10, "options": 2, "seed": 7}, models={"solver": TERSE})
    with pytest.raises(Crash):
        run(planes, eval_spec, crash_after=13)  # in the middle of a round of submissions (8 in flight)
    planes.dispatcher.take()  # what was sent for the plans still running died with the process
    before = stored_plans(planes)
    finished = {tid: v for tid, v in before.items() if v[1] == "completed"}
    waiting = {tid: v for tid, v in before.items() if v[1] == "running"}
    assert len(before) == 13 and finished and waiting
    spent = {tid: [u for u in usage_rows(planes) if u[0] == v[0]] for tid, v in finished.items()}
    attempts = {tid: [p.attempt for p in planes.state(v[0]).phases] for tid, v in finished.items()}

    result = run(planes, eval_spec)
    after = stored_plans(planes)
    assert len(after) == 30 and all(v[1] == "completed" for v in after.values())
    assert {tid: after[tid][0] for tid in before} == {tid: v[0] for tid, v in before.items()}  # the same plans
    for tid, (plan_id, _, _) in finished.items():  # not run again: not one more call, not one more attempt
        assert [u for u in usage_rows(planes) if u[0] == plan_id] == spent[tid]
        assert [p.attempt for p in planes.state(plan_id).phases] == attempts[tid]
    assert result.submitted == 17 and result.reused == len(finished) and len(result.outcomes) == 30
    assert [e.type for e in planes.events(next(iter(waiting.values()))[0])].count("resume_requested") == 1


def test_an_eval_of_the_same_name_and_another_spec_is_refused(planes: Planes, eval_spec: Path,
                                                              tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    run(planes, spec_file(other, generate={"n": 4, "options": 2, "seed": 7}))
    plans = stored_plans(planes)
    with pytest.raises(EvalConflict) as refused:
        run(planes, eval_spec)
    assert "eval 'arith' already exists with a different spec" in refused.value.message
    assert "another name" in refused.value.message and refused.value.details[0]["field"] == "name"
    assert stored_plans(planes) == plans  # nothing was submitted for it


def test_a_plan_the_deployment_refuses_is_reported_before_the_name_is_taken(planes: Planes, tmp_path: Path) -> None:
    path = spec_file(tmp_path, baselines={"single": {"model": "nobody"}})
    with pytest.raises(InvalidEval) as refused:
        run(planes, path)
    assert refused.value.details[0]["field"] == "baselines.single"
    assert "the single plan of item 'gen-7-0' was refused" in refused.value.message
    with pytest.raises(evals.NotFound):
        evals.get_eval(planes.db, "arith", tenant="default")


def test_self_consistency_sized_auto_matches_the_panel_s_tokens_and_keeps_its_n_on_resume(
        planes: Planes, tmp_path: Path) -> None:
    path = spec_file(tmp_path, generate={"n": 12, "options": 2, "seed": 7},
                     baselines={"single": {"model": "solver"}, "self_consistency": {"model": "solver", "n": "auto"}})
    result = run(planes, path, in_flight=4)
    assert result.samples == 3  # a three-expert panel spends three single calls per item
    sc = [o for o in result.outcomes if o.arm == "self_consistency"]
    assert len(sc) == 12 and all(len(o.rounds[0]) == 3 for o in sc)
    panel = [o.tokens for o in result.outcomes if o.arm == "panel"]
    assert abs(sum(o.tokens for o in sc) / len(sc) - sum(panel) / len(panel)) < 0.2 * sum(panel) / len(panel)
    again = run(planes, path)
    assert again.samples == 3 and again.submitted == 0
    alone = tmp_path / "alone"  # no single arm: one sample costs what one of the panel's first drafts costs
    alone.mkdir()
    path = spec_file(alone, name="alone", generate={"n": 4, "options": 2, "seed": 7},
                     baselines={"self_consistency": {"model": "solver", "n": "auto"}})
    assert run(planes, path).samples == 3


def test_free_text_is_graded_by_one_judge_plan_per_item_and_answer(planes: Planes, tmp_path: Path) -> None:
    path = spec_file(tmp_path, generate={"n": 3, "options": 2, "seed": 7}, baselines={},
                     scoring={"judge": {"model": "grader"}},
                     models={"solver": SOLVER, "grader": {"provider": "offline", "options": {"latency": 0}}})
    result = run(planes, path)
    stored = stored_plans(planes)
    judges = {tid: v for tid, v in stored.items() if ":judge:" in tid}
    assert judges and all(v[2] == ["eval=arith", "arm=judge"] for v in judges.values())
    given = {(o.item_id, str(a).casefold()) for o in result.outcomes for r in o.rounds for a in r.values()}
    given |= {(o.item_id, str(o.answer).casefold()) for o in result.outcomes}
    assert len(judges) == len(given)  # one per item and distinct answer, never two
    for o in result.outcomes:
        judge_id = next(v[0] for tid, v in judges.items() if tid.startswith(f"eval:arith:judge:{o.item_id}:")
                        and _judged(planes, v[0]) == o.answer)
        assert o.correct == (_decision(planes, judge_id) == "correct")
    again = run(planes, path)
    assert again.submitted == 0 and again.outcomes == result.outcomes


def _decision(planes: Planes, plan_id: str) -> str:
    return next(p.verdict["answer"] for p in planes.state(plan_id).phases if p.kind == "decision")


def _judged(planes: Planes, plan_id: str) -> str:
    """The candidate answer a judge plan was asked about, from its stored question."""
    question = planes.state(plan_id).plan.spec["question"]
    return question.split("Candidate answer: ", 1)[1].split("\n", 1)[0]


def test_the_commands_print_the_report_and_rebuild_it_from_the_database(planes: Planes, eval_spec: Path) -> None:
    from io import StringIO

    from rich.console import Console

    def console() -> tuple[Console, StringIO]:
        buf = StringIO()
        return Console(file=buf, width=120), buf

    conclave = Conclave(backend=PlanesBackend(planes))
    (out, printed), (err, progress) = console(), console()
    assert commands.run(conclave, eval_spec, limit=4, as_json=False, out=out, err=err) == 0  # 4 of its 30 items
    assert "panel" in progress.getvalue() and "4/4" in progress.getvalue()
    assert "12 plan(s) submitted by this run, 0 found finished" in progress.getvalue()
    out2, reported = console()
    assert commands.report(conclave, "arith", out=out2) == 0
    table = printed.getvalue()
    assert table == reported.getvalue() and all(arm in table for arm in ("panel", "single", "self_consistency"))


BOARD = {"kind": "board", "title": "Board", "question": "Answer: {question}", "rounds": 2,
         "moderator": {"name": "Morgan", "role": "Chair", "model": "solver"},
         "experts": [{"name": n, "role": "Solver", "model": "solver"} for n in ("Ada", "Bo", "Cy", "Di")]}


def test_reviews_and_early_stops_reach_the_outcomes_as_stored(planes: Planes, tmp_path: Path) -> None:
    """A reviewed board's outcomes carry each review as stored (labels, who stood behind each,
    the ranking), and the report counts them; an early stop's tokens saved are the view's."""
    reviewed = {**BOARD, "rounds": 1, "review": {"anonymize": True, "exclude_self": True}}
    (tmp_path / "panel.yaml").write_text(yaml.safe_dump(reviewed))
    solver = {"provider": "offline", "options": {"latency": 0, "solver": {"skill": 0.6, "position_bias": 0.5}}}
    spec = {"name": "reviewed", "generate": {"n": 4, "options": 3, "seed": 1}, "plan": "panel.yaml",
            "decide": "borda", "models": {"solver": solver}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    result = run(planes, tmp_path / "spec.yaml")
    conclave = Conclave(backend=PlanesBackend(planes))
    for o in result.outcomes:
        view = conclave.get(o.plan_id)
        stored = [p.verdict["review"] for p in view.phases
                  if p.kind == "review" and p.verdict and "review" in p.verdict]
        assert [(r["labels"], r["authors"], r["ranking"]) for r in o.reviews] == [
            (s["labels"], s["authors"], s["ranked"]) for s in stored]
        assert len(o.reviews) == 4 and all(r["reviewer"] not in r["authors"] for r in o.reviews)
    report = commands.build(result.stored, result.outcomes).as_json()
    reviews = report["arms"][0]["panel"]["reviews"]
    assert reviews is not None and reviews["reviews"] == 4 * 4

    (tmp_path / "agree.yaml").write_text(yaml.safe_dump({**BOARD, "stop_when": {"agreement": 0.75}}))
    sure = {"provider": "offline", "options": {"latency": 0, "solver": {"skill": 1.0}}}
    (tmp_path / "stop.yaml").write_text(yaml.safe_dump({"name": "stops", "generate": {"n": 4, "options": 2, "seed": 2},
                                                        "plan": "agree.yaml", "decide": "vote",
                                                        "models": {"solver": sure}}))
    stopped = run(planes, tmp_path / "stop.yaml")
    for o in stopped.outcomes:
        view = conclave.get(o.plan_id)
        assert view.early_stop is not None and o.early_stopped
        assert o.tokens_saved == view.early_stop["tokens_saved"] > 0 and len(o.rounds) == 1


def test_a_simulated_reviewers_position_bias_is_estimated_beside_its_theory(planes: Planes, tmp_path: Path) -> None:
    """Reviewers of the simulated solver with position bias 0.5, each shown the three others'
    answers: theory says the first shown is ranked first in 0.5 + 0.5/3 of the reviews; the
    report built from the stored plans puts that beside the measured rate and estimates the bias."""
    reviewed = {**BOARD, "rounds": 1, "review": {"anonymize": True, "exclude_self": True}}
    (tmp_path / "panel.yaml").write_text(yaml.safe_dump(reviewed))
    # short turns in one chunk each: the answers and rankings are the solver's, the prose around them
    # only costs time over 60 boards
    solver = {"provider": "offline", "options": {"latency": 0, "words": 12, "chunk_chars": 10_000,
                                                 "solver": {"skill": 0.6, "position_bias": 0.5}}}
    spec = {"name": "biased", "generate": {"n": 60, "options": 3, "seed": 3}, "plan": "panel.yaml",
            "decide": "borda", "models": {"solver": solver}, "baselines": {}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    result = run(planes, tmp_path / "spec.yaml")
    report = commands.build(result.stored, result.outcomes)
    panel = report.arm("panel")
    assert panel.panel is not None and panel.panel.reviews is not None and panel.theory is not None
    reviews = panel.panel.reviews
    assert reviews.reviews == 60 * 4 and reviews.position.expected == pytest.approx(1 / 3)
    assert panel.theory.reviews is not None
    assert panel.theory.reviews.first_rate == pytest.approx(0.5 + 0.5 / 3)
    assert panel.theory.reviews.within, (reviews.position.observed, reviews.position.interval)
    assert abs(reviews.estimated_bias - 0.5) < 0.15  # 240 reviews: about ±0.1 at 95 %
    assert panel.theory.exact is False  # Borda: plurality's accuracy shown for reference only
    assert "~" in report.table()
