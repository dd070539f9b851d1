"""Mutations of the trust boundary: the operator's model registry (I17), egress pinning
(I18) and secrets read at call time, never shown (I19)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation

REGISTRY = "tests/unit/test_registry.py"
EGRESS_UNIT = "tests/unit/llm/test_egress.py"
EGRESS = "tests/integration/llm/test_egress.py"
SECRETS = "tests/integration/llm/test_secrets.py"
NEVER_WAIVES = f"{EGRESS_UNIT}::test_a_name_pattern_never_waives_the_address_rules"
NO_CONNECTION = f"{EGRESS}::test_refused_urls_never_produce_a_connection"
ROTATED = f"{SECRETS}::test_a_rotated_key_and_header_value_are_what_the_next_call_sends"
#: A cache of what a variable held when it was first read (a mutant's, not the code's).
CACHE = Edit('_OWN_PREFIX = "CONCLAVE_"  # Conclave\'s own configuration: never a plan-defined model\'s key\n',
             '_OWN_PREFIX = "CONCLAVE_"  # Conclave\'s own configuration: never a plan-defined model\'s key\n'
             "_FIRST_READ: dict[str, str | None] = {}\n")


MUTATIONS: tuple[Mutation, ...] = (
    # I17 — a cluster runs only the operator's models, or allowed plan models, checked twice
    mutation(
        "plan-models-without-opt-in", "I17", "orchestrator/plan/registry.py",
        "        if not self.settings.allow_plan_models:\n",
        "        if False:\n",
        tests=(f"{REGISTRY}::test_cluster_refuses_plan_defined_models_by_default",),
        why="a cluster runs a plan's own models although the operator never set CONCLAVE_ALLOW_PLAN_MODELS"),
    mutation(
        "plan-key-env-not-allowlisted", "I17", "orchestrator/plan/registry.py",
        "        elif env is not None and env not in self.settings.allowed_key_envs:\n",
        "        elif False:\n",
        tests=(f"{REGISTRY}::test_opted_in_plan_models_stay_within_the_allowlists",),
        why="a plan-defined model reads any variable of the worker's environment, not only "
            "CONCLAVE_ALLOWED_KEY_ENVS"),
    mutation(
        "plan-model-base-url-unchecked", "I17", "orchestrator/plan/registry.py",
        "                    self.egress.check(cfg.base_url)\n",
        "                    pass\n",
        tests=(f"{REGISTRY}::test_opted_in_plan_models_stay_within_the_allowlists",),
        why="a plan-defined model is accepted with a base_url outside CONCLAVE_ALLOWED_BASE_URLS"),
    mutation(
        "worker-trusts-the-submit-check", "I17", "orchestrator/plan/registry.py",
        "        problems = self._plan_model_problems(name, cfg)\n",
        "        problems = []\n",
        tests=(f"{REGISTRY}::test_the_worker_checks_with_its_own_settings_not_the_submitters",
               f"{REGISTRY}::test_cluster_refuses_plan_defined_models_by_default"),
        why="a worker runs a stored plan's own model because an API once accepted it, not under its own settings"),
    mutation(
        "plan-model-runs-trusted", "I17", "orchestrator/plan/registry.py",
        "        return self._build(name, cfg, trusted=False)\n",
        "        return self._build(name, cfg, trusted=True)\n",
        tests=(f"{REGISTRY}::test_opted_in_plan_models_run_untrusted_with_the_operators_egress",),
        why="a plan-defined model is called like an operator's: no egress check or pinning at call time"),
    mutation(
        "cluster-runs-the-builtin-default", "I17", "orchestrator/plan/registry.py",
        "            raise ModelNotAllowed(f\"model {name!r} is not in this worker's registry (CONCLAVE_MODELS)\")\n",
        "            return self._builtin_default(name)\n",
        tests=(f"{REGISTRY}::test_cluster_without_a_registry_runs_nothing_and_says_why",),
        why="a cluster worker runs a model nobody registered (the built-in default)"),
    mutation(
        "plan-model-reads-conclave-variables", "I17", "orchestrator/gateway/providers/http.py",
        "    if not spec.trusted and spec.api_key_env.upper().startswith(_OWN_PREFIX):\n",
        "    if False:\n",
        tests=(f"{EGRESS}::test_a_plan_defined_model_never_reads_conclave_variables",),
        why="at call time a plan-defined model reads a CONCLAVE_* variable and sends it as its key"),

    # I18 — an untrusted call connects only to a checked, pinned address
    mutation(
        "egress-skipped-at-call-time", "I18", "orchestrator/gateway/providers/http.py",
        "    if spec.trusted:\n        return url, headers, {}\n",
        "    if True:\n        return url, headers, {}\n",
        tests=(NO_CONNECTION,),
        why="a plan-defined model's call connects wherever its URL points, checked or not"),
    mutation(
        "only-the-first-resolved-address-checked", "I18", "orchestrator/gateway/egress.py",
        "        for address in addresses:\n            self._check_address(target, pattern, address)\n",
        "        for address in addresses[:1]:\n            self._check_address(target, pattern, address)\n",
        tests=(NEVER_WAIVES,),
        why="a name that resolves to a public and a private address passes, and the client may dial the private one"),
    mutation(
        "listed-name-waives-address-rules", "I18", "orchestrator/gateway/egress.py",
        "        return self.ip is not None and not self.wildcard and self.ip == address == target.ip\n",
        "        return not self.wildcard\n",
        tests=(NEVER_WAIVES, NO_CONNECTION),
        why="a listed DNS name may resolve to loopback or a private address (whoever controls its zone picks)"),
    mutation(
        "request-not-pinned", "I18", "orchestrator/gateway/egress.py",
        "        pinned_url = str(httpx.URL(url).copy_with(host=str(chosen)))\n",
        "        pinned_url = url\n",
        tests=(f"{EGRESS_UNIT}::test_pinning_keeps_the_name_for_tls",
               f"{EGRESS}::test_a_name_is_resolved_once_and_the_checked_address_is_the_one_dialled"),
        why="the client resolves the name again when it connects: a rebinding DNS answer redirects the call"),
    mutation(
        "wildcard-matches-any-suffix", "I18", "orchestrator/gateway/egress.py",
        'not target.host.endswith("." + self.host)',
        "not target.host.endswith(self.host)",
        tests=(f"{EGRESS_UNIT}::test_refused_with_a_reason",),
        why="*.example.com also allows evil-example.com"),
    Mutation(
        "redirects-followed", "I18", "orchestrator/gateway/providers/http.py",
        (Edit("http1=True, http2=False, follow_redirects=False,", "http1=True, http2=False, follow_redirects=True,"),
         Edit("httpx.Client(transport=transport, follow_redirects=False)",
              "httpx.Client(transport=transport, follow_redirects=True)")),
        tests=(f"{EGRESS}::test_redirects_are_never_followed",),
        why="a model call follows a 3xx to its Location, an address nobody checked"),

    # I19 — secrets read at call time, never shown, redacted from the logged body
    Mutation(
        "key-read-once", "I19", "orchestrator/gateway/providers/http.py",
        (CACHE,
         Edit("    value = os.environ.get(spec.api_key_env)\n",
              "    value = _FIRST_READ.setdefault(spec.api_key_env, os.environ.get(spec.api_key_env))\n")),
        tests=(ROTATED,),
        why="a model's key is read once and kept: a rotated or removed key is not noticed"),
    Mutation(
        "header-values-read-once", "I19", "orchestrator/gateway/providers/http.py",
        (CACHE,
         Edit("        value = os.environ.get(variable)\n",
              "        value = _FIRST_READ.setdefault(variable, os.environ.get(variable))\n")),
        tests=(ROTATED,),
        why="a configured header's value is read once and kept: a rotated value is not noticed"),
    mutation(
        "header-values-not-redacted", "I19", "orchestrator/gateway/providers/http.py",
        "    values = tuple(v for v in (key, *headers.values()) if v)\n",
        "    values = tuple(v for v in (key,) if v)\n",
        tests=(f"{SECRETS}::test_an_echoed_header_value_is_redacted_even_when_it_looks_like_no_token",),
        why="a configured header value the server echoes reaches the worker's log"),
    mutation(
        "configured-secrets-not-redacted", "I19", "orchestrator/gateway/providers/http.py",
        "    return scrub(text, (secret,) if isinstance(secret, str) else secret or ())\n",
        "    return scrub(text)\n",
        tests=(f"{SECRETS}::test_an_echoed_key_is_redacted_even_when_it_looks_like_no_token",
               f"{SECRETS}::test_an_echoed_header_value_is_redacted_even_when_it_looks_like_no_token"),
        why="a key or header value the server echoes reaches the worker's log unless it happens to look "
            "like a token"),
)
