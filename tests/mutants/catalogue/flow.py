"""Mutations of what flows between phases: canvases end in advance (I8), full texts through
the content store (I14) and the stream guard (I15)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

GUARD = "tests/integration/llm/test_guard.py"
CLAIM = "tests/integration/test_claim_inputs.py::test_a_claim_reads_every_transitive_input_in_full_and_stores_its_start"
PG, SQLITE = "[postgresql]", "[sqlite]"


MUTATIONS: tuple[Mutation, ...] = (
    # I8 — canvases end in advance
    mutation(
        "chain-without-advance", "I8", "orchestrator/plan/canvas.py",
        "        return Chain((run, Advance())) if tail else run\n",
        "        return run\n",
        tests=("tests/unit/test_canvas.py::test_a_board_is_one_canvas_from_its_opening_to_advance",
               "tests/unit/test_canvas.py::test_signatures_are_chains_of_chords_by_registered_name"),
        why="a single-lane canvas does not end in advance(plan): the plan stops after it"),

    # I14 — the full text through the content store
    mutation(
        "inputs-read-from-summaries", "I14", "storage/sql/base.py",
        "            texts[record.id] = row.text\n",
        '            texts[record.id] = record.summary or ""\n',
        tests=(f"{CLAIM}{PG}", f"{CLAIM}{SQLITE}",
               "tests/integration/test_pipeline.py::test_team_plan_with_a_200kb_result_is_offloaded_and_read_in_full"),
        why="a later phase is prompted with its inputs' short summaries, not their full text"),

    # I15 — the stream guard
    mutation(
        "replay-after-partial-stream", "I15", "orchestrator/gateway/guard.py",
        "    if outcome.text:\n",
        '    if outcome.text and outcome.reason == "end":\n',
        tests=(f"{GUARD}::test_break_after_partial_text_is_truncated_without_double_broadcast",),
        why="a stream that broke after partial text falls back and broadcasts the full text again"),
    mutation(
        "truncated-dropped", "I15", "orchestrator/gateway/guard.py",
        "truncated=True, finish_reason=outcome.reason)",
        "truncated=False, finish_reason=outcome.reason)",
        tests=(f"{GUARD}::test_break_after_partial_text_is_truncated_without_double_broadcast",),
        why="partial text is returned as if it were whole"),
    mutation(
        "truncated-not-stored", "I15", "storage/sql/base.py",
        '"truncated": bindparam("r_truncated", type_=PHASES.c.truncated.type),',
        '"truncated": False,',
        tests=("tests/integration/test_models_in_plans.py::test_break_mid_stream_keeps_partial_text_marked_truncated",),
        why="the stored phase does not say its text is partial"),
    mutation(
        "first-chunk-timeout-ignored", "I15", "orchestrator/gateway/guard.py",
        "        self._first_due = started + spec.first_chunk_timeout\n",
        "        self._first_due = started + spec.deadline\n",
        tests=(f"{GUARD}::test_no_first_chunk_falls_back_and_replays",),
        why="a stream that never sends its first chunk holds the call until the deadline"),
    mutation(
        "idle-timeout-ignored", "I15", "orchestrator/gateway/guard.py",
        '(self.last_event + self._idle, "idle_timeout")',
        '(self.deadline_at, "idle_timeout")',
        tests=(f"{GUARD}::test_a_stream_without_abort_that_stalls_after_text_is_truncated",
               f"{GUARD}::test_idle_timeout_after_partial_text_is_truncated",
               f"{GUARD}::test_the_watchdog_ends_a_read_blocked_after_the_handover"),
        why="a stream that stalls after partial text, read by its producer or on its caller's thread, "
            "holds the call until the deadline (the watchdog keeps the one idle clock)"),
    mutation(
        "deadline-ignored", "I15", "orchestrator/gateway/guard.py",
        "        self.deadline_at = started + spec.deadline\n",
        "        self.deadline_at = started + 86400.0\n",
        tests=(f"{GUARD}::test_deadline_bounds_stream_and_fallback",),
        why="a call whose fallback hangs is never given up"),
    mutation(
        "stream-not-cancellable", "I15", "orchestrator/gateway/guard.py",
        "            stop = self._should_stop()\n",
        "            stop = self.has_text and self._should_stop()\n",
        tests=(f"{GUARD}::test_should_stop_cancels_while_waiting_for_the_first_chunk",),
        why="the watchdog polls should_stop() only once text was shown: a call cancelled or taken over "
            "while it waits for its first chunk (or its fallback) keeps waiting"),
    mutation(
        "inline-read-not-cancellable", "I15", "orchestrator/gateway/guard.py",
        "                watch.saw(text=is_text)\n                if inline and should_stop():",
        "                watch.saw(text=is_text)\n                if False:",
        tests=(f"{GUARD}::test_should_stop_cancels_a_running_stream_promptly",),
        why="a stream read on its caller's thread shows more text after its call was cancelled"),
    mutation(
        "watchdog-ignores-should-stop", "I15", "orchestrator/gateway/guard.py",
        "            stop = self._should_stop()\n",
        "            stop = False\n",
        tests=(f"{GUARD}::test_should_stop_cancels_a_read_blocked_after_the_handover",),
        why="a cancelled call whose stream is blocked in a read waits for its idle timeout"),
)
