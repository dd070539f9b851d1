"""A plan's verdicts and its decision, over its stored phases.

The worker calls these at two points. When an expert's phase completes,
:func:`phase_verdict` reads the verdict its text ends with (or records an abstention), and for
the chair's last phase the answer it states, flagged when it contradicts the tally. When the
``decision`` phase runs (:mod:`orchestrator.plan.expand` places it before the chair's), it
:func:`decide` s from its inputs' stored verdicts — code, no model, no tokens — and its text
is the record read aloud (:func:`decision_text`), which is what the chair is given.

Each expert's ballot is its latest verdict in plan order (a board's later round, a team's
debate after its phase): an expert who missed the last round votes with what it said
before; one who never gave a readable verdict abstains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.deliberation.answers import same_answer
from orchestrator.deliberation.protocols import Ballot, Decision, agreement, tally
from orchestrator.deliberation.verdicts import MalformedVerdict, Verdict, abstention, read_answer, read_verdict
from orchestrator.plan.expand import expand_board
from orchestrator.plan.prompts import CHAIR_KINDS, VERDICT_KINDS
from orchestrator.plan.schema import BoardPlan, TeamPlan
from storage.read_models import PhaseRecord


def needs_repair(plan: BoardPlan | TeamPlan, phase: PhaseRecord, text: str,
                 inputs: Sequence[PhaseRecord]) -> str | None:
    """What is wrong with the verdict an expert's ``text`` ends with, or None when it reads
    (or the phase owes none). The runner asks for a repair once."""
    if plan.answer is None or phase.kind not in VERDICT_KINDS:
        return None
    try:
        read_verdict(text, plan.answer, labels=shown_labels(phase, inputs))
    except MalformedVerdict as exc:
        return str(exc)
    return None


def shown_labels(phase: PhaseRecord, inputs: Sequence[PhaseRecord]) -> list[str]:
    """The labels a review was shown: those of the answers (round-one turns) that exist."""
    if phase.kind != "review":
        return []
    spoke = {p.expert for p in inputs if p.kind == "turn" and p.round == 1 and p.verdict is not None}
    return [label for name, label in zip(phase.meta.get("shown", []), phase.meta.get("labels", []), strict=False)
            if name in spoke]


def _reviewed(phase: PhaseRecord, inputs: Sequence[PhaseRecord], verdict: Verdict) -> dict[str, Any]:
    """What a review's verdict adds: the labels shown and who stood behind each, the labels as
    ranked, and the answers in that order (what Borda counts)."""
    by_label = dict(zip(phase.meta.get("labels", []), phase.meta.get("shown", []), strict=False))
    said = {p.expert: p.verdict.get("answer") for p in inputs if p.kind == "turn" and p.round == 1 and p.verdict}
    labels = shown_labels(phase, inputs)
    answers = [said.get(by_label[label]) for label in verdict.ranking]
    return {"ranking": list(dict.fromkeys(a for a in answers if a is not None)),
            "review": {"labels": labels, "authors": [by_label[label] for label in labels],
                       "ranked": list(verdict.ranking)}}


def phase_verdict(plan: BoardPlan | TeamPlan, phase: PhaseRecord, text: str, inputs: Sequence[PhaseRecord],
                  *, repaired: bool = False) -> dict[str, Any] | None:
    """The verdict to store with a completing phase: an expert's (an abstention when it cannot
    be read), or the chair's stated answer with ``matches_decision`` when a tally preceded it.
    None for phases that owe none."""
    if plan.answer is None or phase.kind not in VERDICT_KINDS | CHAIR_KINDS:
        return None
    try:
        verdict = read_verdict(text, plan.answer, labels=shown_labels(phase, inputs))
        if repaired:
            verdict = Verdict(verdict.answer, verdict.confidence, verdict.reason, verdict.ranking, repaired=True)
    except MalformedVerdict as exc:
        verdict = abstention(str(exc), repaired=repaired)
    stored = verdict.as_json()
    if phase.kind == "review" and not verdict.abstained:
        stored |= _reviewed(phase, inputs, verdict)
    if phase.kind in CHAIR_KINDS:
        decision = next((p.verdict for p in inputs if p.kind == "decision" and p.verdict is not None), None)
        if decision is not None:
            stored["decision"] = decision.get("key")
            stored["matches_decision"] = _matches(plan, decision.get("answer"), verdict.answer)
    return stored


def ballots(inputs: Sequence[PhaseRecord]) -> list[Ballot]:
    """One ballot per expert: the verdict of its latest phase that has one (plan order)."""
    latest: dict[str, PhaseRecord] = {}
    for p in sorted(inputs, key=lambda p: p.position):
        if p.kind in VERDICT_KINDS and p.expert and p.verdict is not None:
            latest[p.expert] = p
    return [Ballot(expert=name, phase=p.key, verdict=Verdict.from_json(p.verdict or {})) for name, p in latest.items()]


def panel(plan: BoardPlan | TeamPlan) -> list[str]:
    """The experts who vote: a board's experts (never its moderator); a team's experts who own
    a phase (not one who only writes the synthesis)."""
    if isinstance(plan, BoardPlan):
        return [e.name for e in plan.experts]
    owners = {ph.expert for ph in plan.phases}
    return [e.name for e in plan.experts if e.name in owners]


def panel_ballots(plan: BoardPlan | TeamPlan, inputs: Sequence[PhaseRecord]) -> list[Ballot]:
    """:func:`ballots` in the plan's order of experts, with an abstention for each member of the
    :func:`panel` who never spoke (so a silent expert counts against agreement)."""
    cast = {b.expert: b for b in ballots(inputs)}
    return [cast.get(name) or Ballot(expert=name, phase="", verdict=abstention("no verdict was given"))
            for name in panel(plan)]


def decide(plan: BoardPlan | TeamPlan, plan_id: str, inputs: Sequence[PhaseRecord]) -> Decision:
    """The decision phase's tally over its inputs' stored verdicts, its draws seeded with ``plan_id``
    (the plan's id — or, in a what-if fork, its source's: :func:`orchestrator.plan.fingerprint.decision_seed`)."""
    assert plan.answer is not None and plan.decide != "chair"
    threshold = plan.consensus_threshold if isinstance(plan, BoardPlan) else 0.8
    return tally(plan.decide, plan.answer, panel_ballots(plan, inputs), seed=plan_id,
                 threshold=threshold if plan.decide == "consensus" else None)


@dataclass(frozen=True)
class Agreed:
    """A board's panel agreed after ``after_round``: the later rounds' phases can be skipped."""

    after_round: int
    agreement: float
    threshold: float
    skip: tuple[str, ...]
    rounds: tuple[int, ...]

    @property
    def reason(self) -> str:
        return (f"{self.agreement:.0%} of the panel gave the same answer after round {self.after_round} "
                f"(stop_when agreement {self.threshold:.0%})")


def agreed(plan: BoardPlan | TeamPlan, phase: PhaseRecord, inputs: Sequence[PhaseRecord]) -> Agreed | None:
    """Whether a board stops early at this round summary: it declares ``stop_when`` (or
    decides by consensus), rounds remain, and the share of its panel giving one answer in its
    latest verdicts reached the threshold."""
    if not isinstance(plan, BoardPlan) or plan.answer is None or phase.kind != "round_summary":
        return None
    if plan.stop_when is None and plan.decide != "consensus":
        return None
    after = phase.round or 0
    if after >= plan.rounds:
        return None
    share = agreement(plan.answer, panel_ballots(plan, inputs))
    if share < plan.consensus_threshold:
        return None
    later = [p for p in expand_board(plan) if (p.round or 0) > after and p.kind in ("turn", "round_summary")]
    return Agreed(after_round=after, agreement=share, threshold=plan.consensus_threshold,
                  skip=tuple(p.key for p in later), rounds=tuple(range(after + 1, plan.rounds + 1)))


PROTOCOL_NAMES = {"vote": "plurality vote", "weighted_vote": "confidence-weighted vote", "borda": "Borda count",
                  "consensus": "consensus"}


def decision_text(decision: Decision) -> str:
    """The decision record read aloud: the phase's stored text, and the chair's context."""
    record = decision.as_json()
    name = PROTOCOL_NAMES.get(decision.protocol, decision.protocol)
    if decision.key is None:
        why = "every expert abstained" if all(b.verdict.abstained for b in decision.ballots) else \
            "every vote given had confidence 0, and a weighted vote weighs by confidence"
        lines = [f"Decision by {name}: no answer ({why})."]
    else:
        lines = [f"Decision by {name}: {decision.key} — score {_num(decision.candidates[0].score)}, margin "
                 f"{_num(decision.margin)}, {len(decision.candidates[0].voters)} of {len(decision.ballots)} "
                 f"experts agree."]
    consensus = record.get("consensus")
    if consensus is not None:
        lines.append(f"Consensus {'reached' if consensus['reached'] else 'not reached'} "
                     f"(threshold {consensus['threshold']:.0%} of the panel).")
    if decision.tie_break:
        how = "the higher total confidence" if decision.tie_break["by"] == "confidence" else \
            f"a draw seeded with {decision.tie_break.get('seed')}"
        lines.append(f"A tie between {', '.join(decision.tie_break['between'])} was broken by {how}.")
    lines.append("Votes:")
    for vote in record["votes"]:
        if vote.get("abstained"):
            lines.append(f"- {vote['expert']}: abstained ({vote['abstained']})")
        else:
            lines.append(f"- {vote['expert']}: {vote['answer']} (confidence {vote['confidence']:.2f}, weight "
                         f"{_num(vote['weight'])}) — {vote['reason']}")
    return "\n".join(lines)


def chair_fallback(plan: BoardPlan | TeamPlan, phase: PhaseRecord, inputs: Sequence[PhaseRecord]) -> PhaseRecord | None:
    """The completed decision phase a failed chair's last phase may stand on, or None (the
    chair then fails as any phase does)."""
    if not plan.tallied or phase.kind not in CHAIR_KINDS or not phase.meta.get("terminal"):
        return None
    if phase.meta.get("revision_of"):  # a failed revision falls back to its first draft instead
        return None
    return next((p for p in inputs if p.kind == "decision" and p.verdict is not None), None)


def stated_by_tally(decision: PhaseRecord) -> dict[str, Any]:
    """The verdict of a chair that could not speak: the tally's answer, stated for it."""
    record = decision.verdict or {}
    return {"answer": record.get("answer"), "confidence": record.get("agreement", 0.0),
            "reason": "the panel's tallied decision (the chair could not write the synthesis)",
            "decision": record.get("key"), "matches_decision": True if record.get("answer") is not None else None}


def _matches(plan: BoardPlan | TeamPlan, decided: Any, stated: Any) -> bool | None:
    """Whether the chair's answer is the tally's (None when the tally had no answer)."""
    if decided is None:
        return None
    if stated is None or plan.answer is None:
        return False
    try:
        return same_answer(plan.answer, read_answer(plan.answer, decided), stated)
    except MalformedVerdict:
        return False


def _num(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")
