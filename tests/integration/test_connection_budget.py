"""A process's database connections are a budget of its own (``CONCLAVE_DATABASE_POOL_SIZE`` +
``CONCLAVE_DATABASE_MAX_OVERFLOW``), not one per thread: a phase holds a connection only for a
statement, never across its model call, so a fleet of many threads needs few connections,
and a thread that finds none free waits for one (``CONCLAVE_DATABASE_POOL_TIMEOUT``) instead
of failing. Measured in stored state and in ``pg_stat_activity``, never in time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus
from orchestrator.core.settings import Settings
from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec
from orchestrator.plan.canvas import Advance, Chain, Run, Step
from storage import Database, connect, plans
from tasks.lease import Lease
from tasks.runner import PhaseRunner
from tests.conftest import PG_ADMIN, ROOT
from tests.integration.durability import board_plan

NAMES = ["Ada", "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Grete", "Hiro"]


class Watched:
    """The offline model, noting how many of the pool's connections are checked out when it is
    called and at every chunk it streams (one process, no heartbeat thread: only the phase's)."""

    def __init__(self, db: Database) -> None:
        self.inner = OfflineProvider()
        self.db = db
        self.seen: list[int] = []

    def out(self) -> int:
        return int(self.db.engine.pool.checkedout())  # type: ignore[attr-defined]

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[Any]:
        self.seen.append(self.out())
        for event in self.inner.stream(spec, request):
            self.seen.append(self.out())
            yield event

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        self.seen.append(self.out())
        return self.inner.complete(spec, request)


def test_a_plan_runs_on_one_connection_and_no_model_call_holds_one(clean_db: str) -> None:
    """A board and a team (with its debate) run to the end in this process on a pool of one
    connection and no overflow: no step takes a second connection while holding one (it would
    wait for itself), and every model call runs with none checked out."""
    settings = Settings(database_url=clean_db, offline_latency=0.0, models=ROOT / "examples" / "models.yaml",
                        db_retry_seconds=0)  # a step that waits for a second connection fails at once
    db = connect(clean_db, pool_size=1, max_overflow=0, pool_timeout=5)
    try:
        model = Watched(db)
        dispatcher = RecordingDispatcher()
        coordinator = Coordinator(db, settings, dispatcher, MemoryBus())
        runner = PhaseRunner(db, settings, MemoryBus(), {"offline": model})

        def run(plan_id: str, step: Step) -> None:
            if isinstance(step, Run):
                work = runner.claim(step.phase_id, owner="budget:1:one", plan_id=plan_id)
                if work is not None:
                    runner.execute(work, Lease(step.phase_id, work.attempt))
            elif isinstance(step, Advance):
                coordinator.advance(plan_id)
            else:
                for s in step.steps if isinstance(step, Chain) else step.lanes:
                    run(plan_id, s)

        team = yaml.safe_load((ROOT / "examples" / "team.yaml").read_text())
        ids = [coordinator.submit(board_plan("one connection", experts=3, rounds=2)).plan_id,
               coordinator.submit(team).plan_id]
        while canvases := dispatcher.take():
            for canvas in canvases:
                run(canvas.plan_id, canvas.root)
        for plan_id in ids:
            state = plans.load_state(db, plan_id)
            assert state.plan.status == "completed"
            assert {p.status for p in state.phases} == {"completed"}
        assert any(p.kind == "debate" for p in plans.load_state(db, ids[1]).phases)
        assert len(model.seen) > 20 and set(model.seen) == {0}
    finally:
        db.dispose()


def wide_board(i: int) -> dict[str, Any]:
    """Eight experts speaking at once: a burst of parallel phases."""
    doc = board_plan(f"budget burst {i}", experts=1, rounds=2, latency=0.0, words=20)
    doc["experts"] = [{"name": name, "role": "Analyst"} for name in NAMES]
    return doc


class Sampler:
    """The connections to one database, counted in ``pg_stat_activity`` from the admin
    database (not counted itself) until stopped; ``peak`` is the most seen at once."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.peak = 0
        self._stop = threading.Event()
        self._engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT", pool_size=1)
        self._thread = threading.Thread(target=self._run, name="pg_stat_activity", daemon=True)
        with self._engine.connect() as c:
            self.max_connections = int(c.execute(text("SHOW max_connections")).scalar_one())

    def count(self) -> int:
        with self._engine.connect() as c:
            return int(c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = :d"),
                                 {"d": self.database}).scalar_one())

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.count())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._engine.dispose()


@pytest.mark.timeout(180)
def test_eight_workers_of_32_threads_stay_within_their_budget_well_under_max_connections(
        settings: Any, workers: Any, client: Any, tmp_path: Path) -> None:
    """32 phases in flight per worker share two connections (the small pool: no overflow), so
    threads queue for them; the fleet holds 8 x 2 and the client its default 4 + 2."""
    fleet_settings = settings.model_copy(update={"concurrency": 32, "database_pool_size": 2,
                                                 "database_max_overflow": 0})
    database = str(make_url(settings.database_url).database)
    with Sampler(database) as sampler:
        fleet = workers.many(8, settings=fleet_settings, concurrency=32)
        ids = [client.submit(wide_board(i)) for i in range(16)]
        views = [client.wait(plan_id, timeout=120) for plan_id in ids]
    assert [v.status for v in views] == ["completed"] * len(ids), [v.error for v in views]
    assert all(p.status == "completed" for v in views for p in v.phases)
    # 8 x 2 + (4 + 2), where one connection per thread would be 8 x (32 + 2) + …
    budget = len(fleet) * 2 + settings.database_pool_size + settings.database_max_overflow
    assert sampler.peak <= budget < sampler.max_connections // 2, (sampler.peak, budget)
    print(f"peak connections {sampler.peak} (budget {budget}, max_connections {sampler.max_connections})")
    for w in fleet:  # threads that found no free connection waited for one: no retry, no error
        w.stop()
        log = w.log()
        assert "db.retry" not in log and "QueuePool limit" not in log and "Traceback" not in log, w.name
