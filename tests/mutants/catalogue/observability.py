"""Mutations of what the fleet shows of itself: no secret reaches a log line (I50), and
every phase of a plan is in the plan's one trace (I51)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

LOGS = "tests/unit/test_logs.py"
TRACING = "tests/unit/test_tracing.py"

MUTATIONS: tuple[Mutation, ...] = (
    # I50 — secrets never reach a log line
    mutation(
        "log-message-not-redacted", "I50", "orchestrator/logs/redaction.py",
        "        record.msg, record.args = self.redactor(message), None\n",
        "        record.msg, record.args = message, None\n",
        tests=(f"{LOGS}::test_every_part_of_a_record_is_redacted_before_it_is_formatted",),
        why="a key in a log call's arguments, or in Celery's line about a task, is written as it is"),
    mutation(
        "log-traceback-not-redacted", "I50", "orchestrator/logs/redaction.py",
        "            record.exc_text = self.redactor(record.exc_text)\n",
        "            record.exc_text = record.exc_text\n",
        tests=(f"{LOGS}::test_every_part_of_a_record_is_redacted_before_it_is_formatted",),
        why="an exception whose text holds a secret is logged with its traceback, secret included"),
    mutation(
        "entry-point-handler-not-redacting", "I50", "orchestrator/logs/handlers.py",
        "        handler.addFilter(Redact(self.redactor))  # after the context: it may name a secret too\n",
        "",
        tests=(f"{LOGS}::test_configure_installs_one_dressed_handler_on_the_root",),
        why="the CLI's and the API's handler writes configured secrets (the access log prints query strings)"),
    mutation(
        "registry-keys-not-secret", "I50", "orchestrator/logs/redaction.py",
        "    return found + [value for name in _key_variables(settings) if (value := os.environ.get(name))]\n",
        "    return found\n",
        tests=(f"{LOGS}::test_the_secrets_of_a_process_are_its_keys_tokens_and_passwords",),
        why="the provider keys of the operator's models are not among the values redacted from logs"),

    # I51 — one trace per plan, derived from its id
    mutation(
        "plan-trace-not-derived-from-the-plan", "I51", "orchestrator/tracing/trace_ids.py",
        "        value = uuid.UUID(plan_id).int\n",
        "        value = uuid.uuid4().int\n",
        tests=(f"{TRACING}::test_one_trace_per_plan_with_a_span_per_phase_and_per_model_call",),
        why="each phase (each worker) starts a trace of its own: a plan is scattered over as many traces"),
    mutation(
        "phase-span-not-parented-on-the-plan", "I51", "orchestrator/tracing/otel.py",
        '            f"phase {key}", context=trace.set_span_in_context(NonRecordingSpan(plan)),\n',
        '            f"phase {key}",\n',
        tests=(f"{TRACING}::test_one_trace_per_plan_with_a_span_per_phase_and_per_model_call",),
        why="a phase span continues whatever trace its task ran in (Celery's run span), not the plan's"),
)
