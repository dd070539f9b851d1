"""Mutations of the claim, the attempt fence and the finishing writes: one attempt at a
time (I2), the fence (I3), usage rows (I4), the completing transaction (I5), a retried
completion (I11) and cancellation at every safe point (I13)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

REPO = "tests/integration/repositories"
FENCE = f"{REPO}/test_fence.py"
PLANS = f"{REPO}/test_plans.py"
CANCEL = f"{REPO}/test_cancel.py"
GUARD = "tests/integration/llm/test_guard.py"
PG = "[postgresql]"


MUTATIONS: tuple[Mutation, ...] = (
    # I2 — one attempt at a time
    mutation(
        "claim-live-lease", "I2", "storage/phases.py",
        '(Phase.status == "running") & (Phase.lease_expires_at < now)',
        '(Phase.status == "running")',
        tests=(f"{FENCE}::test_a_live_lease_is_never_taken_over{PG}",),
        why="a phase leased by a live worker is claimed again"),
    mutation(
        "claim-keeps-the-attempt", "I2", "storage/phases.py",
        "attempt=Phase.attempt + 1,",
        "attempt=Phase.attempt,",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",),
        why="a takeover does not get a new attempt number, so the old attempt is not fenced"),
    mutation(
        "heartbeat-of-any-attempt", "I2", "storage/phases.py",
        "res = s.execute(update(Phase).where(Phase.id == phase_id, Phase.attempt == attempt,\n"
        '                                                Phase.status == "running")\n'
        "                            .values(lease_expires_at=now + lease))",
        "res = s.execute(update(Phase).where(Phase.id == phase_id,\n"
        '                                                Phase.status == "running")\n'
        "                            .values(lease_expires_at=now + lease))",
        tests=(f"{FENCE}::test_a_stale_attempt_loses_its_heartbeat{PG}",),
        why="a stale attempt's heartbeat keeps renewing the lease of the attempt that took over"),
    mutation(
        "heartbeat-not-scoped-to-its-phase", "I2", "storage/phases.py",
        "res = s.execute(update(Phase).where(Phase.id == phase_id, Phase.attempt == attempt,\n"
        '                                                Phase.status == "running")\n'
        "                            .values(lease_expires_at=now + lease))",
        "res = s.execute(update(Phase).where(Phase.attempt == attempt,\n"
        '                                                Phase.status == "running")\n'
        "                            .values(lease_expires_at=now + lease))",
        tests=(f"{FENCE}::test_a_heartbeat_renews_only_the_phase_and_attempt_it_names{PG}",),
        why="one worker's heartbeat keeps alive the lease of every phase at the same attempt number"),

    # I3 — the attempt fence
    Mutation(
        "fence-dropped", "I3", "storage/phases.py",
        (Edit('            if row.attempt != attempt or row.status != "running":\n'
              '                return Finished("fenced")\n            if plan.cancel_requested:',
              '            if row.status != "running":\n'
              '                return Finished("fenced")\n            if plan.cancel_requested:'),
         Edit("res = s.execute(update(Phase).where(Phase.id == phase_id, Phase.attempt == attempt,\n"
              '                                                Phase.status == "running")\n'
              '                            .values(status="completed"',
              "res = s.execute(update(Phase).where(Phase.id == phase_id,\n"
              '                                                Phase.status == "running")\n'
              '                            .values(status="completed"')),
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",
               "tests/integration/test_durability_fence.py::"
               "test_a_stalled_worker_comes_back_and_its_result_is_discarded"),
        why="a stale attempt completes a phase another attempt has taken over and overwrites its result"),
    mutation(
        "fail-fence-dropped", "I3", "storage/phases.py",
        '        if row.attempt != attempt or row.status != "running":\n'
        '            return Finished("fenced")\n        status = ',
        '        if row.status != "running":\n'
        '            return Finished("fenced")\n        status = ',
        tests=(f"{FENCE}::test_a_stale_attempt_cannot_fail_the_phase_another_attempt_runs{PG}",),
        why="a stale attempt's error fails a phase another attempt is running"),
    mutation(
        "completion-not-scoped-to-its-phase", "I3", "storage/phases.py",
        "res = s.execute(update(Phase).where(Phase.id == phase_id, Phase.attempt == attempt,\n"
        '                                                Phase.status == "running")\n'
        '                            .values(status="completed"',
        "res = s.execute(update(Phase).where(Phase.attempt == attempt,\n"
        '                                                Phase.status == "running")\n'
        '                            .values(status="completed"',
        tests=(f"{FENCE}::test_completing_writes_the_result_and_only_this_phases{PG}",),
        why="completing one phase completes every running phase at the same attempt number"),

    # I4 — usage rows, summed in one place
    mutation(
        "count-every-attempt", "I4", "storage/phases.py",
        "update(UsageRow).where(UsageRow.phase_id == phase_id, UsageRow.attempt == attempt)",
        "update(UsageRow).where(UsageRow.phase_id == phase_id)",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",
               "tests/integration/test_durability_fence.py::test_a_worker_killed_after_its_usage_was_recorded"),
        why="completing a phase counts the usage of every attempt, the dead and fenced ones too"),
    mutation(
        "usage-not-scoped-to-its-phase", "I4", "storage/phases.py",
        "update(UsageRow).where(UsageRow.phase_id == phase_id, UsageRow.attempt == attempt)",
        "update(UsageRow).where(UsageRow.attempt == attempt)",
        tests=(f"{FENCE}::test_completing_writes_the_result_and_only_this_phases{PG}",),
        why="completing one phase counts the usage of other phases' running attempts as cost"),
    mutation(
        "view-sums-waste-as-cost", "I4", "orchestrator/views.py",
        "cost = [r for r in rows if r.counted]",
        "cost = list(rows)",
        tests=("tests/integration/test_durability_fence.py::test_a_worker_killed_after_its_usage_was_recorded",),
        why="the plan view adds the usage of attempts that died to the plan's cost"),

    # I5 — the completing transaction
    mutation(
        "lease-kept-after-completion", "I5", "storage/phases.py",
        "finished_at=now, lease_owner=None, lease_expires_at=None,\n",
        "finished_at=now,\n",
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",),
        why="a completed phase keeps its lease: the transient guard outlives the result it guarded"),
    mutation(
        "no-outbox-event", "I5", "storage/phases.py",
        '            s.add(Event(plan_id=plan_id, phase_key=row.key, type="phase_completed",',
        '            (Event(plan_id=plan_id, phase_key=row.key, type="phase_completed",',
        tests=(f"{FENCE}::test_a_stale_attempt_is_fenced_while_the_new_attempt_runs{PG}",),
        why="the completing transaction writes no phase_completed event: watchers never hear of it"),

    # I11 — a completion retried after its commit
    mutation(
        "retried-completion-fenced", "I11", "storage/phases.py",
        '            if row.attempt == attempt and row.status in ("completed", "cancelled"):\n',
        "            if False:\n",
        tests=(f"{FENCE}::test_a_completion_retried_after_its_commit_returns_the_stored_outcome{PG}",),
        why="a completion whose COMMIT reply was lost is reported as fenced on retry"),

    # I13 — cancellation at every safe point
    mutation(
        "no-cancel-check-at-completion", "I13", "storage/phases.py",
        "            if plan.cancel_requested:\n                row.status, row.finished_at",
        "            if False:\n                row.status, row.finished_at",
        tests=(f"{CANCEL}::test_a_result_that_arrives_after_the_cancel_ends_cancelled{PG}",),
        why="a result that arrives after the cancel completes the phase"),
    mutation(
        "no-cancel-check-at-heartbeat", "I13", "storage/phases.py",
        "            for pid in cancelled:\n                out[pid] = False\n",
        "            for pid in cancelled:\n                pass\n",
        tests=(f"{CANCEL}::test_a_heartbeat_after_the_cancel_stops_the_call{PG}",),
        why="a running model call is not stopped by the cancel"),
    mutation(
        "claim-in-a-cancelled-plan", "I13", "storage/phases.py",
        ".where(Phase.id == phase_id, Phase.plan_id.not_in(cancelled))",
        ".where(Phase.id == phase_id)",
        tests=(f"{CANCEL}::test_a_phase_of_a_cancelled_plan_is_not_taken_over{PG}",),
        why="a phase of a cancelled plan is taken over and its model called again"),
    mutation(
        "cancel-reaches-other-plans", "I13", "storage/plans.py",
        's.execute(update(Phase).where(Phase.plan_id == plan_id, Phase.status == "pending")',
        's.execute(update(Phase).where(Phase.status == "pending")',
        tests=(f"{CANCEL}::test_cancel_cancels_the_queued_phases_of_that_plan_and_flags_it{PG}",),
        why="cancelling one plan cancels the queued phases of every plan"),
)
