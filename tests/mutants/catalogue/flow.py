"""Mutations of what flows between phases: canvases end in advance (I8), full texts through
the content store (I14) and the stream guard (I15)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation  # noqa: F401

REPO = "tests/integration/repositories"
FENCE = f"{REPO}/test_fence.py"
PLANS = f"{REPO}/test_plans.py"
CANCEL = f"{REPO}/test_cancel.py"
GUARD = "tests/integration/llm/test_guard.py"
PG = "[postgresql]"


MUTATIONS: tuple[Mutation, ...] = (
    # I8 — canvases end in advance
    mutation(
        "chain-without-advance", "I8", "orchestrator/canvas.py",
        "        return chain(lanes[0], advance)\n",
        "        return lanes[0]\n",
        tests=("tests/unit/test_canvas.py::test_signatures_end_in_advance_and_use_registered_names",),
        why="a single-lane canvas does not end in advance(plan): the plan stops after it"),

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
