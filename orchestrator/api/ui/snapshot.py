"""What the plan page shows, read from the database for one request: the plan view
(statuses, usage), each phase's timings, which phase is the result, and the id of the
last stored event — where the page's event stream starts, so the stream adds only what
happened after the page was read (:mod:`orchestrator.api.events`); a phase's full text or
the plan's result with its briefing citations resolved (what the page renders as Markdown);
and a page of the plan list with each plan's progress and cost.

Read through the read side (:class:`~orchestrator.control.reads.PlanReads`) with the
caller's principal, so another tenant's plan is
``plan.not_found`` here exactly as on every ``/v1`` route.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.briefing.documents import CitationView
from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import PhaseNotFound, storage_boundary
from orchestrator.plan.views import PlanView, plan_view
from storage import outbox, usage
from storage.identity import Principal
from storage.listing import Page
from storage.plan_progress import spent_tokens
from storage.status import PhaseStatus


@dataclass(frozen=True)
class Timing:
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class PlanSnapshot:
    view: PlanView
    timings: dict[str, Timing]  # by phase key: the current attempt's
    terminal: str | None  # the key of the phase whose text is the plan's result
    last_event_id: int
    approved_by: dict[str, Any] | None = None  # who approved the draft (the ``approved`` event's actor)

    @property
    def levels(self) -> dict[str, int]:
        """Each phase's depth in the dependency graph (0: no inputs): the page's rows."""
        deps = {p.key: [d for d in p.depends_on if d] for p in self.view.phases}
        depth: dict[str, int] = {}
        remaining = dict(deps)
        while remaining:
            ready = [k for k, ds in remaining.items() if all(d in depth or d not in deps for d in ds)]
            if not ready:  # a cycle, which expansion never stores: the rest go on one more row
                bottom = max(depth.values(), default=-1) + 1
                depth.update(dict.fromkeys(remaining, bottom))
                break
            for key in ready:
                depth[key] = 1 + max((depth[d] for d in remaining[key] if d in depth), default=-1)
                del remaining[key]
        return depth

    @property
    def drawn(self) -> dict[str, list[str]]:
        """Each phase's inputs as the graph draws them: without an input it also has through
        another (a synthesis that reads every phase is drawn from the last of them only),
        so the lines show the order of the meeting, not every read."""
        deps = {p.key: [d for d in p.depends_on if d] for p in self.view.phases}
        above: dict[str, set[str]] = {}

        def ancestors(key: str, seen: frozenset[str] = frozenset()) -> set[str]:
            if key not in above:
                found: set[str] = set()
                for d in deps.get(key, []):
                    if d in deps and d not in seen:
                        found |= {d} | ancestors(d, seen | {key})
                above[key] = found
            return above[key]

        return {key: [d for d in ds if d in deps and not any(d in ancestors(o) for o in ds if o != d)]
                for key, ds in deps.items()}


@dataclass(frozen=True)
class Text:
    """A stored text with its briefing citations resolved (what the page renders)."""

    key: str
    text: str
    citations: list[CitationView]
    phases: frozenset[str]  # the plan's phase keys: what a phase citation may link to
    kind: str  # the phase's kind


@dataclass(frozen=True)
class Listing:
    page: Page
    tokens: dict[str, int]  # by plan id: what each has spent so far


def read_snapshot(reads: PlanReads, ref: str, principal: Principal | None) -> PlanSnapshot:
    """The plan ``ref`` names, as ``principal`` may see it (blocking: run it in a thread)."""
    plan = reads.get_plan(ref, principal=principal)
    with storage_boundary():
        last = outbox.last_event_id(reads.db, plan.id)  # before the state: nothing after it is missed
    state = reads.state(plan.id, principal=principal)
    with storage_boundary():
        rows = usage.rows_for_plan(reads.db, plan.id)
    terminal = [p.key for p in state.phases if p.meta.get("terminal")]
    view = plan_view(state, rows)
    approved = None
    if view.approval is not None and view.approval["state"] == "approved":
        with storage_boundary():
            event = outbox.last_of_type(reads.db, plan.id, "approved")
        approved = (event.data.get("actor") or {"name": "the operator"}) if event else None
    return PlanSnapshot(view=view, timings={p.key: Timing(p.started_at, p.finished_at) for p in state.phases},
                        terminal=terminal[-1] if terminal else None, last_event_id=last, approved_by=approved)


def read_text(reads: PlanReads, ref: str, key: str | None, principal: Principal | None) -> Text | None:
    """The full text of phase ``key`` (None: the plan's result) with its citations, or None
    while it has none; ``plan.not_found`` for a plan ``principal`` may not see, like every
    read, and ``phase.not_found`` for a key the plan has no phase for."""
    state = reads.state(ref, principal=principal)
    if key is None:
        terminal = [p for p in state.phases if p.meta.get("terminal")]
        if not terminal or terminal[-1].status != PhaseStatus.COMPLETED:
            return None
        key = terminal[-1].key
    phase = state.by_key().get(key)
    if phase is None:
        raise PhaseNotFound(f"plan {state.plan.id} has no phase {key!r}", details=[{"field": "key",
                                                                                    "message": "no such phase"}])
    text = reads.phase_text(state.plan.id, key)
    if text is None:
        return None
    return Text(key=key, text=text, citations=reads.citations(state.plan.id, text),
                phases=frozenset(state.by_key()), kind=phase.kind)


def read_listing(reads: PlanReads, principal: Principal | None, filters: dict[str, object]) -> Listing:
    """A page of the plans ``principal`` may see (each with its progress), and what each cost."""
    found = reads.list_plans(principal=principal, **filters)
    with storage_boundary():
        tokens = spent_tokens(reads.db, [p.id for p in found.plans])
    return Listing(page=found, tokens=tokens)
