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

MUTATIONS: tuple[Mutation, ...] = (
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
)
