"""Tenants in storage, on Postgres and SQLite: task ids are scoped to their tenant, a
reference is resolved deterministically (plan-id shaped → plan ids only), the
active-plan cap and the submit rate hold per tenant — also under racing submissions
from many engines (Postgres) — and submit, cancel and resume record who did them."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from orchestrator.core.errors import InvalidPlan, PlanConflict, SubmitRateLimited
from storage import Database, connect, outbox, plans
from storage.exceptions import CapacityExceeded, Conflict, NotFound, RateLimited
from storage.identity import Principal
from storage.models import Plan
from storage.read_models import NewPhase
from tests.integration.durability import board_plan

ACME = Principal("a1a1a1a1a1a1a1a1", "acme ci", "acme", ("plans:read", "plans:write"))
GLOBEX = Principal("b2b2b2b2b2b2b2b2", "globex ci", "globex", ("plans:write",))
PHASES = [NewPhase(key="only", kind="expert", position=0, depends_on=[])]


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest) -> Iterator[Database]:
    if request.param == "postgresql":
        url = request.getfixturevalue("clean_db")
    else:
        url = request.getfixturevalue("sqlite_url")
    database = connect(url)
    yield database
    database.dispose()


def create(db: Database, tenant: str, *, task_id: str | None = None, title: str = "t", max_active: int = 100,
           submit_rate: int = 0, principal: Principal | None = None) -> tuple[str, bool]:
    created = plans.create_plan(db, title=title, kind="board", spec={"title": title}, phases=PHASES,
                                task_id=task_id, max_active=max_active, tenant=tenant, principal=principal,
                                submit_rate=submit_rate)
    return created.plan_id, created.created


def backdate(db: Database, plan_ids: list[str], seconds: float) -> None:
    with db.engine.begin() as c:
        for pid in plan_ids:
            created = c.execute(select(Plan.created_at).where(Plan.id == pid)).scalar_one()
            c.execute(update(Plan).where(Plan.id == pid).values(created_at=created - timedelta(seconds=seconds)))


# ------------------------------------------------------------------ ids and lookups


def test_task_ids_are_scoped_to_their_tenant(db: Database) -> None:
    acme, created = create(db, "acme", task_id="crm:42")
    globex, _ = create(db, "globex", task_id="crm:42")
    assert created and acme != globex
    assert create(db, "acme", task_id="crm:42") == (acme, False)  # idempotent within the tenant
    with pytest.raises(Conflict, match="different plan"):
        create(db, "acme", task_id="crm:42", title="another plan")
    assert plans.resolve(db, "crm:42", tenant="acme") == acme
    assert plans.resolve(db, "crm:42", tenant="globex") == globex
    with pytest.raises(Conflict, match="acme, globex"):  # the operator must use the plan id
        plans.resolve(db, "crm:42")
    with pytest.raises(NotFound):  # another tenant's plan is not found, by id or by task id
        plans.resolve(db, acme, tenant="globex")
    with pytest.raises(NotFound):
        plans.resolve(db, "crm:42", tenant="initech")
    assert plans.get_plan(db, acme).tenant == "acme"


def test_a_plan_id_shaped_reference_only_ever_finds_a_plan_id(db: Database) -> None:
    """Even a row whose task_id is shaped like another plan's id (stored before the
    schema refused such task ids) cannot capture lookups of that id."""
    victim, _ = create(db, "acme")
    squatter, _ = create(db, "acme", task_id=victim)  # bypasses the schema, as an old row would
    other_shape = victim.replace("-", "").upper()
    impostor, _ = create(db, "acme", task_id=other_shape)
    for ref in (victim, victim.upper(), other_shape, "{" + victim + "}", f"urn:uuid:{victim}"):
        assert plans.resolve(db, ref) == victim
        assert plans.resolve(db, ref, tenant="acme") == victim
    assert squatter != victim and impostor != victim
    unknown = str(uuid.uuid4())
    with pytest.raises(NotFound, match="no plan with id"):
        plans.resolve(db, unknown)


# ------------------------------------------------------------------ limits


def test_the_cap_is_per_tenant(db: Database) -> None:
    for i in range(2):
        create(db, "acme", max_active=2, title=f"a{i}")
    with pytest.raises(CapacityExceeded, match="2 plans are active, the limit is 2 per tenant"):
        create(db, "acme", max_active=2)
    create(db, "globex", max_active=2)  # another tenant is not affected


def test_the_submit_rate_is_per_tenant_and_says_when_to_retry(db: Database) -> None:
    first, _ = create(db, "acme", submit_rate=2, title="1")
    second, _ = create(db, "acme", submit_rate=2, title="2")
    with pytest.raises(RateLimited) as info:
        create(db, "acme", submit_rate=2, title="3")
    assert 55 <= info.value.retry_after <= 60 and "CONCLAVE_SUBMIT_RATE" in str(info.value)
    create(db, "globex", submit_rate=2)  # another tenant has its own budget
    backdate(db, [first], 50)  # the oldest leaves the window in about 10 s
    with pytest.raises(RateLimited) as info:
        create(db, "acme", submit_rate=2, title="3")
    assert 8 <= info.value.retry_after <= 11
    backdate(db, [first], 15)  # now it has left: one slot is free, and only one
    create(db, "acme", submit_rate=2, title="3")
    with pytest.raises(RateLimited):
        create(db, "acme", submit_rate=2, title="4")
    assert second


def test_an_idempotent_resubmission_is_never_rate_limited(db: Database) -> None:
    pid, _ = create(db, "acme", task_id="job-1", submit_rate=1)
    assert create(db, "acme", task_id="job-1", submit_rate=1) == (pid, False)


def _race(url: str, tenants: list[str], per_tenant: int, **limits: int) -> dict[str, list[str]]:
    """Submit ``per_tenant`` plans for each tenant at once, each from its own engine (as
    separate API processes would). Returns the outcomes per tenant."""
    barrier = threading.Barrier(len(tenants) * per_tenant)
    outcomes: dict[str, list[str]] = {t: [] for t in tenants}
    lock = threading.Lock()

    def submit(tenant: str, i: int) -> None:
        database = connect(url, pool_size=1)
        try:
            barrier.wait()
            create(database, tenant, title=f"{tenant}-{i}", **limits)
            result = "created"
        except RateLimited as exc:
            result = f"rate_limited:{0 < exc.retry_after <= 60}"
        except CapacityExceeded:
            result = "capacity_exceeded"
        finally:
            database.dispose()
        with lock:
            outcomes[tenant].append(result)

    threads = [threading.Thread(target=submit, args=(t, i)) for t in tenants for i in range(per_tenant)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


def count(db: Database, tenant: str) -> int:
    with db.engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(Plan).where(Plan.tenant == tenant)).scalar_one())


def test_per_tenant_cap_holds_under_racing_submissions(clean_db: str) -> None:
    outcomes = _race(clean_db, ["acme", "globex"], 10, max_active=3)
    for tenant, results in outcomes.items():
        assert sorted(results) == ["capacity_exceeded"] * 7 + ["created"] * 3, (tenant, results)
    db = connect(clean_db)
    assert (count(db, "acme"), count(db, "globex")) == (3, 3)
    db.dispose()


def test_per_tenant_rate_limit_holds_under_racing_submissions(clean_db: str) -> None:
    outcomes = _race(clean_db, ["acme", "globex"], 10, submit_rate=4)
    for tenant, results in outcomes.items():
        assert sorted(results) == ["created"] * 4 + ["rate_limited:True"] * 6, (tenant, results)
    db = connect(clean_db)
    assert (count(db, "acme"), count(db, "globex")) == (4, 4)
    db.dispose()


# ------------------------------------------------------------------ the coordinator and audit


def test_submit_records_the_principal_and_cancel_and_resume_record_the_actor(db: Database) -> None:
    pid, _ = create(db, "acme", principal=ACME)
    submitted = [e for e in outbox.list_events(db, pid) if e.type == "plan_submitted"]
    assert submitted[0].data["principal"] == {"id": ACME.id, "name": ACME.name}
    assert submitted[0].data["tenant"] == "acme"
    plans.reopen(db, pid, retry_failed=False, actor=GLOBEX)
    plans.request_cancel(db, pid, actor=ACME)
    plans.reopen(db, pid, retry_failed=True)  # the operator (no principal) is recorded as such
    audit = [(e.type, e.data.get("actor")) for e in outbox.list_events(db, pid)
             if e.type in ("resume_requested", "cancel_requested")]
    assert audit == [("resume_requested", GLOBEX.audit()), ("cancel_requested", ACME.audit()),
                     ("resume_requested", None)]


def test_the_coordinator_submits_into_the_principals_tenant(client: Any) -> None:
    mine = client.local.coordinator.submit(board_plan("acme's", task_id="crm:7"), principal=ACME)
    theirs = client.local.coordinator.submit(board_plan("globex's", task_id="crm:7"), principal=GLOBEX)
    operators = client.local.coordinator.submit(board_plan("the operator's", task_id="crm:7"))
    assert len({mine.plan_id, theirs.plan_id, operators.plan_id}) == 3
    assert [client.local.reads.get_plan(r.plan_id).tenant for r in (mine, theirs, operators)] == \
        ["acme", "globex", "default"]
    with pytest.raises(PlanConflict):  # the operator's task-id lookup is ambiguous: it says so
        client.local.reads.get_plan("crm:7")
    with pytest.raises(InvalidPlan) as info:  # a task id that would shadow a plan id
        client.local.coordinator.submit(board_plan("takeover", task_id=mine.plan_id), principal=GLOBEX)
    assert [d["field"] for d in info.value.details] == ["task_id"]


def test_the_coordinator_answers_a_rate_limit_with_retry_after(client: Any, settings: Any) -> None:
    from orchestrator.client.conclave import Conclave

    limited = Conclave(settings.model_copy(update={"submit_rate": 1}), worker=False)
    try:
        limited.local.coordinator.submit(board_plan("first"), principal=ACME)
        with pytest.raises(SubmitRateLimited) as info:
            limited.local.coordinator.submit(board_plan("second"), principal=ACME)
        assert info.value.http_status == 429 and info.value.code == "plan.rate_limited"
        assert 1 <= info.value.retry_after <= 60 and info.value.details == {"retry_after": info.value.retry_after}
        limited.local.coordinator.submit(board_plan("globex"), principal=GLOBEX)
    finally:
        limited.close()
