"""Mutations of the money invariants: a call's worst case is reserved before it is made and
settled once by its usage row, a dead attempt's reservation is released (I57); a tenant whose
month is spent cannot submit, and only that tenant (I58)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

RACE = "tests/integration/test_budgets.py::test_twenty_racing_phases_never_spend_past_the_budget"
TOKEN_RACE = "tests/integration/test_budgets.py::test_twenty_racing_phases_never_spend_past_a_token_budget"
KILLED = "tests/integration/test_budgets.py::test_a_worker_killed_holding_a_reservation_does_not_leak_it"
WAITS = "tests/integration/test_budgets.py::test_a_reservation_waits_for_one_in_flight_and_then_counts_it"
UNIT = "tests/unit/test_budgets.py"
HELD = f"{UNIT}::test_a_reservation_counts_until_settled_and_a_dead_attempts_is_released"
RAN_OUT = f"{UNIT}::test_a_plan_that_runs_out_stops_at_its_budget_and_says_what_it_spent"
STALE = f"{UNIT}::test_the_reconciler_releases_what_no_running_attempt_holds"
TENANT = f"{UNIT}::test_a_tenant_whose_month_is_spent_cannot_submit_and_others_can"

MUTATIONS: tuple[Mutation, ...] = (
    # I57 — reserve before you spend
    mutation(
        "check-then-call", "I57", "storage/spend.py",
        "        s.add(held)\n        s.flush()\n        return int(held.id)\n",
        "        return 0  # checked against what is on record, never reserved\n",
        tests=(RACE, TOKEN_RACE, HELD),
        why="the budget is checked but nothing is reserved: concurrent phases all see the same spend and "
            "all call, past the budget"),
    mutation(
        "reservations-not-counted", "I57", "storage/spend.py",
        "            select(func.coalesce(func.sum(Reservation.cost_usd), 0.0)).where(ours).scalar_subquery(),\n",
        "            literal(0.0),\n",
        tests=(HELD,),
        why="calls in flight are not counted against the plan's budget in dollars"),
    mutation(
        "counted-twice", "I57", "storage/usage.py",
        "        return db.sql.settle_usage(conn, values, reservation)\n",
        "        return db.sql.insert_usage(conn, values)\n",
        tests=(RAN_OUT,),
        why="a call's usage row is written but its reservation stays open: what it spent is counted twice, "
            "and the plan stops short of its budget"),
    mutation(
        "dead-attempt-keeps-its-reservation", "I57", "storage/spend.py",
        "        s.execute(delete(Reservation).where(Reservation.phase_id == phase_id, Reservation.attempt < attempt)\n"
        "                  .execution_options(synchronize_session=False))\n",
        "        pass\n",
        tests=(HELD,),
        why="a phase claimed again after its worker died still counts the dead attempt's worst case"),
    mutation(
        "tenant-spend-lock-dropped", "I57", "storage/spend.py",
        "            s.execute(select(func.pg_advisory_xact_lock(tenant_lock_key(tenant))))\n",
        "            pass\n",
        tests=(f"{WAITS}[tenant]",),
        why="reservations of different plans of a tenant do not serialise: racing plans each see the same "
            "month and together spend past it"),
    mutation(
        "plan-lock-not-taken-to-reserve", "I57", "storage/spend.py",
        "            s.execute(select(Plan.id).where(Plan.id == plan_id)"
        ".with_for_update(key_share=PLAN_LOCK[\"key_share\"]))\n",
        "            pass\n",
        tests=(f"{WAITS}[plan]",),
        why="two reservations of one plan read the same sums and both insert: racing phases cross the plan's "
            "budget"),
    mutation(
        "reconciler-releases-nothing", "I57", "orchestrator/control/coordinator.py",
        "        released = spend.release_stale(self.db)\n",
        "        released = 0\n",
        tests=(STALE,),
        why="a reservation left by a dead attempt of a phase that ended is never released"),

    # I58 — a tenant's monthly budget at submit
    mutation(
        "tenant-budget-not-checked-at-submit", "I58", "storage/tenancy.py",
        "        if spent >= monthly_usd:\n",
        "        if False:\n",
        tests=(TENANT,),
        why="a tenant whose month is spent still submits plans"),
    mutation(
        "tenant-budget-counts-every-tenant", "I58", "storage/tenancy.py",
        "            .where(Plan.tenant == tenant, live, UsageRow.created_at >= since)\n",
        "            .where(live, UsageRow.created_at >= since)\n",
        tests=(TENANT,),
        why="one tenant's spending uses up every other tenant's monthly budget"),
)
