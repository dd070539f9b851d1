"""The tally: how the panel's verdicts become its decision, computed by code.

Each expert casts one ballot: its latest verdict (an expert absent from the last round
votes with the verdict it gave before; one that never gave a readable verdict abstains).
Ballots with the same answer (:func:`~.answers.same_answer`: an option, a number within the
tolerance of its group's anchor — the answer near most others —, the same normalised text)
form one candidate; scores and confidences are summed exactly, as the decimals the verdicts
wrote, so neither depends on the order of the ballots and equal decimal totals are a tie. The protocols:

- ``vote`` — plurality: a ballot weighs 1;
- ``weighted_vote`` — a ballot weighs its confidence (ReConcile's confidence-weighted vote);
- ``borda`` — over each ballot's ranking of the options (best first; its answer alone when it
  ranks nothing): with m options, first place scores m-1, the next m-2, …, unranked 0;
- ``consensus`` — plurality, and the decision says whether the leader's share of the panel
  reached the threshold (the rounds before it stop early when it does: ``stop_when``).

The winner has the highest score; a tie goes to the higher total confidence, and a tie on
that too to a draw seeded with the plan id (so it is the same draw on every worker and every
replay), and the record says which. The record (:meth:`Decision.as_json`) lists every ballot
with its weight, every candidate with its score and voters, the winner, the margin over the
runner-up, the share of the panel that agrees, and how a tie was broken.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from orchestrator.deliberation.answers import ChoiceAnswer, NumberAnswer, Protocol, TextAnswer, answer_key, same_answer
from orchestrator.deliberation.verdicts import Verdict

Spec = ChoiceAnswer | NumberAnswer | TextAnswer


@dataclass(frozen=True)
class Ballot:
    expert: str
    phase: str  # the key of the phase whose verdict this is
    verdict: Verdict


@dataclass
class Candidate:
    answer: str | float
    key: str
    score: float = 0.0
    confidence: float = 0.0
    voters: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    protocol: str
    answer: str | float | None
    key: str | None
    ballots: tuple[Ballot, ...]
    weights: tuple[float, ...]
    candidates: tuple[Candidate, ...]  # best first
    margin: float
    agreement: float
    tie_break: dict[str, Any] | None
    threshold: float | None = None

    @property
    def reached(self) -> bool | None:
        """Consensus only: whether the leader's share reached the threshold."""
        return None if self.threshold is None else self.agreement >= self.threshold

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "protocol": self.protocol, "answer": self.answer, "key": self.key,
            "votes": [{"expert": b.expert, "phase": b.phase, **b.verdict.as_json(), "weight": w}
                      for b, w in zip(self.ballots, self.weights, strict=True)],
            "candidates": [{"answer": c.answer, "key": c.key, "score": c.score, "confidence": c.confidence,
                            "voters": c.voters} for c in self.candidates],
            "margin": self.margin, "agreement": self.agreement,
            "abstentions": sum(1 for b in self.ballots if b.verdict.abstained),
            "tie_break": self.tie_break,
        }
        if self.threshold is not None:
            data["consensus"] = {"threshold": self.threshold, "reached": self.reached}
        return data


def tally(protocol: Protocol, spec: Spec, ballots: Sequence[Ballot], *, seed: str,
          threshold: float | None = None) -> Decision:
    """The decision of ``ballots`` (one per expert, in plan order) under ``protocol``."""
    if protocol == "chair":
        raise ValueError("the chair decides in prose: there is no tally")
    candidates = _candidates(spec, ballots)
    weights = []
    points: dict[int, list[float]] = {id(c): [] for c in candidates}
    for b in ballots:
        v = b.verdict
        if v.abstained:
            weights.append(0.0)
            continue
        w = v.confidence if protocol == "weighted_vote" else 1.0
        weights.append(w)
        if protocol != "borda":
            points[id(_find(spec, candidates, v.answer))].append(w)
    if protocol == "borda":
        _borda(spec, ballots, candidates, points)
    for c in candidates:
        c.score = _total(points[id(c)])
    ranked = sorted(candidates, key=lambda c: (-c.score, -c.confidence))
    tie_break = None
    if len(ranked) >= 2 and ranked[0].score == ranked[1].score and ranked[0].score > 0:
        ranked, tie_break = _break_tie(ranked, seed)
    winner = ranked[0] if ranked and ranked[0].score > 0 else None
    margin = 0.0 if winner is None else winner.score - (ranked[1].score if len(ranked) > 1 else 0.0)
    agreement = 0.0 if winner is None or not ballots else len(winner.voters) / len(ballots)
    return Decision(protocol=protocol, answer=winner.answer if winner else None, key=winner.key if winner else None,
                    ballots=tuple(ballots), weights=tuple(weights), candidates=tuple(ranked), margin=margin,
                    agreement=agreement, tie_break=tie_break,
                    threshold=(threshold if threshold is not None else 0.8) if protocol == "consensus" else None)


def agreement(spec: Spec, ballots: Sequence[Ballot]) -> float:
    """The largest share of the panel (abstentions count against) giving one answer."""
    if not ballots:
        return 0.0
    return max((len(c.voters) for c in _candidates(spec, ballots)), default=0) / len(ballots)


def _candidates(spec: Spec, ballots: Sequence[Ballot]) -> list[Candidate]:
    """One candidate per distinct answer, in the order first given; every option of a
    choice is a candidate (Borda scores options nobody chose first)."""
    found: list[Candidate] = []
    if isinstance(spec, ChoiceAnswer):
        found = [Candidate(answer=o, key=o) for o in spec.options]
    given = [b for b in ballots if not b.verdict.abstained and b.verdict.answer is not None]
    if isinstance(spec, NumberAnswer):
        found = _number_groups(spec, [float(b.verdict.answer or 0) for b in given])
    confidences: dict[int, list[float]] = {}
    for b in given:
        c = _find(spec, found, b.verdict.answer, create=True)
        c.voters.append(b.expert)
        confidences.setdefault(id(c), []).append(b.verdict.confidence)
    for c in found:
        c.confidence = _total(confidences.get(id(c), ()))
    return found


def _number_groups(spec: NumberAnswer, answers: list[float]) -> list[Candidate]:
    """Numbers within the tolerance are one answer, but "within the tolerance" is not
    transitive (1.0 ~ 1.4 ~ 1.8): so the groups are drawn, whatever the order of the ballots,
    around the answer whose tolerance holds the most answers (ties: the smallest), then again
    among those left. :func:`_find` puts each answer in the first group whose anchor it is near."""
    groups: list[Candidate] = []
    left = sorted(answers)
    while left:
        anchor = max(left, key=lambda a: (sum(1 for x in left if abs(x - a) <= spec.tolerance), -a))
        groups.append(Candidate(answer=anchor, key=answer_key(spec, anchor)))
        left = [x for x in left if abs(x - anchor) > spec.tolerance]
    return groups


def _find(spec: Spec, candidates: list[Candidate], answer: str | float | None,
          create: bool = False) -> Candidate:
    assert answer is not None
    for c in candidates:
        if same_answer(spec, c.answer, answer):
            return c
    if not create:
        raise KeyError(answer)
    c = Candidate(answer=answer, key=answer_key(spec, answer))
    candidates.append(c)
    return c


def _borda(spec: Spec, ballots: Sequence[Ballot], candidates: list[Candidate],
           points: dict[int, list[float]]) -> None:
    m = len(candidates)
    for b in ballots:
        v = b.verdict
        if v.abstained:
            continue
        ranking = v.ranking or (v.answer,)
        for place, answer in enumerate(ranking):
            points[id(_find(spec, candidates, answer))].append(m - 1 - place)


def _total(parts: Iterable[float]) -> float:
    """A score or a total confidence that does not depend on the order of its parts, and is
    the same for equal decimal sums: each part is taken as the decimal it was written as (its
    shortest repr) and they are added exactly. In floating point 0.1 + 0.2 + 0.3 is not
    0.3 + 0.2 + 0.1, and even summed exactly rounded (math.fsum) 0.35 + 0.47 is not 0.36 +
    0.46 — a tie of confidences that such noise, not the seeded draw, would decide."""
    return float(sum((Decimal(repr(float(p))) for p in parts), Decimal(0)))


def _break_tie(ranked: list[Candidate], seed: str) -> tuple[list[Candidate], dict[str, Any]]:
    top = [c for c in ranked if c.score == ranked[0].score]
    rest = ranked[len(top):]
    best_confidence = max(c.confidence for c in top)
    leaders = [c for c in top if c.confidence == best_confidence]
    between = [c.key for c in top]
    if len(leaders) == 1:
        winner, by = leaders[0], "confidence"
    else:
        digest = hashlib.sha256("|".join([seed, *sorted(c.key for c in leaders)]).encode()).digest()
        winner, by = sorted(leaders, key=lambda c: c.key)[int.from_bytes(digest[:8], "big") % len(leaders)], "draw"
    order = [winner, *[c for c in top if c is not winner], *rest]
    record: dict[str, Any] = {"between": between, "by": by}
    if by == "draw":
        record["seed"] = seed
    return order, record
