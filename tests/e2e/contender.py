"""One contender of a cross-process race, run as its own Python process by
``test_locks_across_processes``: ``python -m tests.e2e.contender MODE DATABASE_URL ARG...``.

It prints one line per step it reaches (``inside``, then its outcome) and, where the
test must hold it at a point, waits for a line on stdin. Each contender is started with
its own ``PYTHONHASHSEED``, so anything keyed by a per-process value (Python's salted
``hash()``, an id, a pid) differs between them as it would between real workers.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from storage import connect, plans, spend
from storage.exceptions import Busy, CapacityExceeded, RateLimited
from storage.read_models import NewPhase


class HeldReconciler:
    """A coordinator stand-in whose sweep says it is inside and waits for the test."""

    def reconcile(self) -> list[str]:
        print("inside", flush=True)
        sys.stdin.readline()
        return []

    def prune(self, *, every: float | None = None) -> None:
        return None

    def expire_deadlines(self) -> dict[str, list[str]]:  # people's deadlines: every tick, outside the lock
        return {}


def sweep(url: str, hold: bool) -> str:
    from tasks.housekeeping import Housekeeper

    class Quick(HeldReconciler):
        def reconcile(self) -> list[str]:
            print("inside", flush=True)
            return []

    db = connect(url, pool_size=1)
    keeper = Housekeeper(db, HeldReconciler() if hold else Quick(), interval=60,  # type: ignore[arg-type]
                         stalled_after=60)
    return "swept" if keeper.sweep() else "skipped"


def submit(url: str, tenant: str, max_active: int, submit_rate: int) -> str:
    db = connect(url, pool_size=1)
    try:
        plans.create_plan(db, title=f"{tenant} plan", kind="board", spec={"title": "t"}, task_id=None,
                          phases=[NewPhase(key="only", kind="expert", position=0, depends_on=[])],
                          tenant=tenant, max_active=max_active, submit_rate=submit_rate)
    except CapacityExceeded:
        return "capacity_exceeded"
    except RateLimited:
        return "rate_limited"
    return "created"


def resume_guard(url: str, plan_id: str, owner: str) -> str:
    db = connect(url, pool_size=1)
    print("ready", flush=True)
    sys.stdin.readline()  # all contenders start together
    try:
        plans.acquire_resume_guard(db, plan_id, owner, timedelta(seconds=600))
    except Busy:
        return "busy"
    return "guard"


def reserve(url: str, plan_id: str, phase_id: str, tenant: str, cost_usd: float, month_usd: float) -> str:
    """One call's worst case reserved against ``tenant``'s month (no plan budget: only the
    tenant's spend lock serialises it with another process's)."""
    db = connect(url, pool_size=1)
    got = spend.reserve(db, plan_id=plan_id, phase_id=phase_id, attempt=1, tenant=tenant, tokens=10,
                        cost_usd=cost_usd, limits=spend.Limits(tenant_usd=month_usd))
    return "refused" if isinstance(got, spend.Refusal) else "reserved"


def main(argv: list[str]) -> None:
    mode, url, *args = argv
    if mode == "sweep":
        outcome = sweep(url, hold=args == ["hold"])
    elif mode == "submit":
        outcome = submit(url, args[0], int(args[1]), int(args[2]))
    elif mode == "resume":
        outcome = resume_guard(url, args[0], args[1])
    elif mode == "reserve":
        outcome = reserve(url, args[0], args[1], args[2], float(args[3]), float(args[4]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(outcome, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
