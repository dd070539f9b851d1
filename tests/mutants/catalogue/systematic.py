"""Classes of break found by the systematic mutation run (docs/mutation.md) that the hand
catalogue did not hold: each survived the fast tier before its test was written."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

SESSION = "tests/unit/test_session_cookie_is_checked.py"
TOKENS = "tests/unit/test_token_format_is_strict.py"
USAGE = "tests/unit/test_usage_view_adds_up.py"
LOCKS = "tests/unit/test_lock_keys_agree_across_processes.py"
LITERALS = "tests/unit/llm/test_egress_listed_literals.py"
EGRESS_PROPS = "tests/unit/llm/test_egress_properties.py"
RESERVE = "tests/unit/test_reservations_add_up.py"
RETENTION = "tests/integration/repositories/test_retention.py"
GUARD_USAGE = "tests/unit/llm/test_guard_usage.py"

MUTATIONS: tuple[Mutation, ...] = (
    mutation(
        "failed-fallback-drops-the-streams-usage", "I15", "orchestrator/gateway/fallback.py",
        "payload.usage = _add(stream_usage, payload.usage)",
        "payload.usage = payload.usage",
        tests=(f"{GUARD_USAGE}::test_a_failed_fallback_costs_the_stream_plus_what_it_reported",),
        why="a fallback that fails carrying its own usage is recorded at that alone: the stream's tokens vanish"),
    mutation(
        "let-go-never-aborts-a-held-stream", "I15", "orchestrator/gateway/guard.py",
        'aborter = getattr(self._stream, "abort", None) if abort and self._thread.is_alive() else None',
        "aborter = None",
        tests=(f"{GUARD_USAGE}::test_a_call_cancelled_before_it_waits_aborts_the_stream_its_producer_still_reads",),
        why="a call cancelled before the watchdog polls it gives its stream up unaborted: the producer thread "
            "is left behind, blocked in the stream's first read"),
    mutation(
        "late-trip-aborts-an-ended-stream", "I15", "orchestrator/gateway/guard.py",
        "            if self.hands_over and not self._ended:\n",
        "            if self.hands_over:\n",
        tests=(f"{GUARD_USAGE}::test_a_late_trip_never_aborts_a_stream_that_ended",),
        why="a call the watchdog finds due just as its stream ends has the ended stream aborted: a network "
            "stream's socket is shut down after its connection went back to the pool (the fallback's, say)"),
    mutation(
        "ended-stream-keeps-its-socket-abortable", "I15", "orchestrator/gateway/providers/http_provider.py",
        "            self._response = None\n            return self._aborted\n",
        "            return self._aborted\n",
        tests=("tests/integration/llm/test_connection_pool.py::"
               "test_a_late_abort_of_a_stream_that_ended_leaves_its_pooled_connection_alone",),
        why="a stream read to its end on its caller's thread still shuts its socket down on a late trip, after "
            "its connection went back to the pool: the next call on it finds it dead"),
    mutation(
        "token-split-at-the-last-separator", "I21", "storage/identity.py",
        'token[len(TOKEN_PREFIX):].partition("_")',
        'token[len(TOKEN_PREFIX):].rpartition("_")',
        tests=(f"{TOKENS}::test_a_secret_may_contain_the_separator",),
        why="every token whose secret holds a '_' (about half of them) authenticates nobody"),
    mutation(
        "provider-waste-counted-as-provider-cost", "I4", "orchestrator/plan/views.py",
        'reported = sum(r.input_tokens + r.output_tokens for r in cost if r.source == "provider")',
        'reported = sum(r.input_tokens + r.output_tokens for r in rows if r.source == "provider")',
        tests=(f"{USAGE}::test_provider_reported_cost_and_waste_are_told_apart",),
        why="a wasted attempt's provider-reported tokens show as provider cost: estimated tokens go negative"),
    mutation(
        "live-attempt-counted-as-waste", "I4", "orchestrator/plan/views.py",
        "    rows = [replace(r, counted=True) if (r.phase_id, r.attempt) in live else r for r in usage_rows]\n",
        "    rows = list(usage_rows)\n",
        tests=(f"{USAGE}::test_a_running_attempt_is_live_cost_and_its_earlier_attempts_stay_waste",),
        why="a running plan shows its live spend as waste and its cost as nothing until the phase completes"),
    Mutation(
        "listed-literal-waives-every-class", "I18", "orchestrator/gateway/egress.py",
        (Edit("waived = verdict in WAIVABLE and pattern is not None and pattern.waives(target, target.ip)",
              "waived = pattern is not None and pattern.waives(target, target.ip)"),
         Edit("        if verdict in WAIVABLE and pattern.waives(target, address):\n",
              "        if pattern.waives(target, address):\n")),
        tests=(f"{LITERALS}::test_a_forbidden_class_stays_refused_when_its_literal_is_listed[169.254.169.254-metadata]",
               f"{LITERALS}::test_a_forbidden_class_stays_refused_when_its_literal_is_listed[224.0.0.1-multicast]",
               f"{EGRESS_PROPS}::test_forbidden_classes_are_never_reached_even_when_listed"),
        why="an operator who lists 169.254.169.254 (or 0.0.0.0, a multicast address) literally opens the cloud "
            "metadata service to plan-defined models"),
    mutation(
        "token-budget-counts-input-only", "I57", "storage/spend.py",
        "select(func.coalesce(func.sum(UsageRow.input_tokens + UsageRow.output_tokens), zero))",
        "select(func.coalesce(func.sum(UsageRow.input_tokens), zero))",
        tests=(f"{RESERVE}::test_a_plans_tokens_are_its_rows_and_its_calls_in_flight_and_no_other_plans",),
        why="a plan's max_tokens counts only the prompts on record: every call's output is spent past the budget"),
    mutation(
        "tenant-calls-in-flight-not-counted", "I57", "storage/spend.py",
        "                        select(func.coalesce(func.sum(Reservation.cost_usd), 0.0))\n"
        "                        .where(Reservation.tenant == tenant).scalar_subquery()]\n",
        "                        literal(0.0)]\n",
        tests=(f"{RESERVE}::test_a_tenants_month_is_its_plans_rows_and_calls_in_flight_and_no_other_tenants",),
        why="a tenant's concurrent calls each see only the month's usage rows: together they spend past its budget"),
    mutation(
        "new-attempt-releases-every-phases-reservations", "I57", "storage/spend.py",
        "delete(Reservation).where(Reservation.phase_id == phase_id, Reservation.attempt < attempt)",
        "delete(Reservation).where(Reservation.attempt < attempt)",
        tests=(f"{RESERVE}::test_a_new_attempt_releases_its_own_phases_older_attempts_only",),
        why="a retried phase releases the worst case of other phases' calls still in flight: the plan spends past "
            "its budget"),
    mutation(
        "retention-trims-a-plan-resumed-mid-pass", "I81", "storage/retention.py",
        "        res = s.execute(delete(Event).where(Event.plan_id.in_(final), old)\n",
        "        res = s.execute(delete(Event).where(Event.plan_id.in_(ids), old)\n",
        tests=(f"{RETENTION}::test_a_plan_resumed_while_a_pass_trims_it_keeps_its_events",),
        why="a failed plan resumed while a retention pass trims it loses its event history (and its resume "
            "guard is cleared) while it runs again"),
    mutation(
        "retention-watermark-skips-ties", "I81", "storage/retention.py",
        'and_(Plan.finished_at == mark.at, Plan.id > (mark.ref or "")))',
        "and_(Plan.finished_at > mark.at))",
        tests=(f"{RETENTION}::test_the_walk_visits_every_plan_once_whatever_the_ties_and_the_order_of_ids",),
        why="plans that finished at the watermark's instant are never trimmed: their events are never capped "
            "or aged out"),
)
