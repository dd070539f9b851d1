"""Mutations the first catalogue's tests did not notice (issue 18): locks keyed per
process (I10, I48, and the tenant's spend lock of I57), a session MAC never compared for the API token (I49), a listed
literal that waives every address class (I18), the idle clock swapped for the first-chunk
clock (I15), a wasted attempt's reported tokens shown as provider tokens (I4) and a
cancel that leaves the plan's finish to a coordinator that read the plan before it (I13),
a debate limit that counts only the debates that went well (I7) and UTF-16 offsets that
count only the first astral character (I31).
Each is caught by a test written for that blind spot: two real processes, a non-default
setting, provider-reported usage, a gate between the last two writes."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

PROCESSES = "tests/e2e/test_locks_across_processes.py"
USAGE = "tests/integration/repositories/test_usage_sources.py"
ORDER = ("tests/integration/repositories/test_event_order.py::"
         "test_a_watcher_following_by_id_sees_every_event_of_a_plan_when_two_writes_race")

MUTATIONS: tuple[Mutation, ...] = (
    mutation(
        "lock-key-salted-per-process", "I48", "storage/locks.py",
        '    return int.from_bytes(hashlib.sha256(f"conclave:{name}".encode()).digest()[:8], "big", signed=True)',
        '    return hash(f"conclave:{name}")',
        tests=("tests/unit/test_lock_keys_agree_across_processes.py::test_another_process_computes_the_same_keys",
               f"{PROCESSES}::test_one_sweep_at_a_time_across_processes"),
        why="each process keys the sweep lock with its own salted hash: sweeps overlap across workers"),
    mutation(
        "tenant-lock-key-salted-per-process", "I10", "storage/tenancy.py",
        '    return locks.lock_key(f"admit:{tenant}")',
        '    return hash(f"admit:{tenant}")',
        tests=(f"{PROCESSES}::test_a_tenants_limit_holds_across_processes[active-plan-cap]",
               f"{PROCESSES}::test_a_tenants_limit_holds_across_processes[submit-rate]"),
        why="two API processes admit past a tenant's active-plan cap and submit rate at once"),
    mutation(
        "spend-lock-key-salted-per-process", "I57", "storage/spend.py",
        '    return locks.lock_key(f"spend:{tenant}")',
        '    return hash(f"spend:{tenant}")',
        tests=(f"{PROCESSES}::test_a_tenants_month_holds_between_two_reserving_processes",),
        why="two workers reserve against one tenant's month at once, each under its own lock: the month is overspent"),
    mutation(
        "api-token-session-mac-unchecked", "I49", "orchestrator/api/auth.py",
        "            return self._api_principal if hmac.compare_digest(mac, claim.mac) else None",
        "            return self._api_principal",
        tests=("tests/unit/test_session_cookie_is_checked.py::"
               "test_the_api_token_session_opens_the_page_and_nothing_else_does",
               "tests/e2e/test_api_token_session.py::test_a_forged_api_token_session_reads_nothing"),
        why="a forged cookie for the API token reads every tenant's plans and /metrics"),
    mutation(
        "api-token-session-without-a-token", "I49", "orchestrator/api/auth.py",
        "            if not self._api_token:\n                return None\n",
        "",
        tests=("tests/unit/test_session_cookie_is_checked.py::test_without_an_api_token_no_cookie_stands_for_one",),
        why="with no CONCLAVE_API_TOKEN, a cookie MACed with the empty token's hash reads every tenant's plans"),
    mutation(
        "idle-clock-is-the-first-chunk-clock", "I15", "orchestrator/gateway/guard.py",
        "        self._idle = spec.idle_timeout",
        "        self._idle = spec.first_chunk_timeout",
        tests=("tests/integration/llm/test_guard_timeouts.py::"
               "test_after_text_the_idle_timeout_applies_not_the_first_chunk_one",),
        why="a stall after text is waited out for the first-chunk timeout, not the idle one"),
    mutation(
        "wasted-reports-are-provider-tokens", "I4", "orchestrator/plan/views.py",
        '    reported = sum(r.input_tokens + r.output_tokens for r in cost if r.source == "provider")',
        '    reported = sum(r.input_tokens + r.output_tokens for r in rows if r.source == "provider")',
        tests=(f"{USAGE}::test_a_wasted_attempts_usage_is_waste_whoever_measured_it[postgresql-provider-estimated]",),
        why="a fenced attempt's reported tokens count as provider tokens: estimated goes negative"),
    mutation(
        "cancel-leaves-the-finish-to-others", "I13", "orchestrator/control/coordinator.py",
        "            publish_events(self.bus, plan_id, cancelled.events)\n            self.advance(plan_id)\n",
        "            publish_events(self.bus, plan_id, cancelled.events)\n",
        tests=("tests/integration/test_late_cancel.py::"
               "test_a_cancel_between_the_last_completion_and_the_finish_ends_cancelled",),
        why="a cancel landing after the last phase completed ends in a success"),
    mutation(
        "debate-limit-counts-completed-debates-only", "I7", "storage/phases.py",
        "                      .where(Phase.plan_id == plan_id, Phase.kind == kind)) or 0",
        "                      .where(Phase.plan_id == plan_id, Phase.kind == kind,\n"
        "                             Phase.status == PhaseStatus.COMPLETED)) or 0",
        tests=("tests/integration/repositories/test_debates.py::"
               "test_a_stored_debate_counts_against_the_limit_whatever_became_of_it[postgresql-running]",
               "tests/integration/repositories/test_debates.py::"
               "test_a_stored_debate_counts_against_the_limit_whatever_became_of_it[sqlite-failed]"),
        why="a debate still being spoken (or one that failed) leaves its slot free: a resumed plan exceeds the limit"),
    # I81 — retention keeps what the operator set, by the setting's unit, and the newest events
    mutation(
        "retention-days-read-as-hours", "I81", "orchestrator/control/coordinator.py",
        "delete_before=now - timedelta(days=keep) if keep else None,",
        "delete_before=now - timedelta(hours=keep) if keep else None,",
        tests=("tests/unit/test_retention_setting.py::test_a_finished_plan_is_kept_for_the_days_set_and_deleted_after",),
        why="finished plans are deleted 24 times too early"),
    mutation(
        "event-cap-keeps-the-oldest", "I81", "storage/retention.py",
        "order_by=Event.id.desc())", "order_by=Event.id)",
        tests=("tests/integration/repositories/test_retention.py::"
               "test_a_just_finished_plan_is_trimmed_after_the_grace_period[sqlite]",),
        why="a finished plan past the event cap keeps its first events and loses its end (the outcome, the synthesis)"),
    mutation(
        "utf16-counts-the-first-astral-only", "I31", "orchestrator/briefing/utf16.py",
        "        self._astral = [m.start() for m in _ASTRAL.finditer(text)]",
        "        self._astral = [m.start() for m in _ASTRAL.finditer(text)][:1]",
        tests=("tests/unit/briefing/test_utf16_offsets.py::test_chunks_of_a_document_astral_in_the_middle_slice_back_exactly",
               "tests/unit/briefing/test_utf16_offsets.py::test_citations_after_astral_characters_in_the_middle"),
        why="every span after the second astral character is off: a browser highlights the wrong text"),
    # I82 — one plan's events commit in id order; a claim takes the plan before its phase
    mutation(
        "event-id-taken-before-the-plan-lock", "I82", "storage/migrations/versions/0016_events_in_plan_order.py",
        "    PERFORM 1 FROM plans WHERE id = NEW.plan_id FOR NO KEY UPDATE;\n",
        "",
        tests=(f"{ORDER}[claim-append]", f"{ORDER}[append-claim]"),
        why="two writes of a plan commit out of id order: a watcher that read the later event moves past the "
            "earlier one, which it never sends (nor does a Last-Event-ID reconnect)"),
    mutation(
        "phases-locked-before-their-plan", "I82", "storage/sql/base.py",
        "    return (select(PLANS.c.id).where(PLANS.c.id == PHASES.c.plan_id, *conditions)\n"
        "            .with_for_update(key_share=PLAN_LOCK[\"key_share\"]).exists())",
        "    return select(PLANS.c.id).where(PLANS.c.id == PHASES.c.plan_id, *conditions).exists()",
        tests=("tests/integration/repositories/test_lock_order.py::"
               "test_a_claim_landing_while_a_cancel_commits_waits_for_it_and_takes_nothing",),
        why="a claim (or an advance, a worker's release) locks its phase row, then waits for the plan a cancel "
            "holds while the cancel waits for that phase: Postgres fails one of the two (503 database unavailable)"),
    mutation(
        "advance-marks-phases-before-the-plan", "I82", "storage/phases.py",
        "                            Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.RUNNING)), plan_first())\n"
        "    if stale_before",
        "                            Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.RUNNING)))\n"
        "    if stale_before",
        tests=("tests/integration/repositories/test_lock_order.py::"
               "test_a_claim_landing_while_an_advance_marks_its_phase_waits_for_it",),
        why="an advance holds the phases it marks while it waits for the plan a claim of one of them holds: "
            "Postgres fails one of the two"),
)
