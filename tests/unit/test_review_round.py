"""The anonymized review round, run by the in-process planes over SQLite: each expert is
shown the others' round-one answers under labels in an order drawn for it alone and stored,
never its own and never a name; it ranks the labels; Borda counts the answers behind the
labels as ranked, and the decision is what a recount of the stored reviews gives."""

from __future__ import annotations

from collections import Counter

import pytest

from orchestrator.deliberation.answers import ChoiceAnswer
from orchestrator.plan.expand import expand
from orchestrator.plan.prompts import build_request
from orchestrator.plan.views import plan_view
from storage.status import PhaseStatus, PlanStatus
from tests.unit.planes import Planes
from tests.unit.stored import example, inputs_of, stored

OPTIONS = ["92", "94", "90"]
PANEL = [{"name": n, "role": "Analyst"} for n in ("Ada", "Bo", "Cy", "Di", "Ed")]


def reviewed_board(**changes: object) -> object:
    return example("board", rounds=1, experts=PANEL, question="What is 17 + 25 * 3?",
                   answer={"type": "choice", "options": OPTIONS}, decide="borda",
                   review={"anonymize": True, "exclude_self": True},
                   models={"default": {"provider": "offline", "options": {"solver": {"skill": 0.6, "seed": 3}}}},
                   **changes)


def test_each_reviewer_sees_the_others_in_an_order_drawn_for_it_and_stored() -> None:
    plan = reviewed_board()
    reviews = [p for p in expand(plan) if p.kind == "review"]
    assert [p.key for p in reviews] == [f"review.{e['name'].lower()}" for e in PANEL]
    for p in reviews:
        assert sorted(p.meta["shown"]) == sorted(e["name"] for e in PANEL if e["name"] != p.expert)  # never itself
        assert p.meta["labels"] == ["A", "B", "C", "D"]
        assert set(p.depends_on) == {f"r1.{e['name'].lower()}" for e in PANEL}  # round one only, not the chair
    assert len({tuple(p.meta["shown"]) for p in reviews}) > 1  # drawn per reviewer
    again = [p.meta["shown"] for p in expand(reviewed_board()) if p.kind == "review"]
    assert again == [p.meta["shown"] for p in reviews]  # the same draw every time: it is seeded
    summary = next(p for p in expand(plan) if p.key == "r1.summary")
    assert {p.key for p in reviews} <= set(summary.depends_on)


def test_an_anonymized_review_prompt_names_no_expert_and_labels_every_answer() -> None:
    plan = reviewed_board()
    phases = stored(plan)
    review = next(p for p in phases if p.key == "review.ada")
    texts = {p.id: f"{p.expert} argues at length. Verdict: {{\"answer\": \"92\", \"confidence\": 0.7, "
                   f"\"reason\": \"r\"}}" for p in phases if p.kind == "turn"}
    with_verdicts = [p if p.kind != "turn" else type(p)(**{**p.__dict__, "verdict": {"answer": "92"}})
                     for p in phases]
    request = build_request(plan, review, inputs_of(review, with_verdicts), texts)
    assert [b.source for b in request.context] == ["A", "B", "C", "D"]
    assert [b.title for b in request.context] == ["Answer A", "Answer B", "Answer C", "Answer D"]
    shown_text = "\n".join(b.text for b in request.context)
    assert "Ada argues" not in shown_text  # its own answer is not shown
    assert all(f"{name} argues" in shown_text for name in review.meta["shown"])  # each other answer is, whole
    assert '"ranking": ["A", "B", "C", "D"]' in request.prompt
    assert "experts" not in request.hints and request.hints["review"]["labels"] == ["A", "B", "C", "D"]


def test_borda_counts_the_answers_behind_the_labels_as_each_reviewer_ranked_them(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(reviewed_board()).plan_id
    planes.run_all()
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    by_key = {p.key: p for p in state.phases}
    first = {p.expert: p.verdict["answer"] for p in state.phases if p.kind == "turn"}
    points: Counter[str] = Counter()
    for p in state.phases:
        if p.kind != "review":
            continue
        assert p.status == PhaseStatus.COMPLETED and p.verdict is not None
        review = p.verdict["review"]
        assert review["authors"] == p.meta["shown"] and review["labels"] == p.meta["labels"]
        assert sorted(review["ranked"]) == review["labels"]
        behind = dict(zip(review["labels"], review["authors"], strict=True))
        answers = list(dict.fromkeys(first[behind[label]] for label in review["ranked"]))
        assert p.verdict["ranking"] == answers
        assert p.expert not in review["authors"]
        for place, answer in enumerate(answers):  # Borda over the options: first m-1, then m-2, ...
            points[answer] += len(OPTIONS) - 1 - place
    decision = by_key["decision"].verdict
    assert decision is not None and decision["protocol"] == "borda"
    scores = {c["key"]: c["score"] for c in decision["candidates"]}
    assert scores == {o: float(points[o]) for o in OPTIONS}
    assert decision["key"] == max(OPTIONS, key=lambda o: (points[o], -OPTIONS.index(o))) or decision["tie_break"]
    view = plan_view(state, planes.usage(plan_id))
    assert view.decision is not None and view.decision["key"] == decision["key"]


@pytest.mark.parametrize("review", [{"anonymize": True, "exclude_self": True}, {"exclude_self": False}])
def test_a_review_needs_an_answer_and_enough_answers_to_rank(review: dict[str, object]) -> None:
    from orchestrator.core.errors import InvalidPlan

    with pytest.raises(InvalidPlan, match="review"):
        example("board", rounds=1, experts=PANEL, review=review)
    two = PANEL[:2] if review.get("exclude_self", True) else PANEL[:1]
    with pytest.raises(InvalidPlan, match="review"):
        example("board", rounds=1, experts=two, review=review,
                answer={"type": "choice", "options": OPTIONS})
    assert isinstance(reviewed_board().answer, ChoiceAnswer)
