"""What code writes when the moderator cannot: a stand-in for a round summary, a board's final
summary or a team's synthesis whose call failed on every model.

llm-council-style systems lose the whole run at the chair's step ("Unable to generate final
synthesis"). Here the experts' words are already stored and paid for, so a failed moderator
phase completes instead with a summary written by code from them — each expert's latest words
this round (a round summary) or in the meeting (the last word), and who did not speak — opened
by a line that says no model wrote it and why, and flagged in its verdict (``stand_in``:
``{code, message}``) so every reader (view, CLI, page) can say so. A tallied plan's last word
also carries the decision record read aloud (:func:`orchestrator.plan.tally.decision_text`).

Nothing is stood in for when Conclave itself refused the call (:data:`REFUSALS`: a spent
budget ends the plan ``budget_exhausted``; a refused model or fault switch is the operator's to
fix), when no expert said anything to gather, or for a sent-back draft's revision (the first
draft waits for approval again). A cancel or a shutdown never reaches here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.plan.dag import BUDGET_EXHAUSTED
from orchestrator.plan.schema import BoardPlan, TeamPlan
from storage.read_models import PhaseRecord
from storage.status import PhaseStatus

KINDS = frozenset({"round_summary", "final_summary", "synthesis"})
SPOKEN = ("turn", "expert", "debate", "review")  # the phases in which an expert says something
GIST_CHARS = 400
#: failures that are Conclave's own refusals, not a model's: a spent budget ends the plan as
#: such, and a refused model, switch or address is the operator's to fix — nothing is stood in
REFUSALS = frozenset({BUDGET_EXHAUSTED, "llm.unpriced", "llm.cancelled", "llm.misconfigured",
                      "llm.model_not_allowed", "llm.egress_refused", "llm.fault_not_allowed"})


def applies(phase: PhaseRecord, code: str, inputs: Sequence[PhaseRecord]) -> bool:
    """Whether a failure with ``code`` of ``phase`` is stood in for: a round summary, or the
    plan's last word (its terminal final summary or synthesis) — not a sent-back draft's
    revision (the first draft, written by a model, stands in for that:
    :func:`storage.approval.fall_back`) — when the models failed (not one of Conclave's own
    refusals, :data:`REFUSALS`) and there are experts' words to gather."""
    if code in REFUSALS or not _spoken(phase, inputs):
        return False
    if phase.kind == "round_summary":
        return True
    return phase.kind in KINDS and bool(phase.meta.get("terminal")) and not phase.meta.get("revision_of")


def _spoken(phase: PhaseRecord, inputs: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    """What the experts said that the phase gathers: this round's words (a round summary), or
    the whole meeting's."""
    return [p for p in inputs if p.kind in SPOKEN and p.expert and p.status == PhaseStatus.COMPLETED
            and (phase.kind != "round_summary" or p.round == phase.round)]


def _gist(text: str) -> str:
    """An expert's words, shortened: its text without the verdict line, on one line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("Verdict:")]
    flat = " ".join(" ".join(lines).split())
    return flat if len(flat) <= GIST_CHARS else flat[:GIST_CHARS].rsplit(" ", 1)[0] + "…"


def text(plan: BoardPlan | TeamPlan, phase: PhaseRecord, inputs: Sequence[PhaseRecord],
         texts: Mapping[str, str], code: str, decision: str | None = None) -> str:
    """The stand-in's text: the flag line, the decision record (when tallied), then each
    expert's latest words (this round's, for a round summary), cited by phase key, and who is
    missing."""
    round_only = phase.kind == "round_summary"
    spoken = [p for p in _spoken(phase, inputs) if p.id in texts]
    latest: dict[str, PhaseRecord] = {}
    for p in spoken:  # inputs are in plan order: a later phase is a later word
        latest[p.expert or ""] = p
    what = f"round {phase.round}'s summary" if round_only else (
        "the synthesis" if phase.kind == "synthesis" else "the final summary")
    lines = [f"> Written by Conclave's code, not by a model: the call for {what} failed on every model "
             f"({code}). What follows is the experts' own words, gathered, each shortened to its opening.", ""]
    if decision:
        lines += [decision.rstrip(), ""]
    lines.append(f"Round {phase.round}, as the experts spoke:" if round_only else "The experts' last words:")
    for name, p in latest.items():
        role = _role(plan, name)
        lines.append(f"- {name}{f' ({role})' if role else ''}: {_gist(texts[p.id])} [{p.key}]")
    missing = [e.name for e in plan.experts if e.name not in latest]
    if missing:
        lines.append(f"Did not speak{' this round' if round_only else ''}: {', '.join(missing)}.")
    return "\n".join(lines)


def _role(plan: BoardPlan | TeamPlan, name: str) -> str | None:
    try:
        return plan.expert(name).role
    except KeyError:
        return None


def verdict(plan: BoardPlan | TeamPlan, phase: PhaseRecord, code: str, message: str,
            stated: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stand-in's stored verdict: the flag (``stand_in``), and for the plan's last word the
    chair's failure (``chair_failed``) with the answer the tally states for it (``stated``),
    or no answer when nothing was tallied."""
    failure = {"code": code, "message": message}
    if phase.kind == "round_summary":
        return {"stand_in": failure}
    out: dict[str, Any] = {"stand_in": failure, "chair_failed": failure}
    if stated is not None:
        return {**stated, **out}
    if plan.answer is not None:
        out |= {"answer": None, "confidence": 0.0, "abstained": "the chair could not speak: no answer was stated"}
    return out
