"""Turn a validated plan into the phases stored for it.

Board: ``opening`` → per round ``rN.<expert>`` turns in parallel → ``rN.summary``
→ ``final``. Team: the declared phases; a divergence ``check-N`` after every set
of two or more parallel expert phases (same dependencies); ``synthesis`` last.
Debates are not expanded here: a check inserts them while the plan runs. A plan whose
answer is tallied (``decide:`` a protocol other than ``chair``) has a ``decision`` phase
before its last: computed by code from the experts' verdicts, no model
(:mod:`orchestrator.deliberation.protocols`); the chair's final phase depends on it.

Every phase is stored with its transitive ``inputs`` (the keys of everything it depends
on, directly or not), so a claim reads its inputs without loading the plan.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections import defaultdict
from typing import Any

from orchestrator.plan.dag import closure
from orchestrator.plan.schema import BoardPlan, Expert, TeamPlan
from storage.read_models import NewPhase

DECISION = "decision"  # the key of a tallied plan's decision phase


def seat(plan: BoardPlan | TeamPlan, expert: Expert, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A phase's meta for ``expert``'s turn: a person's seat is marked ``human`` (with its
    ``respond_within`` when the plan gives one), so no worker ever runs it, and carries the
    plan's ``missing_expert`` rule — what its dependents do when it ends unanswered
    (:func:`orchestrator.plan.dag.absent`)."""
    meta = dict(meta or {})
    if expert.human:
        meta["human"] = True
        meta["missing_expert"] = plan.missing_expert
        if expert.respond_within is not None:
            meta["respond_within"] = expert.respond_within
    return meta


def expand(plan: BoardPlan | TeamPlan) -> list[NewPhase]:
    phases = expand_board(plan) if isinstance(plan, BoardPlan) else expand_team(plan)
    inputs = closure({p.key: p.depends_on for p in phases})
    return [dataclasses.replace(p, inputs=inputs[p.key]) for p in phases]


def expand_board(plan: BoardPlan) -> list[NewPhase]:
    tolerate = plan.missing_expert == "tolerate"
    phases = [NewPhase(key="opening", kind="opening", position=0, depends_on=[],
                       expert=plan.moderator.name, round=0)]
    prev = "opening"
    for r in range(1, plan.rounds + 1):
        turns = [NewPhase(key=f"r{r}.{e.slug}", kind="turn", position=len(phases) + i, depends_on=[prev],
                          expert=e.name, round=r, group_key=f"r{r}", meta=seat(plan, e))
                 for i, e in enumerate(plan.experts)]
        phases += turns
        heard = [t.key for t in turns]
        if r == 1 and plan.review is not None:
            reviews = review_phases(plan, heard, start=len(phases))
            phases += reviews
            heard += [p.key for p in reviews]
        summary = NewPhase(key=f"r{r}.summary", kind="round_summary", position=len(phases),
                           depends_on=heard, expert=plan.moderator.name, round=r,
                           meta={"tolerate_failed_deps": tolerate})
        phases.append(summary)
        prev = summary.key
    if plan.tallied:
        phases.append(NewPhase(key=DECISION, kind="decision", position=len(phases), depends_on=[prev],
                               round=plan.rounds + 1))
        prev = DECISION
    phases.append(NewPhase(key="final", kind="final_summary", position=len(phases), depends_on=[prev],
                           expert=plan.moderator.name, round=plan.rounds + 1, meta={"terminal": True}))
    return phases


LABELS = "ABCDEFGHIJKLMNOPQRSTUVWX"


def review_phases(plan: BoardPlan, turns: list[str], *, start: int) -> list[NewPhase]:
    """One ``review.<expert>`` per expert after round one: it is shown the others' round-one
    answers (``meta.shown``: their experts, in an order drawn for this reviewer from a SHA-256
    seed of the question and its name — stored, so position bias can be audited) as labels
    A, B, C…, and ranks them. It waits for every turn (tolerating a missing one)."""
    assert plan.review is not None
    out = []
    for i, e in enumerate(plan.experts):
        others = [x.name for x in plan.experts if not (plan.review.exclude_self and x.name == e.name)]
        seed = int.from_bytes(hashlib.sha256(f"{plan.question}|review|{e.name}".encode()).digest()[:8], "big")
        random.Random(seed).shuffle(others)
        out.append(NewPhase(key=f"review.{e.slug}", kind="review", position=start + i, depends_on=list(turns),
                            expert=e.name, round=1, group_key="review",
                            meta=seat(plan, e, {"shown": others, "labels": list(LABELS[:len(others)]),
                                          "anonymize": plan.review.anonymize, "tolerate_failed_deps": True})))
    return out


def expand_team(plan: TeamPlan) -> list[NewPhase]:
    deps = {ph.id: list(ph.depends_on) for ph in plan.phases}
    checks: dict[str, list[str]] = {}  # check key -> the parallel set it examines
    if plan.divergence != "off" and plan.max_debates > 0:
        by_deps: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for ph in plan.phases:
            by_deps[tuple(sorted(ph.depends_on))].append(ph.id)
        for group in by_deps.values():
            if len(group) >= 2:
                checks[f"check-{len(checks) + 1}"] = group
    waits_for = {member: check for check, group in checks.items() for member in group}

    def with_checks(ds: list[str]) -> list[str]:
        extra = [waits_for[d] for d in ds if d in waits_for]
        return ds + [c for c in dict.fromkeys(extra) if c not in ds]

    phases: list[NewPhase] = []
    for ph in plan.phases:
        phases.append(NewPhase(key=ph.id, kind="expert", position=len(phases),
                               depends_on=with_checks(deps[ph.id]), expert=ph.expert,
                               meta=seat(plan, plan.expert(ph.expert), {"prompt": ph.prompt})))
    for check, group in checks.items():
        phases.append(NewPhase(key=check, kind="divergence", position=len(phases), depends_on=list(group),
                               expert=plan.synthesis.expert if plan.synthesis else None, meta={"examines": group}))
    synthesis = plan.synthesis
    inputs = with_checks(list((synthesis.depends_on if synthesis else None) or [ph.id for ph in plan.phases]))
    if plan.tallied:  # without a synthesis, the decision is the team's last word
        phases.append(NewPhase(key=DECISION, kind="decision", position=len(phases), depends_on=inputs,
                               meta={} if synthesis else {"terminal": True}))
        inputs = [*inputs, DECISION]
    if synthesis is not None:
        phases.append(NewPhase(key="synthesis", kind="synthesis", position=len(phases),
                               depends_on=inputs, expert=synthesis.expert,
                               meta={"prompt": synthesis.prompt, "terminal": True}))
    return phases
