"""A two-phase plan stored through the repositories, and the readings the repository
tests assert on — all through ``storage`` and the plan view, never by raw SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.plan.views import PlanView, plan_view
from storage import Database, outbox, phases, plans, usage
from storage.read_models import NewPhase, PhaseRecord, UsageRecord
from tests.integration.durability import wait_for

LEASE = timedelta(seconds=0.5)


def new_plan(db: Database, title: str = "fence", *, max_active: int = 100) -> str:
    """``opening`` → ``final`` (terminal): the smallest plan with a dependency."""
    created = plans.create_plan(
        db, title=title, kind="board", spec={"title": title}, task_id=None, max_active=max_active,
        phases=[NewPhase("opening", "opening", 0, []),
                NewPhase("final", "final", 1, ["opening"], meta={"terminal": True})])
    assert created.created
    return created.plan_id


def phase(db: Database, plan_id: str, key: str) -> PhaseRecord:
    return plans.load_state(db, plan_id).by_key()[key]


def claim(db: Database, plan_id: str, key: str, owner: str, lease: timedelta = LEASE) -> phases.Claimed | None:
    """Claim ``key`` as ``owner``: the claim as stored (``.phase.attempt`` is the new attempt), or None."""
    return phases.claim_phase(db, phase(db, plan_id, key).id, owner=owner, lease=lease)


def wait_until_lease_expired(db: Database, plan_id: str, key: str) -> None:
    """Poll the clock leases are set with (the caller's) until the stored lease has passed."""
    expires = phase(db, plan_id, key).lease_expires_at
    assert expires is not None
    wait_for(lambda: datetime.now(UTC) > expires, 30, interval=0.02, what=f"the lease of {key} to expire")


def spend(db: Database, plan_id: str, key: str, attempt: int, tokens_in: int, tokens_out: int,
          seq: int = 1, *, source: str = "estimated") -> None:
    """Record one model call's usage for ``attempt``, as a worker does when the call returns:
    ``source`` ``"provider"`` when the provider reported it, ``"estimated"`` when it did not."""
    assert usage.record_usage(db, plan_id=plan_id, phase_id=phase(db, plan_id, key).id, attempt=attempt,
                              seq=seq, purpose="chat", model="offline:test", input_tokens=tokens_in,
                              output_tokens=tokens_out, source=source,
                              method=None if source == "provider" else "test")


def complete(db: Database, plan_id: str, key: str, attempt: int, text: str, **kw: Any) -> phases.Finished:
    """Complete ``key`` with ``text`` as ``attempt`` does; ``kw`` overrides the other fields of the
    result (``summary``, ``truncated``, ``fallback``, ``offloaded``) or adds an ``insertion``."""
    result: dict[str, Any] = {"summary": text[:20], "truncated": False, "fallback": False, "offloaded": False, **kw}
    return phases.complete_phase(db, plan_id=plan_id, phase_id=phase(db, plan_id, key).id, attempt=attempt,
                                 text=text, **result)


def fail(db: Database, plan_id: str, key: str, attempt: int, code: str = "llm.unavailable",
         message: str = "failed") -> phases.Finished:
    """Fail ``key`` as ``attempt`` does when its model call raised."""
    return phases.fail_phase(db, plan_id=plan_id, phase_id=phase(db, plan_id, key).id, attempt=attempt,
                             code=code, message=message)


def usage_by_attempt(db: Database, plan_id: str, key: str) -> dict[int, UsageRecord]:
    pid = phase(db, plan_id, key).id
    rows = [u for u in usage.rows_for_plan(db, plan_id) if u.phase_id == pid]
    assert len({u.attempt for u in rows}) == len(rows), rows
    return {u.attempt: u for u in rows}


def view(db: Database, plan_id: str) -> PlanView:
    """What ``Conclave.get`` shows: the plan view over the stored rows."""
    return plan_view(plans.load_state(db, plan_id), usage.rows_for_plan(db, plan_id))


def event_types(db: Database, plan_id: str, key: str | None = None) -> list[str]:
    return [e.type for e in outbox.list_events(db, plan_id, limit=10_000) if key is None or e.phase_key == key]
