"""Mutations of the plan-level invariants: atomic idempotent submission (I1), decisions
derived from stored phases (I6), max_debates (I7), the reconciler (I9), the active-plan
cap (I10) and one resume at a time (I12).

The plan aggregate is ``storage/plans.py`` (admission in ``storage/tenancy.py``); a debate is
inserted by ``storage.phases._insert`` inside the check's completion, after the plan row was
locked by ``storage.sql.base.Statements.lock_plan`` (the same statement on both databases);
what ``advance`` sends is ``orchestrator.plan.dag.sendable``."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

REPO = "tests/integration/repositories"
FENCE = f"{REPO}/test_fence.py"
PLANS = f"{REPO}/test_plans.py"
DEBATES = f"{REPO}/test_debates.py"
ENQUEUE = f"{REPO}/test_enqueue.py"
PG = "[postgresql]"

# the stalled-plan query's three reasons (storage.plans.stalled_plan_ids)
_STALLED = ".where(or_(Plan.id.in_(expired), Plan.id.in_(lost), (Plan.updated_at < cutoff) & ~alive))"


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
        (Edit("            for p in phases:\n                s.add(_phase_row(plan_id, p, now) if fork is None else "
              "_forked_row(plan_id, p, now, fork))\n", ""),
         Edit("    return Created(plan_id, True, stored)\n",
              "    with db.transaction() as s:\n        for p in phases:\n"
              "            s.add(_phase_row(plan_id, p, utcnow()))\n    return Created(plan_id, True, stored)\n")),
        tests=(f"{PLANS}::test_a_plan_whose_phases_cannot_all_be_stored_stores_nothing{PG}",),
        why="the plan row commits before its phases: a failure in between leaves a half-stored plan"),

    # I6 — decisions derived from stored phases
    mutation(
        "ready-ignores-inputs", "I6", "orchestrator/plan/dag.py",
        "        if p.status == PhaseStatus.PENDING and inputs_done(p, by_key):\n",
        "        if p.status == PhaseStatus.PENDING:\n",
        tests=("tests/unit/test_canvas.py::test_a_marked_phase_is_resent_only_once_it_has_been_ready_for_requeue_after",),
        why="advance sends phases whose inputs are not completed as heads of its canvas"),
    mutation(
        "reopen-completed-plan", "I6", "storage/plans.py",
        "        reopenable = plan.status in _REOPENABLE and not plan.cancel_requested\n",
        "        reopenable = not plan.cancel_requested\n",
        tests=(f"{PLANS}::test_retry_failed_never_reopens_a_completed_phase_or_a_completed_plan{PG}",),
        why="a resume with retry_failed reopens a plan that already completed"),
    mutation(
        "reopen-completed-phases", "I6", "storage/plans.py",
        "Phase.status.in_((PhaseStatus.FAILED, PhaseStatus.SKIPPED))",
        "Phase.status.in_((PhaseStatus.FAILED, PhaseStatus.SKIPPED, PhaseStatus.COMPLETED))",
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
        "rows = s.scalars(select(Phase).where(Phase.plan_id == plan_id,",
        "rows = s.scalars(select(Phase).where(Phase.plan_id.is_not(None),",
        tests=(f"{PLANS}::test_retry_failed_counts_each_retry_and_touches_only_its_plan{PG}",),
        why="a retry of one plan's failed phases reopens every plan's"),

    # I7 — max_debates, under the plan's row lock
    mutation(
        "max-debates-not-enforced", "I7", "storage/phases.py",
        "    if groups >= plan.max_debates:\n",
        "    if groups > plan.max_debates:\n",
        tests=(f"{DEBATES}::test_debates_are_inserted_with_the_check_up_to_max_debates{PG}",),
        why="one debate group more than max_debates is inserted"),
    mutation(
        "debate-limit-counts-phases", "I7", "storage/phases.py",
        "select(func.count(func.distinct(Phase.group_key)))",
        "select(func.count())",
        tests=(f"{DEBATES}::test_the_limit_counts_debate_groups_not_phases[postgresql-2]",),
        why="max_debates is compared with debate phases, not debate groups: fewer debates than allowed"),
    mutation(
        "debate-limit-counts-other-plans", "I7", "storage/phases.py",
        ".where(Phase.plan_id == plan_id, Phase.kind == kind)) or 0",
        ".where(Phase.kind == kind)) or 0",
        tests=(f"{DEBATES}::test_the_limit_counts_this_plans_debates_only{PG}",),
        why="another plan's debates count against this plan's max_debates"),
    mutation(
        "plan-row-not-locked", "I7", "storage/sql/base.py",
        '        return (update(PLANS).where(PLANS.c.id == bindparam("plan_id"))\n'
        '                .values(updated_at=bindparam("now", type_=PLANS.c.updated_at.type))\n'
        "                .returning(PLANS.c.cancel_requested, PLANS.c.max_debates, self.any_held()))\n",
        "        return (select(PLANS.c.cancel_requested, PLANS.c.max_debates, self.any_held())\n"
        '                .where(PLANS.c.id == bindparam("plan_id")))\n',
        tests=(f"{DEBATES}::test_a_debate_insertion_waits_for_the_plans_row",
               f"{FENCE}::test_the_writes_that_finish_a_phase_take_its_plans_row_first"),
        why="completions, failures and debate insertions of one plan no longer serialise on its row: the "
            "debate count and max_debates are read without the lock"),

    # I9 — the reconciler finds stalled plans
    mutation(
        "stalled-ignores-expired-leases", "I9", "storage/plans.py",
        _STALLED,
        ".where(or_(Plan.id.in_(lost), (Plan.updated_at < cutoff) & ~alive))",
        tests=(f"{PLANS}::test_the_reconciler_sees_exactly_the_plans_that_stopped_moving{PG}",),
        why="a phase whose worker died is taken over only after requeue_after of plan inactivity"),
    mutation(
        "stalled-ignores-lost-messages", "I9", "storage/plans.py",
        _STALLED,
        ".where(or_(Plan.id.in_(expired), (Plan.updated_at < cutoff) & ~alive))",
        tests=(f"{PLANS}::test_a_phase_enqueued_long_ago_and_never_claimed_makes_its_plan_stalled{PG}",
               f"{PLANS}::test_a_phase_is_lost_only_once_it_has_been_ready_for_requeue_after_unclaimed{PG}"),
        why="a message lost while the plan moves on elsewhere (or while another phase runs) is never sent again"),
    mutation(
        "takeover-never-sent", "I9", "storage/phases.py",
        "    q = update(Phase).where(Phase.id.in_(list(phase_ids)),\n"
        "                            Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.RUNNING)), plan_first())\n",
        "    q = update(Phase).where(Phase.id.in_(list(phase_ids)), Phase.status == PhaseStatus.PENDING,\n"
        "                            plan_first())\n",
        tests=(f"{ENQUEUE}::test_marks_go_to_phases_that_can_still_run_and_bump_their_plan{PG}",),
        why="a running phase whose worker died is never marked, so never sent to another worker"),

    # I10 — the active-plan cap
    mutation(
        "capacity-lock-dropped", "I10", "storage/tenancy.py",
        "        s.execute(select(func.pg_advisory_xact_lock(lock_key(tenant))))\n",
        "        pass\n",
        tests=(f"{PLANS}::test_the_cap_holds_when_submissions_race",),
        why="racing submissions each count before any inserts and all get in past the cap"),
    mutation(
        "capacity-off-by-one", "I10", "storage/tenancy.py",
        "    if active >= max_active:\n",
        "    if active > max_active:\n",
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
