"""Pure decisions over stored phases: what is ready, what must be skipped, how a plan ends.

Everything here is derived from stored status on every call — there is no
in-memory state to lose or to get out of step (resume is just another call).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from storage.read_models import PhaseRecord, PlanRecord
from storage.status import GIVEN_UP, TIMED_OUT, PhaseStatus, PlanStatus

BUDGET_EXHAUSTED = "llm.budget_exhausted"
EARLIEST = datetime.min.replace(tzinfo=UTC)


def _tolerant(phase: PhaseRecord) -> bool:
    return bool(phase.meta.get("tolerate_failed_deps"))


def absent(phase: PhaseRecord) -> bool:
    """A person's seat that ended unanswered at its deadline in a plan whose ``missing_expert``
    rule is ``tolerate``: what depends on it goes on without it (and is told who was absent)."""
    return (phase.status == PhaseStatus.FAILED and phase.error_code == TIMED_OUT
            and phase.meta.get("missing_expert") == "tolerate")


def inputs_done(phase: PhaseRecord, by_key: dict[str, PhaseRecord]) -> bool:
    """Every dependency completed or :func:`absent` — or, for a phase that tolerates missing
    inputs (a board's round summary), every dependency final."""
    for key in phase.depends_on:
        dep = by_key.get(key)
        if dep is None:
            return False
        if dep.status == PhaseStatus.COMPLETED or absent(dep):
            continue
        if _tolerant(phase) and dep.status in GIVEN_UP:
            continue
        return False
    return True


def blocked(phase: PhaseRecord, by_key: dict[str, PhaseRecord]) -> bool:
    """A dependency ended without a result and the phase cannot do without it (a person absent
    under ``missing_expert: tolerate`` it can)."""
    if _tolerant(phase):
        return False
    return any((d := by_key.get(k)) is not None and d.status in GIVEN_UP and not absent(d)
               for k in phase.depends_on)


def ready(phases: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    by_key = {p.key: p for p in phases}
    return [p for p in phases if p.status == PhaseStatus.PENDING and inputs_done(p, by_key)]


def to_skip(phases: Sequence[PhaseRecord]) -> list[str]:
    """Pending phases that can never run now (one step; :func:`skips` cascades)."""
    by_key = {p.key: p for p in phases}
    return [p.key for p in phases if p.status == PhaseStatus.PENDING and blocked(p, by_key)]


def skips(phases: Sequence[PhaseRecord]) -> tuple[dict[str, list[str]], list[PhaseRecord]]:
    """Every pending phase that can never run, cascaded, by reason — and the phases as
    they are once those are skipped. Once a budget is exhausted nothing pending
    runs; otherwise a phase is skipped when a dependency it cannot do without ended
    without a result (and so on, downstream)."""
    if any(p.error_code == BUDGET_EXHAUSTED for p in phases):  # a seat asked is given up too: nothing follows it
        keys = [p.key for p in phases if p.status in (PhaseStatus.PENDING, PhaseStatus.AWAITING_INPUT)]
        return {"the plan's budget is exhausted": keys} if keys else {}, _skipped(phases, set(keys))
    skipped: set[str] = set()
    current = list(phases)
    while step := to_skip(current):
        skipped.update(step)
        current = _skipped(current, set(step))
    return ({"a phase it depends on did not complete": [p.key for p in phases if p.key in skipped]}
            if skipped else {}), current


def _skipped(phases: Sequence[PhaseRecord], keys: set[str]) -> list[PhaseRecord]:
    return [dataclasses.replace(p, status=PhaseStatus.SKIPPED) if p.key in keys else p for p in phases]


def ready_since(phase: PhaseRecord, by_key: Mapping[str, PhaseRecord]) -> datetime | None:
    """When the last of the phase's direct dependencies became final (None: one is not
    final yet, or the phase has none)."""
    ends = [by_key[k].finished_at for k in phase.depends_on if k in by_key and by_key[k].final]
    if len(ends) != len(phase.depends_on) or not ends or any(e is None for e in ends):
        return None
    return max(e for e in ends if e is not None)


def needs_approval(spec: Mapping[str, Any]) -> bool:
    """The stored plan's answer is a draft until a person approves it (``synthesis: {approve:
    true}`` for a team, ``final: {approve: true}`` for a board)."""
    part = spec.get("synthesis") if spec.get("kind") == "team" else spec.get("final")
    return isinstance(part, Mapping) and part.get("approve") is True


def outcome(plan: PlanRecord, phases: Sequence[PhaseRecord]) -> tuple[PlanStatus, str | None, str | None] | None:
    """(status, error_code, error_message) once every phase is final, else None. A plan whose
    answer needs approval is ``awaiting_approval`` (not final) once its draft is written."""
    if any(not p.final for p in phases):
        return None
    if plan.cancel_requested:
        return PlanStatus.CANCELLED, "plan.cancelled", "the plan was cancelled"
    exhausted = [p for p in phases if p.error_code == "llm.budget_exhausted"]
    if exhausted:
        return PlanStatus.BUDGET_EXHAUSTED, "plan.budget_exhausted", exhausted[0].error_message
    terminal = [p for p in phases if p.meta.get("terminal")]
    if terminal and all(p.status == PhaseStatus.COMPLETED for p in terminal):
        if needs_approval(plan.spec):
            return PlanStatus.AWAITING_APPROVAL, None, None
        return PlanStatus.COMPLETED, None, None
    failed = [p for p in phases if p.status == PhaseStatus.FAILED]
    first = next((p for p in failed if not absent(p)), failed[0] if failed else None)
    message = f"phase {first.key} failed: {first.error_message}" if first else "the final phase did not run"
    if first is not None and first.error_code == TIMED_OUT and not absent(first):
        message += " (missing_expert: fatal — the plan ends when a person does not answer in time)"
    return PlanStatus.FAILED, (first.error_code if first else "plan.incomplete"), message


def closure(deps: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Every key each key depends on, directly or not (unknown keys ignored), in the
    order of ``deps`` — a phase's transitive inputs, stored with it."""
    order = {k: i for i, k in enumerate(deps)}
    memo: dict[str, set[str]] = {}

    def of(key: str, path: frozenset[str]) -> set[str]:
        if key not in memo:
            found: set[str] = set()
            for d in deps[key]:
                if d in order and d not in path:
                    found |= {d} | of(d, path | {d})
            memo[key] = found
        return memo[key]

    return {k: sorted(of(k, frozenset({k})), key=order.__getitem__) for k in deps}


def sendable(phases: Sequence[PhaseRecord], *, now: datetime, cutoff: datetime, force: bool) -> list[PhaseRecord]:
    """The phases an ``advance`` should send now (the heads of its canvas):

    - a pending phase whose inputs are done, unless a canvas already carries it: it is
      marked enqueued, and either the mark or its readiness is recent (a phase sent in a
      big canvas waits, marked, for its inputs; once they are final its message is due
      any moment) — a mark is stale only when the phase has also been ready since before
      ``cutoff``;
    - a running phase whose lease expired (its worker died), unless re-sent since ``cutoff``.

    ``force`` (resume) sends every such phase however recently it was sent. A person's seat
    is never sent: :func:`to_ask` names the seats to ask; nor is a phase held for its tenant's
    share (:mod:`storage.fairshare`), even by a resume: only a release lets it go."""
    by_key = {p.key: p for p in phases}
    out = []
    for p in phases:
        if p.human:  # a person's seat is asked, never sent (:func:`to_ask`)
            continue
        if p.held_at is not None and p.status == PhaseStatus.PENDING:
            continue  # waits for its tenant's share: released by a finishing phase or the sweep
        if p.status == PhaseStatus.PENDING and inputs_done(p, by_key):
            since = ready_since(p, by_key)
            stale = p.enqueued_at is not None and p.enqueued_at < cutoff and (since is None or since < cutoff)
            if force or p.enqueued_at is None or stale:
                out.append(p)
        elif (p.status == PhaseStatus.RUNNING and p.lease_expires_at is not None and p.lease_expires_at < now
              and (force or p.enqueued_at is None or p.enqueued_at < cutoff)):
            out.append(p)
    return out


def to_ask(phases: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    """The people's seats whose turn has come: pending, inputs done. The coordinator asks them
    (``awaiting_input``) instead of sending them."""
    by_key = {p.key: p for p in phases}
    return [p for p in phases if p.human and p.status == PhaseStatus.PENDING and inputs_done(p, by_key)]


def awaited(phases: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    """The people's seats waiting for their answers now, soonest deadline first."""
    waiting = [p for p in phases if p.status == PhaseStatus.AWAITING_INPUT]
    return sorted(waiting, key=lambda p: (p.due_at is None, p.due_at or p.started_at or EARLIEST, p.position))
