"""Mutations of the offline model and error-reporting invariants (I38-I43): bounded
options, gated fault switches, a lazy abortable stream, shutdown gives phases back,
upstream errors and internal errors shown safely."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

OFFLINE = "tests/unit/llm/test_offline.py"
BOUNDS = f"{OFFLINE}::test_out_of_bounds_options_are_refused_naming_the_option"
FAULTS = f"{OFFLINE}::test_fault_switches_run_only_in_testing_mode"
RUNNER = "tests/unit/test_runner.py"
BACK = "tests/unit/test_giving_phases_back.py"
UPSTREAM = "tests/unit/llm/test_upstream.py"

# test_fault_switches_run_only_in_testing_mode's parameters that end at once on a mutant
# (the hang ones would hang until the test's timeout)
FAIL_SWITCH = f"{FAULTS}[options3]"  # {"fail": ["Dana"]}
BREAK_SWITCH = f"{FAULTS}[options5]"  # {"break_after_chars": 10}
HANG_SWITCH = f"{FAULTS}[options0]"  # {"hang": ["Dana"]}: only where the provider still refuses it


MUTATIONS: tuple[Mutation, ...] = (
    # I38 — offline options are one typed, bounded model, at submit and in the provider
    mutation(
        "offline-words-unbounded", "I38", "orchestrator/gateway/providers/offline/options.py",
        "    words: int = Field(110, ge=1, le=MAX_WORDS)\n",
        "    words: int = Field(110, ge=1)\n",
        tests=(f"{BOUNDS}[options0-words-less than or equal to 50000]",
               f"{RUNNER}::test_submit_refuses_fault_switches_and_options_out_of_bounds_naming_the_option"),
        why="an offline model may be asked for any number of words (a CPU burner), at submit and at call time"),
    mutation(
        "offline-unknown-option-accepted", "I38", "orchestrator/gateway/providers/offline/options.py",
        '    """``spec.options`` of an offline model, validated (see the module docstring)."""\n\n'
        '    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)\n',
        '    """``spec.options`` of an offline model, validated (see the module docstring)."""\n\n'
        '    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, allow_inf_nan=False)\n',
        tests=(f"{BOUNDS}[options8-seed-unknown option]",),
        why="a misspelt or unknown offline option is silently ignored instead of refused by name"),
    mutation(
        "provider-trusts-stored-options", "I38", "orchestrator/gateway/providers/offline/options.py",
        "            parsed = cls.model_validate(dict(options))\n",
        "            parsed = cls.model_construct(**dict(options))\n",
        tests=(f"{BOUNDS}[options8-seed-unknown option]", f"{BOUNDS}[options4-chunk_chars-greater than or equal to 4]"),
        why="the provider runs whatever options the stored plan holds, unchecked (llm.misconfigured never raised)"),

    # I39 — fault switches run only in a process in testing mode
    mutation(
        "provider-runs-faults-outside-testing", "I39", "orchestrator/gateway/providers/offline/options.py",
        "        faults = [] if testing else parsed.fault_switches()\n",
        "        faults = []\n",
        tests=(FAIL_SWITCH, BREAK_SWITCH),
        why="a fault switch that got past submit runs in a provider not in testing mode"),
    mutation(
        "submit-allows-faults-outside-testing", "I39", "orchestrator/gateway/providers/offline/options.py",
        "    if testing:\n        return problems\n",
        "    if True:\n        return problems\n",
        tests=(HANG_SWITCH,
               f"{RUNNER}::test_submit_refuses_fault_switches_and_options_out_of_bounds_naming_the_option"),
        why="submit accepts fault switches from a submitter that is not in testing mode"),
    mutation(
        "break-after-chars-not-a-fault", "I39", "orchestrator/gateway/providers/offline/options.py",
        '        if self.break_after_chars is not None:\n            on.append("break_after_chars")\n',
        '        if False:\n            on.append("break_after_chars")\n',
        tests=(BREAK_SWITCH,),
        why="break_after_chars runs outside testing mode: anyone may make the model break its streams"),
    mutation(
        "worker-always-in-testing-mode", "I39", "tasks/runtime.py",
        "    runner = PhaseRunner(db, settings, bus, default_providers(testing=settings.testing))\n",
        "    runner = PhaseRunner(db, settings, bus, default_providers(testing=True))\n",
        tests=("tests/unit/test_worker_fault_switches.py::test_a_worker_not_in_testing_mode_refuses_a_stored_fault_switch",),
        why="a worker's offline model runs fault switches whatever the worker's own CONCLAVE_TESTING"),

    # I40 — the offline stream is lazy, byte-identical to the whole text, and abortable
    mutation(
        "offline-text-rendered-eagerly", "I40", "orchestrator/gateway/providers/offline/provider.py",
        "        chunks = _chunks(render_pieces(request, opts), opts.chunk_chars)\n",
        "        chunks = _chunks([render(request, opts)], opts.chunk_chars)\n",
        tests=(f"{OFFLINE}::test_a_long_text_is_written_only_as_far_as_it_is_read",),
        why="the stream writes the whole text before its first chunk, however little of it is read"),
    mutation(
        "offline-abort-ignored", "I40", "orchestrator/gateway/providers/offline/provider.py",
        '            raise StreamStalled("offline stream aborted")\n',
        "            return\n",
        tests=(f"{OFFLINE}::test_abort_ends_a_stream_waiting_between_chunks",),
        why="an aborted offline stream stops waiting but writes the rest of its text"),
    mutation(
        "offline-tail-chunk-dropped", "I40", "orchestrator/gateway/providers/offline/provider.py",
        "    if rest:\n        yield rest\n",
        "    if rest:\n        pass\n",
        tests=(f"{OFFLINE}::test_chunks_of_pieces_are_the_chunks_of_the_whole_text",
               f"{OFFLINE}::test_stream_chunks_match_complete_and_usage_is_estimated"),
        why="the streamed text loses its last partial chunk: it is not the whole text"),

    # I41 — a warm shutdown gives each phase back, fenced by the attempt
    mutation(
        "release-keeps-the-lease", "I41", "storage/phases.py",
        "                             .values(lease_expires_at=now, enqueued_at=None)\n",
        "                             .values(enqueued_at=None)\n",
        tests=(f"{RUNNER}::test_a_worker_shutting_down_gives_its_phase_back",),
        why="a phase given back keeps its lease: no other worker takes it until the lease runs out"),
    mutation(
        "release-keeps-the-enqueue-mark", "I41", "storage/phases.py",
        "                             .values(lease_expires_at=now, enqueued_at=None)\n",
        "                             .values(lease_expires_at=now)\n",
        tests=(f"{BACK}::test_a_phase_given_back_is_resent_at_once_even_after_a_resend_while_it_ran",),
        why="a phase given back keeps its enqueue mark: the reconciler does not resend it at once"),
    mutation(
        "release-ignores-the-cancel", "I41", "storage/phases.py",
        "                                    Phase.status == PhaseStatus.RUNNING, live_plan)\n",
        "                                    Phase.status == PhaseStatus.RUNNING)\n",
        tests=(f"{RUNNER}::test_a_shutdown_does_not_give_back_a_phase_of_a_cancelled_plan",),
        why="a shutdown gives back a phase of a cancelled plan instead of ending it cancelled"),
    mutation(
        "release-not-fenced-by-the-attempt", "I41", "storage/phases.py",
        "                             .where(Phase.id == phase_id, Phase.attempt == attempt,\n"
        "                                    Phase.status == PhaseStatus.RUNNING, live_plan)\n",
        "                             .where(Phase.id == phase_id,\n"
        "                                    Phase.status == PhaseStatus.RUNNING, live_plan)\n",
        tests=(f"{BACK}::test_a_stale_attempt_stopped_by_a_shutdown_does_not_give_back_the_phase_another_attempt_runs",),
        why="a stale attempt stopping late ends the lease of the attempt that took the phase over"),
    mutation(
        "shutdown-fails-the-phase", "I41", "tasks/runner.py",
        "            if lease.shutting_down:\n                return self.release(work, exc)\n",
        "            if False:\n                return self.release(work, exc)\n",
        tests=(f"{RUNNER}::test_a_worker_shutting_down_gives_its_phase_back",),
        why="a call stopped by the worker's shutdown fails its phase instead of giving it back"),
    mutation(
        "shutdown-stops-calls-as-lost", "I41", "tasks/lease.py",
        "        for lease in list(self._held.values()):\n            lease.stop(SHUTDOWN)\n",
        "        for lease in list(self._held.values()):\n            lease.stop()\n",
        tests=(f"{BACK}::test_a_shutdown_stops_every_call_held_now_and_later_to_give_its_phase_back",),
        why="a shutdown stops the running calls as if their leases were lost: their phases are not given back"),
    mutation(
        "shutdown-spares-later-calls", "I41", "tasks/lease.py",
        "        if self._shutting_down.is_set():  # after it is held",
        "        if False:  # after it is held",
        tests=(f"{BACK}::test_a_shutdown_stops_every_call_held_now_and_later_to_give_its_phase_back",),
        why="a task that starts while the worker is stopping runs its model call to the end"),

    # I42 — an upstream error reaches readers as its code and a reason from safe parts only
    mutation(
        "upstream-body-in-the-message", "I42", "orchestrator/gateway/providers/http.py",
        '    return classify(status, message, code, public=reason(provider, f"HTTP {status}", code),\n',
        '    return classify(status, message, code,\n'
        '                    public=reason(provider, f"HTTP {status}", code) + f": {message}",\n',
        tests=(f"{UPSTREAM}::test_an_http_error_says_status_and_code_and_logs_the_scrubbed_body",),
        why="what the upstream server said (possibly the key or planted text) is stored and shown as the error"),
    mutation(
        "stream-error-text-in-the-message", "I42", "orchestrator/gateway/providers/http.py",
        '    return classify(status, message, code, public=reason(provider, "stream error", code),\n',
        '    return classify(status, message, code, public=reason(provider, "stream error", code) + f": {message}",\n',
        tests=(f"{UPSTREAM}::test_an_error_inside_a_stream_says_only_its_code",),
        why="the message of an error object inside a stream is stored and shown"),
    mutation(
        "transport-error-text-in-the-message", "I42", "orchestrator/gateway/providers/http.py",
        '    public = f"{provider} {type(exc).__name__}"',
        '    public = f"{provider} {type(exc).__name__}: {exc}"',
        tests=(f"{UPSTREAM}::test_a_transport_error_names_its_type_only",),
        why="a transport error's text (internal hosts and addresses) is stored and shown"),
    mutation(
        "any-upstream-code-shown", "I42", "orchestrator/gateway/providers/error_text.py",
        "    if not isinstance(code, str) or not _CODE.fullmatch(code):\n",
        "    if not isinstance(code, str) or not code:\n",
        tests=(f"{UPSTREAM}::test_only_identifier_like_codes_are_shown",),
        why="an upstream error code that is really a message or a token is shown in the public reason"),
    mutation(
        "configured-secrets-not-scrubbed", "I42", "orchestrator/gateway/providers/error_text.py",
        '            text = text.replace(secret, "***")\n',
        "            text = text\n",
        tests=(f"{UPSTREAM}::test_scrub_replaces_secrets_and_anything_token_like_and_keeps_the_words",),
        why="the logged upstream body keeps configured header values the scrubber was given"),
    mutation(
        "upstream-detail-pickled", "I42", "orchestrator/gateway/failures.py",
        "    def __reduce__(self) -> tuple[Any, ...]:\n",
        "    def _reduce_unused(self) -> tuple[Any, ...]:\n",
        tests=(f"{UPSTREAM}::test_an_http_error_says_status_and_code_and_logs_the_scrubbed_body",),
        why="an error's upstream detail travels with it when pickled (into Celery results)"),

    # I43 — a bug stores conclave.internal and the exception's type only
    mutation(
        "internal-error-stores-the-exception-text", "I43", "tasks/runner.py",
        '                             f"internal error ({type(exc).__name__}); the worker\'s log has the details")\n',
        '                             f"internal error ({type(exc).__name__}: {exc}); "\n'
        '                             "the worker\'s log has the details")\n',
        tests=(f"{RUNNER}::test_a_bug_in_a_phase_stores_a_generic_message_and_logs_the_details",),
        why="a crash's exception text (a prompt, a key, a row) is stored on the phase and shown to readers"),
    mutation(
        "internal-error-not-logged", "I43", "tasks/runner.py",
        '            log.exception("phase crashed", extra={"action": "phase.crashed"})\n',
        '            log.debug("phase crashed", extra={"action": "phase.crashed"})\n',
        tests=(f"{RUNNER}::test_a_bug_in_a_phase_stores_a_generic_message_and_logs_the_details",),
        why="a crash's exception and traceback are not in the worker's log: nobody can find the bug"),
)
