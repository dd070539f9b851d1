"""What an offline speaker's verdict says, when a plan declares an ``answer:``
(``hints["verdict"]``: ``turn``, ``repair`` or ``chair``).

* An **expert** (a turn, a team expert, a debater) answers from its stance — support the
  first option, oppose the second, conditional a seeded pick; a number near the
  question's value (exact when it supports); a short phrase for text — or, with
  ``options.solver``, from :mod:`~orchestrator.gateway.providers.offline.solver`. Its
  reason is the sentence of its ``Position:`` line, so a repair, which writes the same
  text unseen, gives the same verdict.
* The **chair** states the decision the code computed (``hints["decision"]``) in its
  recommendation and ends with it as its verdict; with no winner it says so and gives its
  own pick. ``contradict_decision`` (a fault switch) makes that verdict name another answer.
* ``malformed_verdict`` (a fault switch) breaks an expert's line: ``"once"`` in the turn
  only, ``"always"`` in every repair too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.gateway.providers.offline.solver import OFFSETS, Solver, value_of
from orchestrator.gateway.providers.offline.text import Dice, cap, strip_end
from orchestrator.gateway.providers.offline.understanding import Call
from orchestrator.gateway.providers.offline.verdict_line import (
    BROKEN_REPAIR,
    BROKEN_TURN,
    Answer,
    AnswerSpec,
    tally,
    verdict_line,
)

MODES = ("turn", "repair", "chair")
CHAIR_KINDS = ("final_summary", "synthesis")
REASON_WORDS = 30  # a reason is at most this many words of the Position sentence
TEXT_BY_STANCE = {"support": "yes", "oppose": "no", "conditional": "yes, with conditions"}


@dataclass(frozen=True)
class Pick:
    """An answer with its confidence, and (in a review) the ranking it heads."""

    answer: Answer
    confidence: float
    ranking: tuple[Answer, ...] = ()


def mode_of(call: Call) -> str | None:
    """The verdict this call must give (``turn``, ``repair``, ``chair``), or None (always
    for a divergence check, which answers JSON only)."""
    mode = call.hints.get("verdict")
    if call.kind == "divergence" or not isinstance(mode, str):
        return None
    return mode if mode in MODES else None


def spec_of(call: Call) -> AnswerSpec:
    return AnswerSpec.from_hint(call.hints.get("answer"))


def is_chair(call: Call) -> bool:
    """Whether a repair is the chair's (its kind, or the decision it was given, says so)."""
    return call.kind in CHAIR_KINDS or isinstance(call.hints.get("decision"), Mapping)


def expert_verdict(call: Call, name: str, position: tuple[str, str] | None, *, repair: bool = False) -> str:
    """The verdict line an expert ends with, after a text whose last ``Position:`` line
    is ``position`` (stance, sentence); broken when ``malformed_verdict`` says so."""
    broken = call.opts.malformed_verdict
    if broken == "always" or (broken == "once" and not repair):
        return BROKEN_REPAIR if repair else BROKEN_TURN
    stance = position[0] if position else call.stance(name)
    sentence = strip_end(position[1]) if position and position[1] else ""
    words = sentence.split()
    reason = " ".join(words[:REASON_WORDS]) + ("…" if len(words) > REASON_WORDS else ".") if words else ""
    pick = expert_pick(call, name, stance)
    return verdict_line(pick.answer, pick.confidence, reason, pick.ranking)


def expert_pick(call: Call, name: str, stance: str, *, later: bool | None = None) -> Pick:
    """What ``name`` answers in this call (``later``: whether it is a later round, which
    only the solver's conformity reads; by default round > 1 or a debate)."""
    spec = spec_of(call)
    if call.opts.solver is None:
        pick = _by_stance(call, spec, name, stance)
        labels, answers = _review_of(call)
        if not labels:
            return pick
        agreeing = [label for label, given in zip(labels, answers, strict=False) if given == pick.answer]
        rest = Dice(name, call.topic.question, "review").shuffled([x for x in labels if x not in agreeing])
        return Pick(pick.answer, pick.confidence, tuple(agreeing + rest))
    solver = Solver(call.opts.solver, call.topic.question, spec)
    turn = (call.kind, call.round)
    if later is None:
        later = call.round > 1 or call.kind == "debate"
    solved = solver.answer(name, later=later, turn=turn, peers=call.hints.get("peer_answers"))
    shown, answers = _review_of(call)
    if spec.type != "choice" or not shown:
        return Pick(solved.answer, solved.confidence)
    # a reviewer ranks the labels shown (best first) and gives its own answer
    return Pick(solved.answer, solved.confidence, tuple(solver.ranking(name, shown, answers, turn)))


def _review_of(call: Call) -> tuple[list[str], list[Any]]:
    """The labels a reviewer is shown, and the answers behind them (empty outside a review)."""
    review = call.hints.get("review")
    if not isinstance(review, Mapping) or not isinstance(review.get("labels"), list | tuple):
        return [], []
    answers = review.get("answers")
    return [str(label) for label in review["labels"]], list(answers) if isinstance(answers, list | tuple) else []


def _by_stance(call: Call, spec: AnswerSpec, name: str, stance: str) -> Pick:
    dice = Dice(name, call.topic.question, "verdict")
    confidence = 0.5 + 0.45 * dice.uniform()
    if spec.type == "choice":
        options = spec.options
        if stance == "support":
            return Pick(options[0], confidence)
        if stance == "oppose":
            return Pick(options[1 % len(options)], confidence)
        return Pick(dice.pick(options), confidence)
    if spec.type == "number":
        value = value_of(call.topic.question)
        base = value if value is not None else 1 + dice.below(100)
        return Pick(base if stance == "support" else base + dice.pick(OFFSETS), confidence)
    return Pick(TEXT_BY_STANCE.get(stance, "yes, with conditions"), confidence)


def decided(call: Call) -> Answer | None:
    """The decision's answer (``hints["decision"]["answer"]``), or None: no winner."""
    decision = call.hints.get("decision")
    if not isinstance(decision, Mapping) or decision.get("answer") is None:
        return None
    answer = decision["answer"]
    accepted = spec_of(call).accepts(answer)
    if accepted is not None:
        return accepted
    return answer if isinstance(answer, int | float) and not isinstance(answer, bool) else str(answer)


def chair_name(call: Call) -> str:
    return str(call.hints.get("moderator") or "the chair")


def decision_sentence(call: Call) -> str | None:
    """What a chair's recommendation says of the decision ("the panel's vote chose X
    (3 of 5 verdicts)."), or None when this call is not a chair's verdict."""
    if mode_of(call) != "chair":
        return None
    answer = decided(call)
    if answer is None:
        own = _chair_pick(call).answer
        return f"{_whose(call)} found no winner (a tie, or no verdict to count); my own pick is {own}."
    k, n = tally(call.hints.get("peer_answers"), spec_of(call), answer)
    count = f"{k} of {n} verdict{'s' if n > 1 else ''}" if n else "as counted from the experts' verdicts"
    return f"{_whose(call)} chose {answer} ({count})."


def chair_verdict(call: Call, *, repair: bool = False) -> str:
    """The chair's verdict line: the decision's answer (its own pick when there is no
    winner; another answer under ``contradict_decision``)."""
    if repair and call.opts.malformed_verdict == "always":
        return BROKEN_REPAIR
    answer = decided(call)
    if answer is None:
        pick = _chair_pick(call)
        return verdict_line(pick.answer, pick.confidence, "The vote found no winner, so this is my own pick.")
    k, n = tally(call.hints.get("peer_answers"), spec_of(call), answer)
    confidence = max(0.5, k / n) if n else 0.8
    stated = spec_of(call).other_than(answer) if call.opts.contradict_decision else answer
    return verdict_line(stated, confidence, f"{cap(_whose(call))} chose {answer}.")


def _whose(call: Call) -> str:
    """ "the panel's vote", "the team's vote": who decided, and how."""
    decision = call.hints.get("decision")
    protocol = decision.get("protocol") if isinstance(decision, Mapping) else None
    who = "team" if call.kind == "synthesis" else "panel"
    return f"the {who}'s {protocol or 'decision'}"


def _chair_pick(call: Call) -> Pick:
    name = chair_name(call)
    return expert_pick(call, name, call.stance(name), later=False)
