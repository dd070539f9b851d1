"""Mutations of the plan-level invariants: atomic idempotent submission (I1), decisions
derived from stored phases (I6), max_debates (I7), the reconciler (I9), the active-plan
cap (I10) and one resume at a time (I12)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

REPO = "tests/integration/repositories"
FENCE = f"{REPO}/test_fence.py"
PLANS = f"{REPO}/test_plans.py"
CANCEL = f"{REPO}/test_cancel.py"
GUARD = "tests/integration/llm/test_guard.py"
PG = "[postgresql]"


MUTATIONS: tuple[Mutation, ...] = (
    # I1 — atomic, idempotent submission
    mutation(
        "task-id-conflict-ignored", "I1", "storage/plans.py",
        "    if existing.spec != spec:\n",
        "    if False:\n",
        tests=(f"{PLANS}::test_resubmitting_a_task_id_returns_the_plan_and_a_different_plan_conflicts{PG}",),
        why="a different plan under a stored task_id is answered with the old plan instead of a 409"),
    Mutation(
        "phases-stored-after-the-plan", "I1", "storage/plans.py",
        (Edit("            for p in phases:\n                s.add(_phase_row(plan_id, p, now))\n", ""),
         Edit("    return plan_id, True\n",
              "    with db.transaction() as s:\n        for p in phases:\n"
              "            s.add(_phase_row(plan_id, p, utcnow()))\n    return plan_id, True\n")),
        tests=("tests/integration/test_durability_submit.py::test_a_failure_storing_one_phase_stores_nothing",),
        why="the plan row commits before its phases: a failure in between leaves a half-stored plan"),

    # I6 — decisions derived from stored phases
    mutation(
        "ready-ignores-inputs", "I6", "orchestrator/dag.py",
        'return [p for p in phases if p.status == "pending" and inputs_done(p, by_key)]',
        'return [p for p in phases if p.status == "pending"]',
        tests=("tests/unit/test_canvas.py::test_board_start_is_a_chain_of_the_opening_then_advance",),
        why="a phase is sent before its inputs are completed"),
    mutation(
        "reopen-completed-plan", "I6", "storage/plans.py",
        'reopenable = plan.status in ("running", "failed", "budget_exhausted") and not plan.cancel_requested',
        "reopenable = not plan.cancel_requested",
        tests=(f"{PLANS}::test_retry_failed_never_reopens_a_completed_phase_or_a_completed_plan{PG}",),
        why="a resume with retry_failed reopens a plan that already completed"),
    mutation(
        "reopen-completed-phases", "I6", "storage/plans.py",
        'Phase.status.in_(("failed", "skipped"))',
        'Phase.status.in_(("failed", "skipped", "completed"))',
        tests=(f"{PLANS}::test_retry_failed_never_reopens_a_completed_phase_or_a_completed_plan{PG}",),
        why="a resume with retry_failed runs completed phases again (paid twice)"),
    mutation(
        "resume-reruns-failed", "I6", "storage/plans.py",
        "        if retry_failed and reopenable:\n",
        "        if reopenable:\n",
        tests=(f"{PLANS}::test_resume_without_retry_failed_leaves_failed_phases_failed{PG}",),
        why="a plain resume reruns failed phases"),
    mutation(
        "retry-reaches-other-plans", "I6", "storage/plans.py",
        "            rows = s.scalars(select(Phase).where(Phase.plan_id == plan_id,\n"
        '                                                 Phase.status.in_(("failed", "skipped")))).all()',
        '            rows = s.scalars(select(Phase).where(Phase.status.in_(("failed", "skipped")))).all()',
        tests=(f"{PLANS}::test_retry_failed_counts_each_retry_and_touches_only_its_plan{PG}",),
        why="a retry of one plan's failed phases reopens every plan's"),

    # I7 — max_debates
    mutation(
        "max-debates-not-enforced", "I7", "storage/phases.py",
        "        if groups >= max_groups:\n",
        "        if groups > max_groups:\n",
        tests=(f"{REPO}/test_debates.py::test_debates_are_inserted_with_the_check_up_to_max_debates{PG}",),
        why="one debate group more than max_debates is inserted"),
    mutation(
        "debate-limit-counts-phases", "I7", "storage/phases.py",
        "select(func.count(func.distinct(Phase.group_key)))",
        "select(func.count())",
        tests=(f"{REPO}/test_debates.py::test_the_limit_counts_debate_groups_not_phases[postgresql-2]",),
        why="max_debates is compared with debate phases, not debate groups: fewer debates than allowed"),
    mutation(
        "debate-limit-counts-other-plans", "I7", "storage/phases.py",
        ".where(Phase.plan_id == plan_id, Phase.kind == kind)) or 0",
        ".where(Phase.kind == kind)) or 0",
        tests=(f"{REPO}/test_debates.py::test_the_limit_counts_this_plans_debates_only{PG}",),
        why="another plan's debates count against this plan's max_debates"),
    mutation(
        "plan-row-not-locked", "I7", "storage/phases.py",
        "    plan = s.get(Plan, plan_id, with_for_update=True)\n    row = s.get(Phase, phase_id, with_for_update=True)",
        "    plan = s.get(Plan, plan_id)\n    row = s.get(Phase, phase_id, with_for_update=True)",
        tests=(f"{FENCE}::test_the_writes_that_finish_a_phase_take_its_plans_row_first",),
        why="completions, failures and debate insertions of one plan no longer serialise on its row"),

    # I9 — the reconciler finds stalled plans
    mutation(
        "stalled-ignores-expired-leases", "I9", "storage/plans.py",
        ".where(or_(Plan.id.in_(expired), Plan.id.in_(lost), Plan.updated_at < cutoff))",
        ".where(or_(Plan.id.in_(lost), Plan.updated_at < cutoff))",
        tests=(f"{PLANS}::test_the_reconciler_sees_exactly_the_plans_that_stopped_moving{PG}",),
        why="a phase whose worker died is taken over only after requeue_after of plan inactivity"),
    mutation(
        "stalled-ignores-lost-messages", "I9", "storage/plans.py",
        ".where(or_(Plan.id.in_(expired), Plan.id.in_(lost), Plan.updated_at < cutoff))",
        ".where(or_(Plan.id.in_(expired), Plan.updated_at < cutoff))",
        tests=(f"{PLANS}::test_a_phase_enqueued_long_ago_and_never_claimed_makes_its_plan_stalled{PG}",),
        why="a message lost while the plan moves on elsewhere is never sent again"),
    mutation(
        "takeover-never-sent", "I9", "storage/phases.py",
        'q = update(Phase).where(Phase.id == pid, Phase.status.in_(("pending", "running")))',
        'q = update(Phase).where(Phase.id == pid, Phase.status == "pending")',
        tests=(f"{REPO}/test_enqueue.py::test_marks_go_to_phases_that_can_still_run_and_bump_their_plan{PG}",),
        why="a running phase whose worker died is never sent to another worker"),

    # I10 — the active-plan cap
    mutation(
        "capacity-lock-dropped", "I10", "storage/plans.py",
        "                s.execute(select(func.pg_advisory_xact_lock(_CAPACITY_LOCK)))\n",
        "                pass\n",
        tests=(f"{PLANS}::test_the_cap_holds_when_submissions_race",),
        why="racing submissions each count before any inserts and all get in past the cap"),
    mutation(
        "capacity-off-by-one", "I10", "storage/plans.py",
        "            if active >= max_active:\n",
        "            if active > max_active:\n",
        tests=(f"{PLANS}::test_the_active_plan_cap_refuses_the_plan_past_it{PG}",),
        why="one plan more than CONCLAVE_MAX_ACTIVE_PLANS is accepted"),

    # I12 — one resume at a time
    mutation(
        "resume-guard-always-granted", "I12", "storage/plans.py",
        ".where(Plan.id == plan_id, or_(Plan.resume_until.is_(None), Plan.resume_until < now))",
        ".where(Plan.id == plan_id)",
        tests=(f"{PLANS}::test_one_resume_guard_at_a_time_until_it_lapses{PG}",),
        why="every concurrent resume proceeds"),
)
