"""What the plan page shows, read from the database for one request: the plan view
(statuses, usage), each phase's timings, which phase is the result, and the id of the
last stored event — where the page's event stream starts, so the stream adds only what
happened after the page was read (:mod:`orchestrator.api.events`).

Read through the read side (:class:`~orchestrator.control.reads.PlanReads`) with the
caller's principal, so another tenant's plan is
``plan.not_found`` here exactly as on every ``/v1`` route.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import storage_boundary
from orchestrator.plan.views import PlanView, plan_view
from storage import outbox, usage
from storage.identity import Principal


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

def read_snapshot(reads: PlanReads, ref: str, principal: Principal | None) -> PlanSnapshot:
    """The plan ``ref`` names, as ``principal`` may see it (blocking: run it in a thread)."""
    plan = reads.get_plan(ref, principal=principal)
    with storage_boundary():
        last = outbox.last_event_id(reads.db, plan.id)  # before the state: nothing after it is missed
    state = reads.state(plan.id, principal=principal)
    with storage_boundary():
        rows = usage.rows_for_plan(reads.db, plan.id)
    terminal = [p.key for p in state.phases if p.meta.get("terminal")]
    return PlanSnapshot(view=plan_view(state, rows),
                        timings={p.key: Timing(p.started_at, p.finished_at) for p in state.phases},
                        terminal=terminal[-1] if terminal else None, last_event_id=last)
