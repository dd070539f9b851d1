"""Every lock and limit holds between real processes, not only between the engines of one:
the housekeeping sweep (one at a time across the fleet), the per-tenant active-plan cap
and submit rate (admissions from different processes: repository calls, then two
``conclave api`` servers), the resume guard, and a tenant's monthly budget (reservations
from different worker processes).

Each contender is its own Python process (:mod:`tests.e2e.contender`) with its own
``PYTHONHASHSEED``, so a lock keyed by anything computed per process — Python's salted
``hash()``, a pid, an object id — stops excluding and these tests fail. Admissions are
raced deterministically: the first contender's ``INSERT INTO plans`` is held at a gate
(a statement-level trigger that waits for an advisory lock the test holds) while it holds
the tenant's lock; the second must wait for it and then be refused. Reservations the same
way, held at their ``INSERT INTO reservations``.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, text
from sqlalchemy import select as sql_select

from storage import Database, connect, plans
from storage.models import Plan
from storage.read_models import NewPhase
from tests.conftest import ROOT
from tests.e2e.test_api import api, board  # noqa: F401  (api: the API server fixture)
from tests.statement_gate import StatementGate, statement_gate

READ_TIMEOUT = 30.0


class Contender:
    """``python -m tests.e2e.contender ...`` with its own hash seed and application name."""

    def __init__(self, mode: str, url: str, *args: str, seed: int, app: str | None = None) -> None:
        self.app = app or f"contender-{uuid.uuid4().hex[:8]}"
        sep = "&" if "?" in url else "?"
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.contender", mode, f"{url}{sep}application_name={self.app}", *args],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def line(self, timeout: float = READ_TIMEOUT) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise AssertionError(f"{self.app}: no output within {timeout}s")
        out = self.proc.stdout.readline().strip()
        if not out:
            assert self.proc.stderr is not None
            raise AssertionError(f"{self.app} ended without output: {self.proc.stderr.read()}")
        return out

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def outcome(self) -> str:
        out = self.line()
        self.proc.wait(READ_TIMEOUT)
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture()
def contenders() -> Iterator[list[Contender]]:
    started: list[Contender] = []
    yield started
    for c in started:
        c.stop()


@pytest.fixture()
def pg(clean_db: str) -> Iterator[Database]:
    database = connect(clean_db, pool_size=4)
    yield database
    database.dispose()


def _waits_for_a_lock(db: Database, app: str) -> bool:
    with db.engine.connect() as c:
        return bool(c.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = :app AND wait_event_type = 'Lock'"), {"app": app}).scalar())


def _until(predicate: Any, what: str, timeout: float = READ_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture()
def gate(pg: Database) -> Iterator[StatementGate]:
    """Holds the ``INSERT INTO plans`` of the first admission: it has been admitted and still
    holds its tenant's lock."""
    with statement_gate(pg, name="admit-gate", event="INSERT") as held:
        yield held


def _running(db: Database, tenant: str) -> int:
    with db.engine.connect() as c:
        return int(c.execute(sql_select(func.count()).select_from(Plan)
                             .where(Plan.tenant == tenant, Plan.status == "running")).scalar_one())


def test_one_sweep_at_a_time_across_processes(clean_db: str, contenders: list[Contender]) -> None:
    holder = Contender("sweep", clean_db, "hold", seed=1)
    contenders.append(holder)
    assert holder.line() == "inside"  # the first process is sweeping, holding the lock
    for seed in (2, 3):
        other = Contender("sweep", clean_db, seed=seed)
        contenders.append(other)
        assert other.outcome() == "skipped", f"a second process (seed {seed}) swept while the first one was"
    holder.go()
    assert holder.outcome() == "swept"
    after = Contender("sweep", clean_db, seed=4)  # the lock went with the first sweep
    contenders.append(after)
    assert (after.line(), after.outcome()) == ("inside", "swept")


@pytest.mark.parametrize(("limits", "refusal"), [
    (("1", "0"), "capacity_exceeded"),  # one active plan per tenant, no rate limit
    (("100", "1"), "rate_limited"),  # one submission per minute, no practical cap
], ids=["active-plan-cap", "submit-rate"])
def test_a_tenants_limit_holds_across_processes(clean_db: str, pg: Database, gate: StatementGate,
                                                contenders: list[Contender], limits: tuple[str, str],
                                                refusal: str) -> None:
    url = clean_db
    first = Contender("submit", url, "acme", *limits, seed=1, app=gate.app)
    contenders.append(first)
    _until(lambda: _waits_for_a_lock(pg, gate.app), "the first admission to be held at its insert")

    other_tenant = Contender("submit", url, "globex", *limits, seed=3)  # tenants do not wait for each other
    contenders.append(other_tenant)
    assert other_tenant.outcome() == "created"

    second = Contender("submit", url, "acme", *limits, seed=2)
    contenders.append(second)
    _until(lambda: second.proc.poll() is not None or _waits_for_a_lock(pg, second.app),
           "the second admission to wait for the tenant's lock (or to get past it)")
    gate.open()
    assert first.outcome() == "created"
    assert second.outcome() == refusal, "two processes were both admitted past one tenant's limit"
    assert _running(pg, "acme") == 1 and _running(pg, "globex") == 1


def test_one_resume_guard_between_processes(clean_db: str, pg: Database, contenders: list[Contender]) -> None:
    created = plans.create_plan(pg, title="resumed", kind="board", spec={"title": "resumed"}, task_id=None,
                                phases=[NewPhase(key="only", kind="expert", position=0, depends_on=[])],
                                max_active=10)
    racers = [Contender("resume", clean_db, created.plan_id, f"owner-{i}", seed=i) for i in range(1, 4)]
    contenders.extend(racers)
    for r in racers:
        assert r.line() == "ready"
    for r in racers:
        r.go()
    assert sorted(r.outcome() for r in racers) == ["busy", "busy", "guard"]
    late = Contender("resume", clean_db, created.plan_id, "owner-late", seed=9)
    contenders.append(late)
    assert late.line() == "ready"
    late.go()
    assert late.outcome() == "busy"  # the guard is stored: a process that starts later sees it too


@pytest.mark.parametrize(("env", "code"), [
    ({"CONCLAVE_MAX_ACTIVE_PLANS": "1"}, "plan.capacity_exceeded"),
    ({"CONCLAVE_SUBMIT_RATE": "1"}, "plan.rate_limited"),
], ids=["active-plan-cap", "submit-rate"])
def test_two_api_processes_admit_one_plan_past_a_limit(api: Any, settings: Any, pg: Database, gate: StatementGate,  # noqa: F811
                                                       env: dict[str, str], code: str) -> None:
    """The same race through two ``conclave api`` processes: the first one's submission is
    held at its insert (admitted, the tenant's lock held), the second must wait, then be refused."""
    first = api(env=env, settings_=settings.model_copy(update={"database_url": _named(settings.database_url,
                                                                                      gate.app)}))
    second_app = f"api-b-{uuid.uuid4().hex[:8]}"
    second = api(env=env, settings_=settings.model_copy(update={"database_url": _named(settings.database_url,
                                                                                       second_app)}))
    answers: dict[str, httpx.Response] = {}

    def submit(name: str, url: str) -> None:
        answers[name] = httpx.post(f"{url}/v1/plans", json=board(title=f"via {name}"), timeout=60)

    held = threading.Thread(target=submit, args=("first", first.url))
    held.start()
    try:
        _until(lambda: _waits_for_a_lock(pg, gate.app), "the first API's insert to be held")
        racing = threading.Thread(target=submit, args=("second", second.url))
        racing.start()
        _until(lambda: "second" in answers or _waits_for_a_lock(pg, second_app),
               "the second API's admission to wait for the tenant's lock (or to get past it)")
    finally:
        gate.open()
        held.join(60)
    racing.join(60)
    assert answers["first"].status_code in (200, 201, 202), answers["first"].text
    assert answers["second"].status_code == 429, "two API processes both admitted a plan past the tenant's limit"
    assert answers["second"].json()["error"]["code"] == code
    with pg.engine.connect() as c:
        assert c.execute(sql_select(func.count()).select_from(Plan)).scalar_one() == 1


def _named(url: str, app: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={app}"


def test_a_tenants_month_holds_between_two_reserving_processes(clean_db: str, pg: Database,
                                                               contenders: list[Contender]) -> None:
    """Two worker processes reserve a call against one tenant's month that fits only one:
    the first is held at its insert, holding the tenant's spend lock; the second must wait
    for it, then count it and be refused. Another tenant's reservation waits for neither."""
    def plan_of(tenant: str) -> tuple[str, list[str]]:
        created = plans.create_plan(pg, title=f"{tenant} month", kind="team", spec={"title": "t"}, task_id=None,
                                    phases=[NewPhase(key=k, kind="expert", position=i, depends_on=[])
                                            for i, k in enumerate(("a", "b"))], tenant=tenant, max_active=10)
        return created.plan_id, [p.id for p in plans.load_state(pg, created.plan_id).phases]

    (acme, (a, b)), (globex, (g, _)) = plan_of("acme"), plan_of("globex")
    with statement_gate(pg, name="reserve-gate", event="INSERT", table="reservations") as gate:
        first = Contender("reserve", clean_db, acme, a, "acme", "1.0", "1.5", seed=1, app=gate.app)
        contenders.append(first)
        _until(gate.waiting, "the first reservation to be held at its insert")

        other_tenant = Contender("reserve", clean_db, globex, g, "globex", "1.0", "1.5", seed=3)
        contenders.append(other_tenant)
        assert other_tenant.outcome() == "reserved"  # tenants do not wait for each other

        second = Contender("reserve", clean_db, acme, b, "acme", "1.0", "1.5", seed=2)
        contenders.append(second)
        _until(lambda: second.proc.poll() is not None or _waits_for_a_lock(pg, second.app),
               "the second reservation to wait for the tenant's spend lock (or to get past it)")
        gate.open()
        assert first.outcome() == "reserved"
        assert second.outcome() == "refused", "two processes both reserved past one tenant's month"
    with pg.engine.connect() as c:
        held = sorted(c.execute(text("SELECT tenant, phase_id FROM reservations")).all())
    assert held == sorted([("acme", a), ("globex", g)])
