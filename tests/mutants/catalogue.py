"""Named mutations, each breaking one invariant of DESIGN.md's table, and the tests
that must catch it (``make mutants`` applies each in a scratch copy and runs them).

Every invariant id in DESIGN.md needs at least one mutation here; add one with each
invariant you add. Pick the fastest tests that catch the mutant (repository tests
first, worker-process tests only where the behaviour needs processes).

When code moves and the runner reports a stale anchor, copy the guarded line's new
text into ``old`` and its broken version into ``new``; keep ``name`` stable.
"""

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

    # I8 — canvases end in advance
    mutation(
        "chain-without-advance", "I8", "orchestrator/canvas.py",
        "        return chain(lanes[0], advance)\n",
        "        return lanes[0]\n",
        tests=("tests/unit/test_canvas.py::test_signatures_end_in_advance_and_use_registered_names",),
        why="a single-lane canvas does not end in advance(plan): the plan stops after it"),

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

    # I11 — a completion retried after its commit
    mutation(
        "retried-completion-fenced", "I11", "storage/phases.py",
        '            if row.attempt == attempt and row.status in ("completed", "cancelled"):\n',
        "            if False:\n",
        tests=(f"{FENCE}::test_a_completion_retried_after_its_commit_returns_the_stored_outcome{PG}",),
        why="a completion whose COMMIT reply was lost is reported as fenced on retry"),

    # I12 — one resume at a time
    mutation(
        "resume-guard-always-granted", "I12", "storage/plans.py",
        ".where(Plan.id == plan_id, or_(Plan.resume_until.is_(None), Plan.resume_until < now))",
        ".where(Plan.id == plan_id)",
        tests=(f"{PLANS}::test_one_resume_guard_at_a_time_until_it_lapses{PG}",),
        why="every concurrent resume proceeds"),

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

    # I14 — the full text through the content store
    mutation(
        "inputs-read-from-summaries", "I14", "orchestrator/coordinator.py",
        'texts = contents.read_texts(self.db, [p.id for p in work.inputs if p.status == "completed"])',
        'texts = {p.id: p.summary or "" for p in work.inputs if p.status == "completed"}',
        tests=("tests/integration/test_pipeline.py::test_team_plan_with_a_200kb_result_is_offloaded_and_read_in_full",),
        why="a later phase is prompted with its inputs' short summaries, not their full text"),

    # I15 — the stream guard
    mutation(
        "replay-after-partial-stream", "I15", "tasks/llm/guard.py",
        "    if outcome.text:\n",
        '    if outcome.text and outcome.reason == "end":\n',
        tests=(f"{GUARD}::test_break_after_partial_text_is_truncated_without_double_broadcast",),
        why="a stream that broke after partial text falls back and broadcasts the full text again"),
    mutation(
        "truncated-dropped", "I15", "tasks/llm/guard.py",
        "truncated=True, finish_reason=outcome.reason)",
        "truncated=False, finish_reason=outcome.reason)",
        tests=(f"{GUARD}::test_break_after_partial_text_is_truncated_without_double_broadcast",),
        why="partial text is returned as if it were whole"),
    mutation(
        "truncated-not-stored", "I15", "storage/phases.py",
        'summary=summary, truncated=truncated,',
        'summary=summary, truncated=False,',
        tests=(f"{FENCE}::test_completing_writes_the_result_and_only_this_phases{PG}",),
        why="the stored phase does not say its text is partial"),
    mutation(
        "first-chunk-timeout-ignored", "I15", "tasks/llm/guard.py",
        '(started + spec.first_chunk_timeout, "first_chunk_timeout")',
        '(started + spec.deadline, "first_chunk_timeout")',
        tests=(f"{GUARD}::test_no_first_chunk_falls_back_and_replays",),
        why="a stream that never sends its first chunk holds the call until the deadline"),
    mutation(
        "idle-timeout-ignored", "I15", "tasks/llm/guard.py",
        '(last_event + spec.idle_timeout, "idle_timeout")',
        '(last_event + spec.deadline, "idle_timeout")',
        tests=(f"{GUARD}::test_idle_timeout_after_partial_text_is_truncated",),
        why="a stream that stalls after partial text holds the call until the deadline"),
    mutation(
        "deadline-ignored", "I15", "tasks/llm/guard.py",
        "    deadline_at = started + spec.deadline\n",
        "    deadline_at = started + 86400.0\n",
        tests=(f"{GUARD}::test_deadline_bounds_stream_and_fallback",),
        why="a call whose fallback hangs is never given up"),
    mutation(
        "stream-not-cancellable", "I15", "tasks/llm/guard.py",
        "            if should_stop():\n"
        '                raise CallCancelled(f"model {spec.name!r}: cancelled", usage=_known(usage, request, parts))',
        "            if False:\n"
        '                raise CallCancelled(f"model {spec.name!r}: cancelled", usage=_known(usage, request, parts))',
        tests=(f"{GUARD}::test_should_stop_cancels_a_running_stream_promptly",
               f"{GUARD}::test_should_stop_cancels_while_waiting_for_the_first_chunk"),
        why="a cancelled or taken-over call keeps streaming to the end"),
)
