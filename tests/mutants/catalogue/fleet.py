"""Mutations of the fleet's self-healing (I48): every worker sweeps, one at a time across
the fleet, under a lock that dies with its holder."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

HOUSEKEEPING = "tests/integration/test_housekeeping.py"

MUTATIONS: tuple[Mutation, ...] = (
    mutation(
        "sweeps-not-exclusive", "I48", "storage/locks.py",
        "        yield bool(conn.scalar(select(func.pg_try_advisory_xact_lock(lock_key(name)))))\n",
        "        yield True\n",
        tests=(f"{HOUSEKEEPING}::test_one_sweep_at_a_time_and_a_dead_holder_is_taken_over_at_once",),
        why="every worker sweeps at once: the fleet's recovery work is done N times over"),
    mutation(
        "lock-outlives-its-sweep", "I48", "storage/locks.py",
        "pg_try_advisory_xact_lock(lock_key(name))",
        "pg_try_advisory_lock(lock_key(name))",
        tests=(f"{HOUSEKEEPING}::test_one_sweep_at_a_time_and_a_dead_holder_is_taken_over_at_once",),
        why="the lock stays with the pooled connection after a sweep: one worker sweeps forever, the others never"),
    mutation(
        "stalled-holder-keeps-the-lock", "I48", "storage/locks.py",
        '        conn.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = '
        '{max(1, int(stalled_after * 1000))}"))\n',
        "",
        tests=(f"{HOUSEKEEPING}::test_a_holder_that_stops_without_dying_loses_the_lock",),
        why="a worker stopped mid-sweep (SIGSTOP, a pause) keeps the lock, and no other worker ever reconciles"),
    mutation(
        "housekeeper-never-started", "I48", "tasks/runtime.py",
        "    rt.housekeeper.start()\n",
        "",
        tests=(f"{HOUSEKEEPING}::test_a_worker_without_beat_recovers_a_plan_the_broker_lost",),
        why="recovery needs a beat process again: without one, a lost message stalls its plan for good"),
)
