"""Mutations of the claim, the attempt fence and the finishing writes: one attempt at a
time (I2), the fence (I3), usage rows (I4), the completing transaction (I5), a retried
completion (I11) and cancellation at every safe point (I13).

The hot path's SQL is :mod:`storage.sql`: the statements shared by both databases are in
``storage/sql/base.py`` (SQLite runs them as they are); Postgres folds the claim and the
completion into single statements in ``storage/sql/postgres.py`` built from the same pieces
(the claim UPDATE, the fenced ``finish_update``). A mutation whose tests are ``[postgresql]``
breaks a piece the Postgres path runs."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

REPO = "tests/integration/repositories"
FENCE = f"{REPO}/test_fence.py"
CANCEL = f"{REPO}/test_cancel.py"
PG = "[postgresql]"
LITE = "[sqlite]"

BASE = "storage/sql/base.py"
POSTGRES = "storage/sql/postgres.py"

# the lease renewal's WHERE and its parameters (storage.sql.base.Statements._renew / .renew)
_RENEW_HELD = '.where(tuple_(PHASES.c.id, PHASES.c.attempt).in_(bindparam("held", expanding=True)),'
_RENEW_PARAMS = '{"held": [tuple(h) for h in held]'
# the fenced UPDATE that ends a running attempt (complete, fail, cancel; both databases)
_FENCED = ".where(PHASES.c.plan_id == plan_id, PHASES.c.id == phase_id, PHASES.c.attempt == attempt,"


MUTATIONS: tuple[Mutation, ...] = (
    # I2 — one attempt at a time
    mutation(
        "claim-live-lease", "I2", BASE,
        "and_(PHASES.c.status == PhaseStatus.RUNNING, PHASES.c.lease_expires_at < now))",
        "and_(PHASES.c.status == PhaseStatus.RUNNING))",
        tests=(f"{FENCE}::test_a_live_lease_is_never_taken_over{PG}",),
        why="a phase leased by a live worker is claimed again"),
    mutation(
        "claim-keeps-the-attempt", "I2", BASE,
        "attempt=PHASES.c.attempt + 1,",
        "attempt=PHASES.c.attempt,",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",),
        why="a takeover does not get a new attempt number, so the old attempt is not fenced"),
    Mutation(
        "heartbeat-of-any-attempt", "I2", BASE,
        (Edit(_RENEW_HELD, '.where(PHASES.c.id.in_(bindparam("held", expanding=True)),'),
         Edit(_RENEW_PARAMS, '{"held": [h[0] for h in held]')),
        tests=(f"{FENCE}::test_a_stale_attempt_loses_its_heartbeat{PG}",),
        why="a stale attempt's heartbeat keeps renewing the lease of the attempt that took over"),
    Mutation(
        "heartbeat-not-scoped-to-its-phase", "I2", BASE,
        (Edit(_RENEW_HELD, '.where(PHASES.c.attempt.in_(bindparam("held", expanding=True)),'),
         Edit(_RENEW_PARAMS, '{"held": [h[1] for h in held]')),
        tests=(f"{FENCE}::test_a_heartbeat_renews_only_the_phase_and_attempt_it_names{PG}",),
        why="one worker's heartbeat keeps alive the lease of every phase at the same attempt number"),

    # I3 — the attempt fence
    mutation(
        "fence-dropped", "I3", BASE,
        _FENCED,
        ".where(PHASES.c.plan_id == plan_id, PHASES.c.id == phase_id,",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",
               f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{LITE}",
               "tests/integration/test_durability_fence.py::"
               "test_a_stalled_worker_comes_back_and_its_result_is_discarded"),
        why="a stale attempt completes a phase another attempt has taken over and overwrites its result"),
    mutation(
        "fail-fence-dropped", "I3", "storage/phases.py",
        "finish_update(plan_id, phase_id, attempt, status=status,",
        "finish_update(plan_id, phase_id, Phase.attempt, status=status,",
        tests=(f"{FENCE}::test_a_stale_attempt_cannot_fail_the_phase_another_attempt_runs{PG}",),
        why="a stale attempt's error fails a phase another attempt is running"),
    mutation(
        # SQLite's completion (this UPDATE, then the content). On Postgres the folded statement
        # inserts one content row per row the UPDATE matched, all with one id: the primary
        # key refuses an unscoped completion there.
        "completion-not-scoped-to-its-phase", "I3", BASE,
        'self.finish_update(bindparam("r_plan"), bindparam("r_phase"), bindparam("r_attempt"),',
        'self.finish_update(bindparam("r_plan"), PHASES.c.id, bindparam("r_attempt"),',
        tests=(f"{FENCE}::test_completing_writes_the_result_and_only_this_phases{LITE}",),
        why="completing one phase completes every running phase of the plan at the same attempt number"),
    mutation(
        "finish-not-scoped-to-its-plan", "I3", BASE,
        ".where(PHASES.c.plan_id == plan_id, PHASES.c.id == phase_id, PHASES.c.attempt == attempt,",
        ".where(PHASES.c.id == phase_id, PHASES.c.attempt == attempt,",
        tests=(f"{FENCE}::test_a_write_naming_another_plans_phase_is_fenced{PG}",
               f"{FENCE}::test_a_write_naming_another_plans_phase_is_fenced{LITE}"),
        why="a completion holding one plan's lock finishes a phase of another plan, outside that plan's lock"),

    # I4 — usage rows; whether one is cost is derived, and summed in one place
    mutation(
        "count-every-attempt", "I4", "storage/usage.py",
        "return and_(Phase.status == PhaseStatus.COMPLETED, Phase.attempt == UsageRow.attempt)",
        "return and_(Phase.status == PhaseStatus.COMPLETED)",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",
               "tests/integration/test_durability_fence.py::test_a_worker_killed_after_its_usage_was_recorded"),
        why="once a phase completed, the usage of every attempt is its cost, the dead and fenced ones too"),
    mutation(
        "usage-not-scoped-to-its-phase", "I4", "storage/usage.py",
        ".join(Phase, Phase.id == UsageRow.phase_id)",
        ".join(Phase, Phase.attempt == UsageRow.attempt)",
        tests=(f"{FENCE}::test_completing_writes_the_result_and_only_this_phases{PG}",),
        why="a usage row is reckoned against every phase at its attempt number: completing one phase "
            "makes other phases' running attempts cost"),
    mutation(
        "view-sums-waste-as-cost", "I4", "orchestrator/plan/views.py",
        "cost = [r for r in rows if r.counted]",
        "cost = list(rows)",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",),
        why="the plan view adds the usage of attempts that died or were fenced out to the plan's cost"),

    # I5 — the completing transaction
    mutation(
        "lease-kept-after-completion", "I5", BASE,
        ".values(lease_owner=None, lease_expires_at=None, **values))",
        ".values(**values))",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",),
        why="a completed phase keeps its lease: the transient guard outlives the result it guarded"),
    mutation(
        # the event INSERT of the folded completion (the claim's fold selects from claimed.c.plan_id)
        "no-outbox-event", "I5", POSTGRES,
        "select(plan_id, json_value(event.phase_key), literal(event.type, String),",
        'select(plan_id, json_value(event.phase_key), literal("phase_progress", String),',
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",),
        why="the completing statement stores no phase_completed event: watchers replaying the stored "
            "events never hear of it"),

    # I11 — a completion retried after its commit
    mutation(
        "retried-completion-fenced", "I11", "storage/phases.py",
        "if row is not None and row.attempt == attempt and row.status in (PhaseStatus.COMPLETED,",
        "if False and row is not None and row.attempt == attempt and row.status in (PhaseStatus.COMPLETED,",
        tests=(f"{FENCE}::test_a_completion_retried_after_its_commit_returns_the_stored_outcome{PG}",),
        why="a completion whose COMMIT reply was lost is reported as fenced on retry"),

    # I13 — cancellation at every safe point
    mutation(
        "no-cancel-check-at-completion", "I13", "storage/phases.py",
        "            if plan.cancel_requested:\n                return _released(db, s, share, plan, now, _cancel(",
        "            if False:\n                return _released(db, s, share, plan, now, _cancel(",
        tests=(f"{CANCEL}::test_a_result_that_arrives_after_the_cancel_ends_cancelled{PG}",),
        why="a result that arrives after the cancel completes the phase"),
    mutation(
        "no-cancel-check-at-heartbeat", "I13", BASE,
        "renewed = {pid: not bool(c) for pid, c in rows}",
        "renewed = {pid: True for pid, c in rows}",
        tests=(f"{CANCEL}::test_a_heartbeat_after_the_cancel_stops_the_call{PG}",),
        why="a running model call is not stopped by the cancel"),
    mutation(
        "claim-in-a-cancelled-plan", "I13", BASE,
        "live_plan = plan_first(PLANS.c.status == PlanStatus.RUNNING, PLANS.c.cancel_requested.is_(False))",
        "live_plan = plan_first(PLANS.c.status == PlanStatus.RUNNING)",
        tests=(f"{CANCEL}::test_a_phase_of_a_cancelled_plan_is_not_taken_over{PG}",),
        why="a phase of a cancelled plan is taken over and its model called again"),
    mutation(
        "cancel-reaches-other-plans", "I13", "storage/plans.py",
        "s.execute(update(Phase).where(Phase.plan_id == plan_id, waiting)",
        "s.execute(update(Phase).where(waiting)",
        tests=(f"{CANCEL}::test_cancel_cancels_the_queued_phases_of_that_plan_and_flags_it{PG}",),
        why="cancelling one plan cancels the queued phases of every plan"),
)
