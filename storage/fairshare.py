"""Fair share of the fleet per tenant: a limit of phases in flight, held phases, weighted releases.

A tenant may have at most ``Policy.limit(tenant)`` phases running (on a live lease) at once, and
the fleet at most ``Policy.fleet`` (0: no limit). The limit is kept where a phase starts: a
worker claims a phase of a tenant with a limit under a transaction-scoped advisory lock — the
tenant's, or the fleet's when there is a fleet cap — counting the running phases after the lock
is taken (:func:`claim`), so two claims at the same moment cannot both take the last slot.

A ready phase past the share is not run and not left in the broker: it is *held* — marked
``held_at`` in Postgres, its enqueue mark cleared — and its message is acknowledged. No canvas
sends a held phase (:func:`orchestrator.plan.dag.sendable`, :func:`orchestrator.plan.canvas.region`)
and the reconciler does not count it as lost. It is released (``held_at`` cleared) by
:func:`release`: in the transaction that finishes another phase (into every free slot it sees:
the one it frees, and one a hold racing an earlier finish left empty; a phase released beyond
the share by two finishes at once is held again at its claim), and by the reconciler's sweep
for every free slot (the backstop when a release was lost with its worker). Whoever released it
sends its plan's ``advance``, which sends it like any ready phase; a sweep finds a released
phase that no ``advance`` sent as a lost message.

Which held phase is released: among the tenants with held phases and a free slot, the one with
the lowest *pass* (stride scheduling — a weighted round-robin: each release adds 1/weight to its
tenant's pass, stored in ``tenant_turns``; a tenant that starts waiting joins at the lowest pass
of those waiting); within the tenant, the plan with the highest ``priority`` first, then the
phase held longest, then plan order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, update

from storage import locks
from storage.db import Database
from storage.models import Phase, Plan, TenantTurn, utcnow
from storage.sql.base import PHASES, Claimed, ShareCheck
from storage.status import PhaseStatus, PlanStatus

FLEET = "fairshare:fleet"
RELEASES = "fairshare:releases"
HELD = "held"


@dataclass(frozen=True)
class Policy:
    """The operator's shares: a default limit per tenant (0: none), overrides, weights (default
    1) and the fleet's cap (0: none)."""

    default: int = 0
    limits: Mapping[str, int] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    fleet: int = 0

    def limit(self, tenant: str) -> int:
        return int(self.limits.get(tenant, self.default))

    def weight(self, tenant: str) -> float:
        return float(self.weights.get(tenant, 1.0))

    def lock_name(self, tenant: str) -> str:
        return FLEET if self.fleet else f"fairshare:{tenant}"


def policy_of(settings: Any) -> Policy | None:
    """The operator's policy from the settings (``CONCLAVE_TENANT_MAX_IN_FLIGHT``,
    ``CONCLAVE_TENANT_IN_FLIGHT``, ``CONCLAVE_TENANT_WEIGHTS``, ``CONCLAVE_FLEET_MAX_IN_FLIGHT``);
    None when no limit is set (then nothing here runs: no statement is paid for it)."""
    if not settings.fair_share:
        return None
    return Policy(default=settings.tenant_max_in_flight,
                  limits={t: int(v) for t, v in settings.tenant_in_flight.items()},
                  weights=dict(settings.tenant_weights), fleet=settings.fleet_max_in_flight)


def _running(now: datetime) -> Any:
    """Phases in flight: running on a live lease, or released and not claimed yet (a slot is
    kept for it), in a running plan (a dead worker's phase stops counting once its lease expires)."""
    return (select(Plan.tenant, func.count().label("n")).join(Phase, Phase.plan_id == Plan.id)
            .where(Plan.status == PlanStatus.RUNNING,
                   or_((Phase.status == PhaseStatus.RUNNING) & (Phase.lease_expires_at >= now),
                       (Phase.status == PhaseStatus.PENDING) & Phase.released_at.is_not(None)
                       & Phase.held_at.is_(None))))


def in_flight(s: Any, now: datetime, tenants: list[str] | None = None) -> dict[str, int]:
    """Phases in flight by tenant (of ``tenants``; all with None)."""
    q = _running(now)
    if tenants is not None:
        q = q.where(Plan.tenant.in_(tenants))
    return {row.tenant: int(row.n) for row in s.execute(q.group_by(Plan.tenant))}


def _over(s: Any, tenant: str, policy: Policy, now: datetime) -> bool:
    if policy.fleet:
        counts = in_flight(s, now)
        if sum(counts.values()) >= policy.fleet:
            return True
        n = counts.get(tenant, 0)
    else:
        n = in_flight(s, now, [tenant]).get(tenant, 0)
    limit = policy.limit(tenant)
    return bool(limit) and n >= limit


def _queued(s: Any, phase_id: str, tenant: str, policy: Policy) -> bool:
    """Phases wait held ahead of this one, which was not released (see ``Statements.within_share``)."""
    waits = (select(Phase.id).join(Plan, Plan.id == Phase.plan_id)
             .where(Phase.held_at.is_not(None), Phase.status == PhaseStatus.PENDING, Plan.status == PlanStatus.RUNNING))
    if not policy.fleet:
        waits = waits.where(Plan.tenant == tenant)
    released = select(Phase.released_at.is_not(None)).where(Phase.id == phase_id).scalar_subquery()
    return bool(s.scalar(select(waits.exists() & ~func.coalesce(released, False))))


def claim(db: Database, phase_id: str, *, tenant: str, policy: Policy, owner: str,
          lease: timedelta) -> Claimed | str | None:
    """Claim the phase if its tenant (and the fleet) is within its share, under the share's
    advisory lock (:func:`storage.phases.claim_phase` otherwise): the lock, then the claim with
    the count in its own statement (``Statements.within_share``) — one statement more than a claim
    without fair share, and a COMMIT. Past the share, a pending phase whose inputs are complete is
    held and :data:`HELD` returned; None as a refused claim."""
    now = utcnow()
    with db.transaction() as s:
        if db.dialect == "postgresql":
            s.execute(select(func.pg_advisory_xact_lock(locks.lock_key(policy.lock_name(tenant)))))
        share = ShareCheck(tenant, policy.limit(tenant), policy.fleet)
        claimed = db.sql.claim(s, phase_id, owner=owner, now=now, lease=lease, share=share)
        if claimed is not None or not (_over(s, tenant, policy, now) or _queued(s, phase_id, tenant, policy)):
            return claimed  # refused for another reason (not ready, leased, final) or claimed
        phases = PHASES
        held = s.execute(update(phases).where(phases.c.id == phase_id, phases.c.status == PhaseStatus.PENDING,
                                              db.sql.ready())
                         .values(held_at=now, released_at=None, enqueued_at=None).returning(phases.c.id)).first()
        return HELD if held is not None else None


def release(s: Any, dialect: str, policy: Policy, now: datetime, *, most: int | None = None) -> list[str]:
    """Release held phases into free slots, by weighted round-robin between tenants (see the
    module docstring), at most ``most`` (None: every free slot). Runs in the caller's
    transaction; returns the plan ids of the phases released (their ``advance`` is due).
    One statement when nothing is held; otherwise under the fleet's release lock (the passes
    are read and written by one release at a time)."""
    waiting = {row.tenant: int(row.n) for row in s.execute(
        select(Plan.tenant, func.count().label("n")).join(Phase, Phase.plan_id == Plan.id)
        .where(Phase.held_at.is_not(None), Phase.status == PhaseStatus.PENDING, Plan.status == PlanStatus.RUNNING)
        .group_by(Plan.tenant))}
    if not waiting:
        return []
    if dialect == "postgresql":
        s.execute(select(func.pg_advisory_xact_lock(locks.lock_key(RELEASES))))
    counts = in_flight(s, now, None if policy.fleet else list(waiting))
    free = {t: (policy.limit(t) - counts.get(t, 0)) if policy.limit(t) else len(waiting) * 10**6 for t in waiting}
    budget = policy.fleet - sum(counts.values()) if policy.fleet else 10**9
    if most is not None:
        budget = min(budget, most)
    turns = {row.tenant: row.pass_ for row in s.scalars(
        select(TenantTurn).where(TenantTurn.tenant.in_(list(waiting))).with_for_update())}
    start = min(turns.values(), default=0.0)
    passes = {t: turns.get(t, start) for t in waiting}
    released: list[str] = []
    while budget > 0:
        candidates = [t for t in waiting if waiting[t] > 0 and free[t] > 0]
        if not candidates:
            break
        tenant = min(candidates, key=lambda t: (passes[t], t))
        row = s.execute(select(Phase.id, Phase.plan_id).join(Plan, Plan.id == Phase.plan_id)
                        .where(Plan.tenant == tenant, Plan.status == PlanStatus.RUNNING,
                               Phase.held_at.is_not(None), Phase.status == PhaseStatus.PENDING)
                        .order_by(Plan.priority.desc(), Phase.held_at, Phase.position).limit(1)
                        .with_for_update(of=Phase, skip_locked=True)).first()
        if row is None:
            waiting[tenant] = 0
            continue
        s.execute(update(Phase).where(Phase.id == row.id).values(held_at=None, released_at=now, enqueued_at=None)
                  .execution_options(synchronize_session=False))
        released.append(row.plan_id)
        passes[tenant] += 1.0 / policy.weight(tenant)
        waiting[tenant] -= 1
        free[tenant] -= 1
        budget -= 1
    _store_turns(s, passes, waiting)
    return released


def _store_turns(s: Any, passes: dict[str, float], waiting: dict[str, int]) -> None:
    """Keep the passes of the tenants still waiting; forget the others' (they rejoin level)."""
    done = [t for t, n in waiting.items() if n <= 0]
    if done:
        s.execute(delete(TenantTurn).where(TenantTurn.tenant.in_(done)))
    for tenant, value in passes.items():
        if waiting[tenant] > 0:
            s.merge(TenantTurn(tenant=tenant, pass_=value))
    s.flush()


def release_held(db: Database, policy: Policy) -> list[str]:
    """The sweep's release (the backstop): every free slot, in its own transaction."""
    with db.transaction() as s:
        return release(s, db.dialect, policy, utcnow())


def held_count(db: Database) -> int:
    """Phases held now, fleet-wide (metrics, tests)."""
    with db.transaction() as s:
        return int(s.scalar(select(func.count()).select_from(Phase).where(Phase.held_at.is_not(None),
                                                                           Phase.status == PhaseStatus.PENDING)) or 0)
