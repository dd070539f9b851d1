"""Mutations of the hot path and its structure: one event shape (I23), one status
vocabulary (I24), layers without a loop (I25), the claim's inputs (I33), fixed statement
counts (I34), the one-statement heartbeat (I35), immutable cached specs (I36) and
resending only what is ready (I37)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

CLAIM = "tests/integration/test_claim_inputs.py::test_a_claim_reads_every_transitive_input_in_full_and_stores_its_start"
HOT = "tests/integration/test_hot_path.py"
EVENTS = "tests/unit/test_events.py"
COORD = "tests/unit/test_coordinator.py"
LAYERS = "tests/unit/test_layers.py"
STATEMENTS = "tests/unit/test_statements.py"
SPECS = "tests/unit/test_specs.py"
CANVAS = "tests/unit/test_canvas.py"
STATUS = "tests/unit/test_status_vocabulary.py"
KEEPER = ("tests/unit/test_lease_keeper.py::"
          "test_one_beat_renews_every_held_lease_in_one_statement_and_stops_the_cancelled_calls")
PG, SQLITE = "[postgresql]", "[sqlite]"


def type_checking_import(anchor: str, line: str) -> tuple[str, str]:
    """``anchor`` (an import line) followed by an import only type checkers run — the layer
    rule counts it all the same (``TYPE_CHECKING`` imports are edges of the graph too)."""
    return anchor, f"{anchor}import typing\n\nif typing.TYPE_CHECKING:\n    {line}  # noqa: F401\n"


MUTATIONS: tuple[Mutation, ...] = (
    # I23 — one event shape, stored and published
    mutation(
        "folded-event-keys-reordered", "I23", "storage/sql/postgres.py",
        "    for key, value in data.items():\n",
        "    for key, value in sorted(data.items()):\n",
        tests=(f"{HOT}::test_the_folded_statements_store_what_the_event_builders_make",),
        why="the folded Postgres statements store events whose keys are not in their builder's order"),
    mutation(
        "bus-message-rebuilt", "I23", "orchestrator/core/bus.py",
        "        bus.publish(plan_id, event.message())\n",
        '        bus.publish(plan_id, {"type": event.type, "phase": event.phase_key, **event.data})\n',
        tests=(f"{COORD}::test_a_board_runs_from_its_recorded_canvases_to_a_stored_result",
               f"{COORD}::test_cancel_ends_queued_phases_and_a_running_one_at_its_completion",
               f"{CLAIM}{SQLITE}"),
        why="the bus carries a shape of its own instead of the stored event"),
    mutation(
        "chunk-joined-after-it-was-sent", "I23", "orchestrator/core/bus.py",
        "            if last is not None and last.batch == bus._batch:\n",
        "            if last is not None:\n",
        tests=("tests/integration/test_bus.py::"
               "test_a_phases_text_arrives_whole_in_order_as_chunks_numbered_from_zero",),
        why="text joins a chunk the sender already wrote: watchers never see it"),
    mutation(
        "outbox-record-without-its-id", "I23", "storage/outbox.py",
        "        self._session.flush()\n",
        "",
        tests=(f"{COORD}::test_cancel_ends_queued_phases_and_a_running_one_at_its_completion",),
        why="a repository returns (and the caller publishes) its events before they are stored: "
            "no id, so a watcher cannot resume from them"),
    mutation(
        "builder-drops-a-documented-key", "I23", "storage/event_shapes.py",
        '{**_about(phase, attempt), "worker": worker, "k": k, "n": n}',
        '{**_about(phase, attempt), "k": k, "n": n}',
        tests=(f"{EVENTS}::test_every_event_type_has_the_documented_keys", f"{CLAIM}{PG}", f"{CLAIM}{SQLITE}"),
        why="phase_started no longer carries a key docs/api.md documents"),

    # I24 — one status vocabulary, stored values unchanged
    mutation(
        "stored-status-value-renamed", "I24", "storage/status.py",
        '    SKIPPED = "skipped"\n',
        '    SKIPPED = "skip"\n',
        tests=(f"{STATUS}::test_the_vocabulary_is_what_the_rows_hold",
               f"{STATUS}::test_rows_stored_as_plain_strings_read_back_as_the_vocabulary"),
        why="a status value changes: rows stored before no longer read back"),
    mutation(
        "final-statuses-listed-twice", "I24", "storage/read_models.py",
        "        return self.status in PHASE_FINAL\n",
        '        return self.status in ("completed", "failed", "cancelled")\n',
        tests=(f"{STATUS}::test_rows_stored_as_plain_strings_read_back_as_the_vocabulary",),
        why="a second, hand-written list of final phase statuses drifts from the vocabulary (forgets skipped): "
            "a plan whose last phases were skipped never finishes"),

    # I25 — layers without a loop
    mutation(
        "control-plane-imports-the-runner", "I25", "orchestrator/plan/canvas.py",
        *type_checking_import("from storage.status import PhaseStatus\n", "from tasks.runner import PhaseRunner"),
        tests=(f"{LAYERS}::test_the_control_plane_imports_no_task_code", f"{LAYERS}::test_there_is_no_import_cycle"),
        why="the control plane imports task code (the runner), which imports the control plane back"),
    mutation(
        "storage-imports-the-bus", "I25", "storage/outbox.py",
        *type_checking_import("from storage.read_models import EventRecord, snapshot\n",
                              "from orchestrator.core.bus import Bus"),
        tests=(f"{LAYERS}::test_storage_imports_only_storage", f"{LAYERS}::test_there_is_no_import_cycle"),
        why="storage imports the control plane"),
    mutation(
        "gateway-imports-the-settings", "I25", "orchestrator/gateway/model_gateway.py",
        *type_checking_import(
            "from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Provider, Usage\n",
                              "from orchestrator.core.settings import Settings"),
        tests=(f"{LAYERS}::test_the_model_gateway_is_a_leaf",),
        why="the model gateway is no longer a leaf: it imports the control plane"),

    # I33 — the claim reads the transitive inputs; inputs stored per phase and extended by debates
    mutation(
        "folded-claim-reads-direct-inputs-only", "I33", "storage/sql/postgres.py",
        "select(self.json_elements(claimed.c.inputs).c.value)",
        "select(self.json_elements(claimed.c.depends_on).c.value)",
        tests=(f"{CLAIM}{PG}",),
        why="on Postgres a phase gets only its direct dependencies, not what they were built on"),
    mutation(
        "claim-reads-direct-inputs-only", "I33", "storage/sql/base.py",
        "inputs, texts = self.read_inputs(conn, phase.plan_id, phase.inputs)",
        "inputs, texts = self.read_inputs(conn, phase.plan_id, phase.depends_on)",
        tests=(f"{CLAIM}{SQLITE}",),
        why="on SQLite a phase gets only its direct dependencies, not what they were built on"),
    mutation(
        "expansion-stores-direct-inputs", "I33", "orchestrator/plan/expand.py",
        "dataclasses.replace(p, inputs=inputs[p.key])",
        "dataclasses.replace(p, inputs=list(p.depends_on))",
        tests=("tests/unit/test_prompts.py::test_later_round_turn_reads_the_full_text_of_every_earlier_round",
               f"{CLAIM}{PG}", f"{CLAIM}{SQLITE}"),
        why="phases are stored with their direct dependencies as inputs: a later round sees only the last summary"),
    mutation(
        "debate-inputs-not-extended", "I33", "storage/phases.py",
        "        if ins.rewire in row.inputs:\n",
        "        if False:\n",
        tests=("tests/unit/test_debates.py::"
               "test_stored_debates_rewire_what_waited_for_the_check_and_stay_within_max_debates",),
        why="a debate inserted upstream is waited for but never read: what follows it is prompted without it"),

    # I34 — fixed statement counts
    mutation(
        "inputs-read-one-statement-each", "I34", "storage/sql/base.py",
        'return split_inputs(conn.execute(self._inputs, {"plan_id": plan_id, "keys": list(keys)}).all())',
        'return split_inputs([row for key in keys\n'
        '                             for row in conn.execute(self._inputs, {"plan_id": plan_id, "keys": [key]})])',
        tests=(f"{STATEMENTS}::test_claim_and_completion_cost_the_same_in_any_plan",),
        why="a claim costs one SELECT per input: a synthesis of 19 inputs pays 19"),
    mutation(
        "claim-not-folded", "I34", "storage/phases.py",
        "    if db.sql.folds:\n        with db.statement() as conn:\n            return db.sql.claim(",
        "    if False:\n        with db.statement() as conn:\n            return db.sql.claim(",
        tests=(f"{HOT}::test_claim_usage_and_completion_are_1_1_and_3_statements_in_any_plan",),
        why="a claim on Postgres is a transaction of five statements instead of one"),
    mutation(
        "completion-not-folded", "I34", "storage/sql/postgres.py",
        "        statement, kind = self._complete_fold\n",
        "        return super().complete(conn, plan_id, r, now)\n        statement, kind = self._complete_fold\n",
        tests=(f"{HOT}::test_claim_usage_and_completion_are_1_1_and_3_statements_in_any_plan",),
        why="a completion on Postgres writes content, status, progress and event one statement at a time"),

    # I35 — the heartbeat: every held lease and the cancel flags in one statement
    mutation(
        "heartbeat-one-statement-per-lease", "I35", "storage/phases.py",
        "    with db.statement() as conn:\n        return db.sql.renew(conn, held, utcnow() + lease)\n",
        "    out: dict[str, bool] = {}\n    for h in held:\n        with db.statement() as conn:\n"
        "            out.update(db.sql.renew(conn, [h], utcnow() + lease))\n    return out\n",
        tests=(f"{STATEMENTS}::test_the_lease_heartbeat_is_one_statement_for_every_held_lease", KEEPER),
        why="a worker running N phases sends N heartbeat statements per beat"),
    mutation(
        "heartbeat-renews-only-the-first-lease", "I35", "storage/sql/base.py",
        '{"held": [tuple(h) for h in held], "expires": expires}',
        '{"held": [tuple(h) for h in held[:1]], "expires": expires}',
        tests=(f"{STATEMENTS}::test_the_lease_heartbeat_is_one_statement_for_every_held_lease", KEEPER),
        why="only one lease of the process is renewed: its other calls lose their leases mid-call"),
    mutation(
        "keeper-beats-once-per-lease", "I35", "tasks/lease.py",
        "            alive = self._renew([(lease.phase_id, lease.attempt) for lease in held])\n",
        "            alive = {pid: ok for lease in held for pid, ok in self._renew([(lease.phase_id, lease.attempt)])"
        ".items()}\n",
        tests=(KEEPER,),
        why="the lease keeper renews each held lease in a statement of its own"),
    mutation(
        "keeper-never-stops-a-cancelled-call", "I35", "tasks/lease.py",
        "            if not alive.get(lease.phase_id, True):\n                lease.stop()\n",
        "            if not alive.get(lease.phase_id, True):\n                pass\n",
        tests=(KEEPER,),
        why="the heartbeat learns the plan was cancelled, and the call goes on anyway"),

    # I36 — a stored spec is immutable: parsed once per plan and process, bounded LRU
    mutation(
        "spec-not-cached", "I36", "tasks/plan_cache.py",
        "                    self._plans[plan_id] = plan\n",
        "                    self._plans.pop(plan_id, None)\n",
        tests=(f"{SPECS}::test_a_plan_is_loaded_once_however_many_phases_ask_at_once",
               f"{STATEMENTS}::test_claim_and_completion_cost_the_same_in_any_plan"),
        why="every claim reads and parses its plan's spec again"),
    mutation(
        "spec-cache-drops-the-newest", "I36", "tasks/plan_cache.py",
        "self._plans.popitem(last=False)",
        "self._plans.popitem(last=True)",
        tests=(f"{SPECS}::test_the_least_recently_used_plan_is_dropped_past_the_bound",),
        why="past the bound the plan just loaded is dropped, not the least recently used"),
    mutation(
        "spec-cache-is-fifo", "I36", "tasks/plan_cache.py",
        "            self._plans.move_to_end(plan_id)\n",
        "            pass\n",
        tests=(f"{SPECS}::test_the_least_recently_used_plan_is_dropped_past_the_bound",),
        why="a plan in use is dropped because it was loaded first: its next claim reads the spec again"),

    # I37 — resend only what has been READY and unclaimed for requeue_after
    mutation(
        "resend-phases-marked-long-ago", "I37", "orchestrator/plan/dag.py",
        "stale = p.enqueued_at is not None and p.enqueued_at < cutoff and (since is None or since < cutoff)",
        "stale = p.enqueued_at is not None and p.enqueued_at < cutoff",
        tests=(f"{CANVAS}::test_a_marked_phase_is_resent_only_once_it_has_been_ready_for_requeue_after",),
        why="a phase waiting in a big canvas for its inputs is re-sent because it was marked long ago"),
    mutation(
        "stalled-counts-marks-not-readiness", "I37", "storage/plans.py",
        "                       or_(Phase.enqueued_at.is_(None), Phase.enqueued_at < cutoff),\n"
        "                       db.sql.ready_since_cutoff(cutoff)))",
        "                       or_(Phase.enqueued_at.is_(None), Phase.enqueued_at < cutoff)))",
        tests=(f"{COORD}::test_the_reconciler_resends_a_phase_only_once_it_has_been_ready_and_unclaimed_for_"
               "requeue_after",),
        why="the reconciler re-derives a plan whose phases wait, marked long ago, for inputs still running"),
    mutation(
        "resent-head-leaves-its-downstream", "I37", "orchestrator/plan/canvas.py",
        "            carried = any(d.key in broken for d in known)\n",
        "            carried = False\n",
        tests=(f"{CANVAS}::test_phases_an_earlier_canvas_carries_are_left_to_it_unless_that_canvas_is_broken",),
        why="a re-sent head goes alone: what its broken canvas would have triggered waits for the reconciler"),
    mutation(
        "orphan-marks-kept", "I37", "orchestrator/plan/canvas.py",
        "    return [p for p in phases if p.key in seen and p.key not in carried and p.enqueued_at is not None]\n",
        "    return []\n",
        tests=(f"{CANVAS}::test_phases_an_earlier_canvas_carries_are_left_to_it_unless_that_canvas_is_broken",),
        why="downstream phases of a broken canvas keep their marks: the next advance does not send them"),
)
