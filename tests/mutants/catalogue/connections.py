"""Mutations of how a process holds its database connections (I59, I60): nothing outlives a
transaction on a server connection behind PgBouncer, and a process holds its budget of
connections, never one across a model call."""

from __future__ import annotations

from tests.mutants.catalogue_types import Mutation, mutation

PGBOUNCER = "tests/integration/test_pgbouncer.py"
BUDGET = "tests/integration/test_connection_budget.py"
SETTINGS = "tests/unit/test_settings.py"

MUTATIONS: tuple[Mutation, ...] = (
    mutation(
        "prepared-behind-pgbouncer", "I59", "storage/db.py",
        '            connect_args["prepare_threshold"] = None\n',
        '            connect_args["prepare_threshold"] = 0\n',
        tests=(f"{PGBOUNCER}::test_a_statement_run_often_still_runs_when_pgbouncer_moves_its_connection[pgbouncer]",),
        why="psycopg prepares statements on the server behind PgBouncer: the next transaction lands on a server "
            "that never saw them, and every phase fails"),
    mutation(
        "pool-ignores-its-budget", "I60", "storage/db.py",
        "            max_overflow=max_overflow,\n",
        "            max_overflow=max(2, pool_size // 4) + 30,\n",
        tests=(f"{SETTINGS}::test_a_process_holds_its_connection_budget_whatever_its_concurrency",),
        why="a process opens connections past its budget at a peak: a fleet's sum passes max_connections"),
    mutation(
        "model-call-holds-a-connection", "I60", "tasks/runner.py",
        "                completion = gateway.call(spec, request, on_text=on_text, should_stop=lease.should_stop)\n",
        "                with self.db.statement():\n"
        "                    completion = gateway.call(spec, request, on_text=on_text,\n"
        "                                              should_stop=lease.should_stop)\n",
        tests=(f"{BUDGET}::test_a_plan_runs_on_one_connection_and_no_model_call_holds_one",),
        why="a phase holds a connection for the seconds its model takes: connections per worker become one per "
            "thread again"),
)
