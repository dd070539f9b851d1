"""What-if forks in the service-free tier, over SQLite: a fork stores the phases it copies
pointing at its source's contents (no new content row), never claims or pays for a phase it
copied, runs the phases from ``from`` on and the earlier ones whose hash of what they would be
sent differs; effects its copied phases had (debates, early stops) are re-derived; bad input is
a field error. The hash itself and the override format are tested beside it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sqlalchemy import update

from orchestrator.core.errors import CapacityExceeded, InvalidPlan, InvalidRequest, PlanNotFound
from orchestrator.plan.fingerprint import fingerprint
from orchestrator.plan.overrides import assignments, merged
from orchestrator.plan.plan_diff import Comparison
from orchestrator.plan.schema import parse_plan
from storage import contents
from storage.identity import Principal
from storage.models import Phase
from storage.phases import EARLY_STOP
from storage.status import PhaseStatus, PlanStatus
from tests.stored_rows import content_count
from tests.unit.planes import Planes
from tests.unit.stored import example, inputs_of

# Ravi on another model: the offline model with another stance for him
CONTRARIAN = {"models": {"contrarian": {"provider": "offline", "options": {"stances": {"Ravi": "oppose"}}}},
              "experts": [{}, {"model": "contrarian"}]}
ROUND_1 = ["opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.tomas", "r1.summary"]
ROUND_2 = ["r2.dana", "r2.ravi", "r2.sofia", "r2.tomas", "r2.summary", "final"]
ACME = Principal("p-acme", "acme", "acme", ("plans:read", "plans:write"))
GLOBEX = Principal("p-globex", "globex", "globex", ("plans:read", "plans:write"))


def finished(planes: Planes, plan: Any, principal: Principal | None = None) -> str:
    plan_id = planes.coordinator.submit(plan, principal=principal).plan_id
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    return plan_id


def started(planes: Planes, plan_id: str) -> list[str]:
    return [e.phase_key or "" for e in planes.events(plan_id) if e.type == "phase_started"]


def test_a_board_forked_from_round_2_with_another_model_reuses_round_1_and_pays_only_for_round_2(
        planes: Planes) -> None:
    source = finished(planes, example("board"))
    rows_before = content_count(planes.db)
    src = planes.state(source).by_key()

    res = planes.coordinator.fork(source, "r2", CONTRARIAN)
    assert res.created and res.source == source and res.from_phase == "r2"
    assert res.reused == ROUND_1 and res.rerun == [] and res.enqueued == ROUND_2
    planes.run_all()

    fork = planes.state(res.plan_id)
    assert fork.plan.status == PlanStatus.COMPLETED
    assert (fork.plan.forked_from, fork.plan.fork_phase) == (source, "r2")
    by_key = fork.by_key()
    for key in ROUND_1:  # copied: the source's content row, verdict and hash; never claimed here
        p = by_key[key]
        assert (p.status, p.attempt, p.reused_from) == (PhaseStatus.COMPLETED, 0, source)
        assert (p.content_id, p.sent_hash, p.verdict) == (src[key].content_id, src[key].sent_hash, src[key].verdict)
        assert planes.text(res.plan_id, key) == planes.text(source, key)
    assert by_key["r1.ravi"].meta["models"] == ["default"]  # round 1 keeps the model it was answered by
    assert started(planes, res.plan_id) == ROUND_2  # nothing before r2 was claimed or run
    assert content_count(planes.db) - rows_before == len(ROUND_2)  # a content row per new phase, none for the rest
    assert planes.contents(res.plan_id) == {p.id: 1 for p in fork.phases}

    used = planes.usage(res.plan_id)  # the fork's usage is only its new phases'
    assert sorted(r.phase_id for r in used) == sorted(by_key[k].id for k in ROUND_2)
    view = planes.coordinator.reads.view(res.plan_id)
    assert view.usage.total_tokens == sum(r.input_tokens + r.output_tokens for r in used if r.counted) > 0
    assert all(p.usage.total_tokens == 0 and p.usage.calls == 0 for p in view.phases if p.key in ROUND_1)
    assert view.forked_from == {"plan_id": source, "phase": "r2"}
    assert [p.key for p in view.phases if p.reused_from == source] == ROUND_1
    assert planes.text(res.plan_id, "r2.ravi") != planes.text(source, "r2.ravi")  # the other model spoke
    assert [e.type for e in planes.events(res.plan_id)][:2] == ["plan_submitted", "plan_forked"]


def test_a_change_upstream_of_from_reruns_what_it_reaches_and_everything_downstream(planes: Planes) -> None:
    source = finished(planes, example("board"))
    # Dana's system prompt is what her round-1 turn was sent: it, and the summary that read it, rerun
    res = planes.coordinator.fork(source, "r2", {"experts": [{"system": "You are Dana. Answer in one line."}]})
    assert res.reused == ["opening", "r1.ravi", "r1.sofia", "r1.tomas"]
    assert res.rerun == ["r1.dana", "r1.summary"]
    planes.run_all()
    assert sorted(started(planes, res.plan_id)) == sorted(["r1.dana", "r1.summary", *ROUND_2])

    # the question is sent to every phase: nothing can be reused
    again = planes.coordinator.fork(source, "final", {"question": "Should Ledgerly raise its flat price instead?"})
    assert again.reused == [] and again.rerun == [*ROUND_1, *ROUND_2[:-1]]


def test_a_fork_with_nothing_changed_from_the_last_phase_reruns_only_it(planes: Planes) -> None:
    source = finished(planes, example("board"))
    rows_before = content_count(planes.db)
    res = planes.coordinator.fork(source, "final")
    assert res.reused == [*ROUND_1, *ROUND_2[:-1]] and res.enqueued == ["final"]
    planes.run_all()
    assert started(planes, res.plan_id) == ["final"] and content_count(planes.db) == rows_before + 1


def test_a_stored_hash_that_does_not_match_is_never_copied(planes: Planes) -> None:
    """The hash decides, not the key: a source phase whose stored hash is not what the fork's phase
    would be sent (here: stored by another definition, or tampered with) runs again."""
    source = finished(planes, example("board"))
    with planes.db.transaction() as s:
        s.execute(update(Phase).where(Phase.plan_id == source, Phase.key == "r1.sofia").values(sent_hash="0" * 64))
    res = planes.coordinator.fork(source, "r2")
    assert "r1.sofia" in res.rerun and "r1.sofia" not in res.reused and "r1.summary" in res.rerun


def test_the_worker_stores_the_hash_a_fork_recomputes_and_it_tells_phases_apart(planes: Planes) -> None:
    source = finished(planes, example("board"))
    state = planes.state(source)
    plan = parse_plan(state.plan.spec)
    texts = {p.id: planes.text(source, p.key) or "" for p in state.phases}
    hashes = {}
    for p in state.phases:
        hashes[p.key] = fingerprint(plan, p, inputs_of(p, state.phases), texts, planes.coordinator.models)
        assert hashes[p.key] == p.sent_hash, p.key  # what the worker stored is what it was sent
    assert len(set(hashes.values())) == len(hashes)  # no two phases are sent the same
    r1 = state.by_key()["r1.dana"]
    ins = inputs_of(r1, state.phases)
    other = dataclasses.replace(r1, key="r1.ravi", expert="Ravi")
    assert fingerprint(plan, other, ins, texts, planes.coordinator.models) != r1.sent_hash
    changed = {p.id: (t + " (edited)" if p.key == "opening" else t) for p, t in
               ((p, texts[p.id]) for p in state.phases)}
    assert fingerprint(plan, r1, ins, changed, planes.coordinator.models) != r1.sent_hash  # an input's text
    briefed = parse_plan({**state.plan.spec, "briefing": [{"title": "Memo", "text": "Churn is 3% a month."}]})
    assert fingerprint(briefed, r1, ins, texts, planes.coordinator.models) != r1.sent_hash  # a briefing
    stance = parse_plan({**state.plan.spec, "models": {"default": {"provider": "offline",
                                                                   "options": {"stances": {"Dana": "oppose"}}}}})
    assert fingerprint(stance, r1, ins, texts, planes.coordinator.models) != r1.sent_hash  # a stance


def test_a_tallied_boards_decision_and_verdicts_are_copied_with_their_phases(planes: Planes) -> None:
    board = example("board", answer={"type": "choice", "options": ["yes", "no"]}, decide="vote")
    source = finished(planes, board)
    src = planes.state(source).by_key()
    assert src["decision"].verdict is not None

    chair = planes.coordinator.fork(source, "final", {"moderator": {"system": "You chair briefly."}})
    assert chair.reused == [] and "decision" in chair.rerun  # the opening was sent the chair's system prompt
    res = planes.coordinator.fork(source, "final", {"models": CONTRARIAN["models"],
                                                    "moderator": {"model": "contrarian"}})
    assert "decision" in res.reused and res.enqueued == ["final"]  # the chair's earlier phases keep their model
    planes.run_all()
    fork = planes.state(res.plan_id).by_key()
    assert fork["decision"].verdict == src["decision"].verdict and fork["decision"].meta["seed"] == source
    assert all(fork[k].verdict == src[k].verdict for k in ROUND_1[1:5])
    assert planes.coordinator.reads.view(res.plan_id).decision == planes.coordinator.reads.view(source).decision

    # another model for one expert from round 2: his turns from there, and everything after, rerun
    other = planes.coordinator.fork(source, "r2.ravi", CONTRARIAN)
    assert other.reused == ROUND_1 and "decision" not in other.reused
    planes.run_all()
    assert planes.state(other.plan_id).by_key()["decision"].meta["seed"] == source  # ties drawn alike


def test_a_team_fork_reuses_independent_branches_and_replays_its_checks_debates(planes: Planes) -> None:
    source = finished(planes, example("team"))
    src = planes.state(source)
    debates = [p.key for p in src.phases if p.kind == "debate"]
    assert debates  # the example team diverges: its check inserted a debate

    res = planes.coordinator.fork(source, "synthesis")
    assert set(res.reused) == {p.key for p in src.phases if p.key != "synthesis"}  # the debate too
    planes.run_all()
    fork = planes.state(res.plan_id)
    assert {p.key for p in fork.phases} == {p.key for p in src.phases}
    assert fork.by_key()["synthesis"].inputs == src.by_key()["synthesis"].inputs
    assert started(planes, res.plan_id) == ["synthesis"]
    assert "debate_inserted" in [e.type for e in planes.events(res.plan_id)]

    first = src.phases[0].key  # a phase others depend on: it and what depends on it run, the rest is reused
    again = planes.coordinator.fork(source, first)
    downstream = {p.key for p in src.phases if first in p.inputs} | {first}
    assert set(again.reused) == {p.key for p in src.phases if p.key not in downstream and p.kind != "debate"}


def test_a_board_that_stopped_early_forked_from_final_stays_stopped(planes: Planes) -> None:
    board = example("board", rounds=3, answer={"type": "choice", "options": ["yes", "no"]},
                    stop_when={"agreement": 0.75}, models={"default": {
                        "provider": "offline", "options": {"stances": {n: "support" for n in
                                                                      ("Dana", "Ravi", "Sofia", "Tomas")}}}})
    source = finished(planes, board)
    skipped = [p.key for p in planes.state(source).phases if p.error_code == EARLY_STOP]
    assert skipped

    res = planes.coordinator.fork(source, "final")
    assert res.enqueued == ["final"] and res.rerun == []
    planes.run_all()
    fork = planes.state(res.plan_id).by_key()
    assert [k for k, p in fork.items() if p.error_code == EARLY_STOP] == skipped
    assert started(planes, res.plan_id) == ["final"]
    assert fork["final"].depends_on == planes.state(source).by_key()["final"].depends_on

    # from inside the skipped rounds: they run, as asked
    inside = planes.coordinator.fork(source, "r2")
    assert set(inside.enqueued) >= {"r2.dana", "r2.summary"}


def test_bad_input_is_a_field_error(planes: Planes) -> None:
    source = finished(planes, example("board", rounds=1))
    fork = planes.coordinator.fork

    def refused(exc: type[Exception], field: str, *args: Any) -> str:
        with pytest.raises(exc) as caught:
            fork(source, *args)
        assert caught.value.details[0]["field"] == field, caught.value.details  # type: ignore[attr-defined]
        return str(caught.value)

    assert "no phase 'r7.dana'" in refused(InvalidRequest, "from", "r7.dana")
    refused(InvalidRequest, "from", "r9")  # a round the board does not have
    refused(InvalidRequest, "from", None)
    assert "did you mean 'model'" in refused(InvalidPlan, "overrides.experts[1].modle", "r1",
                                             {"experts": [{}, {"modle": "x"}]})
    assert "unknown model 'nope'" in refused(InvalidPlan, "overrides.experts[1].model", "r1",
                                             {"experts": [{}, {"model": "nope"}]})
    refused(InvalidPlan, "overrides.colour", "r1", {"colour": "red"})
    refused(InvalidPlan, "overrides.kind", "r1", {"kind": "team"})
    refused(InvalidPlan, "overrides", "r1", ["not", "a", "mapping"])
    refused(InvalidPlan, "overrides.rounds", "r1", {"rounds": "two"})
    assert len(planes.coordinator.reads.list_plans().plans) == 1  # nothing was stored


def test_a_fork_is_tenant_scoped_and_admitted_like_any_plan(template_db: Any, fast_dir: Any) -> None:
    from tests.unit.conftest import _planes

    gen = _planes(template_db, fast_dir, max_active_plans=1)
    planes = next(gen)
    try:
        source = finished(planes, example("board", rounds=1), principal=ACME)
        with pytest.raises(PlanNotFound):  # another tenant's plan is not found, to fork or to diff
            planes.coordinator.fork(source, "final", principal=GLOBEX)
        with pytest.raises(PlanNotFound):
            planes.coordinator.reads.diff(source, source, principal=GLOBEX)
        res = planes.coordinator.fork(source, "final", principal=ACME)
        fork = planes.state(res.plan_id)
        assert fork.plan.tenant == "acme" and fork.plan.status == PlanStatus.RUNNING
        with pytest.raises(CapacityExceeded):  # acme's one active plan is the fork
            planes.coordinator.fork(source, "final", principal=ACME)
        submitted = [e for e in planes.events(res.plan_id) if e.type == "plan_submitted"]
        assert submitted[0].data["principal"] == ACME.audit() and submitted[0].data["tenant"] == "acme"
    finally:
        gen.close()


def test_a_forks_own_task_id_makes_it_idempotent_and_its_budget_counts_only_its_new_phases(planes: Planes) -> None:
    source = finished(planes, example("board"))
    spent = planes.coordinator.reads.view(source).usage.total_tokens
    overrides = {"task_id": "what-if-1", "labels": ["what-if"], "budget": {"max_tokens": spent // 4}}
    res = planes.coordinator.fork(source, "final", overrides)
    again = planes.coordinator.fork(source, "final", overrides)
    assert (again.plan_id, again.created, again.reused) == (res.plan_id, False, res.reused)
    planes.run_all()
    fork = planes.coordinator.reads.view(res.plan_id)
    assert fork.status == PlanStatus.COMPLETED and fork.task_id == "what-if-1" and fork.labels == ["what-if"]
    assert fork.budget is not None and fork.budget.spent_tokens == fork.usage.total_tokens < spent // 4


def test_diff_sets_a_fork_beside_its_source(planes: Planes) -> None:
    board = example("board", answer={"type": "choice", "options": ["yes", "no"]}, decide="vote")
    source = finished(planes, board)
    res = planes.coordinator.fork(source, "r2", CONTRARIAN)
    planes.run_all()
    c = planes.coordinator.reads.diff(source, res.plan_id)
    assert (c.a.id, c.b.id, c.b.forked_from) == (source, res.plan_id, {"plan_id": source, "phase": "r2"})
    assert (c.a.reused, c.b.reused, c.b.ran) == (0, 6, 7)  # round 2, the decision and the final ran
    assert c.b.total_tokens < c.a.total_tokens
    rows = {r.key: r for r in c.phases}
    assert all(rows[k].shared and rows[k].b is not None and rows[k].b.reused_from == source for k in ROUND_1)
    assert rows["r2.ravi"].same_text is False and not rows["r2.ravi"].shared
    assert c.a.decision is not None and c.b.decision is not None and len(c.a.decision.votes) == 4
    assert c.same_answer == (c.a.decision.key == c.b.decision.key)
    assert c.text_diff[:2] == [f"--- {source}", f"+++ {res.plan_id}"]
    assert c.to_dict()["b"]["forked_from"]["phase"] == "r2"
    assert Comparison.from_dict(c.to_dict()) == c  # what the HTTP backend reads back is what was sent


def test_contents_are_shared_by_reference_and_read_through_the_phase(planes: Planes) -> None:
    source = finished(planes, example("board", rounds=1))
    res = planes.coordinator.fork(source, "final")
    src, fork = planes.state(source).by_key(), planes.state(res.plan_id).by_key()
    stored = contents.of_phases(planes.db, [src["opening"].id, fork["opening"].id])
    assert stored[src["opening"].id] == stored[fork["opening"].id]  # one row, two phases
    assert contents.hashes(planes.db, res.plan_id)["opening"] == contents.hashes(planes.db, source)["opening"]


# ------------------------------------------------------------------ the override format


def test_overrides_merge_mappings_and_lists_of_mappings_by_position() -> None:
    spec = {"kind": "board", "title": "T", "task_id": "t-1", "labels": ["a"], "question": "Q?",
            "experts": [{"name": "A", "role": "r", "model": "m"}, {"name": "B", "role": "s"}],
            "budget": {"usd": 1.0}, "models": {"m": {"provider": "offline", "temperature": 0.5}}}
    out = merged(spec, {"experts": [{}, {"model": "m"}], "models": {"m": {"temperature": 0.9}}, "budget": None},
                 title="T (fork)")
    assert out == {"kind": "board", "title": "T (fork)", "question": "Q?",
                   "experts": [{"name": "A", "role": "r", "model": "m"}, {"name": "B", "role": "s", "model": "m"}],
                   "models": {"m": {"provider": "offline", "temperature": 0.9}}}  # no task_id, labels or budget
    assert merged(spec, {"experts": [None, {}, {"name": "C", "role": "x"}]}, title="T")["experts"] == [
        {"name": "B", "role": "s"}, {"name": "C", "role": "x"}]
    assert merged(spec, {"labels": ["b"], "task_id": "t-2"}, title="T")["labels"] == ["b"]


def test_set_assignments_write_a_partial_plan_and_name_their_option_when_wrong() -> None:
    assert assignments(["experts[1].model=gpt", "question=Should we: yes?", "rounds=3", "budget=null",
                        'models["gpt-4.1"].temperature=0.2', "labels=[a, b]"]) == {
        "experts": [{}, {"model": "gpt"}], "question": "Should we: yes?", "rounds": 3, "budget": None,
        "models": {"gpt-4.1": {"temperature": 0.2}}, "labels": ["a", "b"]}
    assert assignments(["experts[0].role=CFO"], {"experts": [{}, {"model": "x"}]}) == {
        "experts": [{"role": "CFO"}, {"model": "x"}]}
    for bad in ("experts[1].model", "=x", "[1].model=x", "experts..model=x", "question='unclosed=x"):
        with pytest.raises(InvalidRequest) as caught:
            assignments([bad])
        assert caught.value.details == [{"field": "--set", "message": caught.value.details[0]["message"]}]
