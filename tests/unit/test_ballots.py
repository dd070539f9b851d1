"""Each expert's ballot is its latest verdict in plan order: a board's later round over its
first, a review over its turn, a debate over a team phase; an expert who never spoke abstains,
and a team's synthesis writer, who owns no phase, does not vote."""

from __future__ import annotations

import dataclasses

from orchestrator.plan import tally
from tests.unit.stored import example, stored

OPTIONS = {"type": "choice", "options": ["yes", "no"]}


def with_verdicts(plan: object, said: dict[str, str]) -> list:
    return [dataclasses.replace(p, verdict={"answer": said[p.key], "confidence": 0.5, "reason": "r"})
            if p.key in said else p for p in stored(plan)]


def test_the_latest_verdict_is_the_ballot() -> None:
    plan = example("board", rounds=2, answer=OPTIONS, decide="vote")
    phases = with_verdicts(plan, {"r1.dana": "yes", "r2.dana": "no", "r1.ravi": "no", "r1.sofia": "yes"})
    cast = {b.expert: (b.phase, b.verdict.answer) for b in tally.panel_ballots(plan, phases)}
    assert cast["Dana"] == ("r2.dana", "no")  # round two replaces round one
    assert cast["Ravi"] == ("r1.ravi", "no")  # absent from round two: what it said before
    assert cast["Tomas"][1] is None  # never spoke: an abstention
    assert set(cast) == {e.name for e in plan.experts}  # the moderator does not vote
    decision = tally.decide(plan, "plan-1", phases)
    assert (decision.key, [c.score for c in decision.candidates]) == ("no", [2.0, 1.0])


def test_a_teams_synthesis_writer_does_not_vote() -> None:
    lead = {"name": "Lead", "role": "Writes the synthesis"}
    base = example("team")
    plan = example("team", answer=OPTIONS, decide="vote", experts=[*base.model_dump(mode="json")["experts"], lead],
                   synthesis={"expert": "Lead"})
    assert "Lead" not in tally.panel(plan)
    voters = tally.panel(plan)
    assert voters == [e.name for e in plan.experts if any(ph.expert == e.name for ph in plan.phases)]
