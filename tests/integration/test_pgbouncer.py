"""Postgres behind PgBouncer in transaction pooling mode (issue 20): each transaction gets
whichever server connection is free, so nothing may live on a server connection across
transactions. psycopg 3 prepares a statement on the server once it has run five times; the
next transaction may land on a server that never saw it (``prepared statement "_pg3_0" does
not exist``). ``CONCLAVE_DATABASE_POOLER=pgbouncer`` prepares nothing; the rest of the code
keeps no session state (transaction-scoped advisory locks, ``SET LOCAL``, no LISTEN, no
temporary tables).

Each test starts its own PgBouncer (:mod:`tests.pgbouncer`) in front of the test's database;
workers, client and reads all go through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from storage import connect, plans
from tests import pgbouncer as bouncer
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not bouncer.available(), reason="pgbouncer is not installed (make pgbouncer)")

#: What a worker's log must never say when its database is healthy.
DATABASE_TROUBLE = re.compile(r"prepared statement|psycopg|sqlalchemy|db\.retry|database unavailable|"
                              r"storage\.(error|unavailable)|Traceback", re.IGNORECASE)


@pytest.fixture()
def pgbouncer(clean_db: str, tmp_path: Path) -> Iterator[bouncer.PgBouncer]:
    # few server connections for many clients, as in production: transactions of one client
    # connection keep landing on different servers
    server = bouncer.PgBouncer(clean_db, tmp_path, pool_size=4).start()
    yield server
    server.stop()


def _count_running(conn: Any) -> int:
    return int(conn.execute(text("SELECT count(*) FROM plans WHERE status = :s"), {"s": "running"}).scalar_one())


@pytest.mark.parametrize("pooler", ["pgbouncer", "none"])
def test_a_statement_run_often_still_runs_when_pgbouncer_moves_its_connection(
        pgbouncer: bouncer.PgBouncer, pooler: str) -> None:
    """One client connection runs a statement six times (psycopg prepares it on the sixth), then
    PgBouncer gives that server to another client and the next transaction another server. With
    the pooler set, the statement runs there too; without it, Postgres has never heard of it."""
    db = connect(pgbouncer.url(), pool_size=2, pooler=pooler)  # type: ignore[arg-type]
    try:
        with db.engine.connect() as one, db.engine.connect() as other:
            backend = one.execute(text("SELECT pg_backend_pid()")).scalar_one()
            one.commit()
            for _ in range(6):
                _count_running(one)
                one.commit()
            with other.begin():  # holds the server `one` last used (PgBouncer reuses the last freed)
                assert other.execute(text("SELECT pg_backend_pid()")).scalar_one() == backend
                if pooler == "none":
                    with pytest.raises(Exception, match=r'prepared statement "_pg3_\d+" does not exist'):
                        _count_running(one)
                    return
                assert _count_running(one) == 0
                assert one.execute(text("SELECT pg_backend_pid()")).scalar_one() != backend  # it did move
            one.commit()
    finally:
        db.dispose()


@pytest.mark.timeout(240)
def test_a_fleet_behind_pgbouncer_runs_a_board_and_a_team_and_the_client_reads_them(
        settings: Any, pgbouncer: bouncer.PgBouncer, workers: Any) -> None:
    from orchestrator.client.conclave import Conclave

    through = settings.model_copy(update={"database_url": pgbouncer.url(), "database_pooler": "pgbouncer",
                                          "models": ROOT / "examples" / "models.yaml", "offline_latency": 0.005})
    fleet = workers.many(3, settings=through)
    client = Conclave(through, worker=False)
    try:
        board = client.submit(ROOT / "examples" / "board.yaml")
        team = client.submit(ROOT / "examples" / "team.yaml")
        views = {name: client.wait(plan_id, timeout=150) for name, plan_id in (("board", board), ("team", team))}
        for name, view in views.items():
            assert view.status == "completed", (name, view.error)
            assert {p.status for p in view.phases} == {"completed"}, name
        assert len(views["board"].phases) == 12
        assert {p.key for p in views["team"].phases} == {  # the registry's stances disagree: a debate
            "growth", "finance", "check-1", "debate-check-1.priya", "debate-check-1.marcus", "rollout", "synthesis"}
        assert "Recommendation:" in client.result(board)
        assert client.result(team)
        for plan_id in (board, team):  # what is stored, read through PgBouncer by the client's own pool
            stored = plans.load_state(client.local.db, plan_id)
            assert stored.plan.status == "completed" and all(p.attempt >= 1 for p in stored.phases)
    finally:
        client.close()
    assert pgbouncer.transactions() > 100  # the fleet's transactions went through PgBouncer
    for w in fleet:
        w.stop()
        troubles = [line for line in w.log().splitlines() if DATABASE_TROUBLE.search(line)]
        assert troubles == [], (w.name, troubles[:5])

