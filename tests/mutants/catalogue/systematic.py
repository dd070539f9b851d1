"""Classes of break found by the systematic mutation run (docs/mutation.md) that the hand
catalogue did not hold: each survived the fast tier before its test was written."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

SESSION = "tests/unit/test_session_cookie_is_checked.py"
TOKENS = "tests/unit/test_token_format_is_strict.py"
USAGE = "tests/unit/test_usage_view_adds_up.py"
LOCKS = "tests/unit/test_lock_keys_agree_across_processes.py"
LITERALS = "tests/unit/llm/test_egress_listed_literals.py"

MUTATIONS: tuple[Mutation, ...] = (
    mutation(
        "api-token-session-mac-not-compared", "I49", "orchestrator/api/auth.py",
        "            return self._api_principal if hmac.compare_digest(mac, claim.mac) else None\n",
        "            return self._api_principal\n",
        tests=(f"{SESSION}::test_the_api_token_session_opens_the_page_and_nothing_else_does",),
        why="with CONCLAVE_API_TOKEN set, a forged cookie naming the shared token reads every tenant's plans"),
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
    mutation(
        "lock-key-salted-per-process", "I48", "storage/locks.py",
        '    return int.from_bytes(hashlib.sha256(f"conclave:{name}".encode()).digest()[:8], "big", signed=True)\n',
        '    return hash(f"conclave:{name}") + 0 * len(hashlib.sha256().digest())\n',
        tests=(f"{LOCKS}::test_another_process_computes_the_same_keys",
               f"{LOCKS}::test_keys_are_pinned_signed_64_bit_integers"),
        why="each process locks its own key: sweeps overlap and a tenant's cap and rate are exceeded through "
            "different API processes"),
    Mutation(
        "listed-literal-waives-every-class", "I18", "orchestrator/gateway/egress.py",
        (Edit("waived = verdict in WAIVABLE and pattern is not None and pattern.waives(target, target.ip)",
              "waived = pattern is not None and pattern.waives(target, target.ip)"),
         Edit("        if verdict in WAIVABLE and pattern.waives(target, address):\n",
              "        if pattern.waives(target, address):\n")),
        tests=(f"{LITERALS}::test_listing_a_forbidden_literal_never_waives_it",),
        why="an operator who lists 169.254.169.254 (or 0.0.0.0, a multicast address) literally opens the cloud "
            "metadata service to plan-defined models"),
)
