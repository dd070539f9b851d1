"""A plan found by a unique prefix of its id, on Postgres and SQLite: any case, hyphens
optional; a prefix several plans share is refused naming them; another tenant's plans
neither match nor make a prefix ambiguous; an exact task id wins over a prefix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import AmbiguousPlan, PlanNotFound
from storage import Database, connect, plans
from storage.exceptions import Ambiguous, NotFound
from storage.identity import Principal
from storage.read_models import NewPhase

PHASES = [NewPhase(key="only", kind="expert", position=0, depends_on=[])]
A1 = "abcd1234-1111-4000-8000-000000000001"
A2 = "abcd1234-2222-4000-8000-000000000002"
G1 = "abcd9999-3333-4000-8000-000000000003"
G2 = "feed0000-4444-4000-8000-000000000004"
TASKED = "beefcafe-5555-4000-8000-000000000005"


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    url = request.getfixturevalue("clean_db" if request.param == "postgresql" else "sqlite_url")
    database = connect(url)
    ids = iter([A1, A2, G1, G2, TASKED, "00000000-6666-4000-8000-000000000006"])
    monkeypatch.setattr(plans, "new_plan_id", lambda: next(ids))  # ids chosen to share prefixes
    for tenant in ("acme", "acme", "globex", "globex", "acme"):
        plans.create_plan(database, title="t", kind="board", spec={"title": "t"}, phases=PHASES, task_id=None,
                          max_active=100, tenant=tenant)
    plans.create_plan(database, title="t", kind="board", spec={"title": "t"}, phases=PHASES, task_id="beefcafe",
                      max_active=100, tenant="acme")  # a task id that is also a prefix of TASKED
    yield database
    database.dispose()


def test_a_unique_prefix_finds_its_plan_in_any_case_with_or_without_hyphens(db: Database) -> None:
    assert plans.resolve(db, "abcd1234-1") == A1
    assert plans.resolve(db, "ABCD12341") == A1
    assert plans.resolve(db, "abcd12342222", tenant="acme") == A2
    assert plans.resolve(db, "feed") == G2


def test_a_shared_prefix_names_every_plan_that_shares_it(db: Database) -> None:
    with pytest.raises(Ambiguous) as everyone:
        plans.resolve(db, "abcd")  # the operator reaches every tenant
    assert everyone.value.candidates == [A1, A2, G1]
    assert all(i in str(everyone.value) for i in (A1, A2, G1)) and "give more of the id" in str(everyone.value)
    with pytest.raises(Ambiguous) as acme:
        plans.resolve(db, "abcd1234", tenant="acme")
    assert acme.value.candidates == [A1, A2]


def test_a_prefix_never_reaches_into_another_tenant(db: Database) -> None:
    assert plans.resolve(db, "abcd", tenant="globex") == G1  # acme's two do not make it ambiguous
    with pytest.raises(NotFound):
        plans.resolve(db, "feed", tenant="acme")
    with pytest.raises(NotFound):
        plans.resolve(db, "abcd9", tenant="acme")


def test_an_exact_task_id_wins_over_a_prefix_and_short_refs_are_task_ids_only(db: Database) -> None:
    tasked = plans.resolve(db, "beefcafe", tenant="acme")
    assert tasked != TASKED and plans.get_plan(db, tasked).task_id == "beefcafe"
    assert plans.resolve(db, "beefcafe-5") == TASKED
    with pytest.raises(NotFound) as short:
        plans.resolve(db, "abc")  # three digits: not a prefix, and no such task id
    assert str(short.value) == "no plan with task_id 'abc' (an id prefix needs at least 4 characters)"
    with pytest.raises(NotFound) as named:
        plans.resolve(db, "nightly")  # a task id nobody gave: no word about prefixes
    assert str(named.value) == "no plan with task_id 'nightly'"


def test_the_read_side_names_the_field_and_the_candidates(db: Database) -> None:
    reads = PlanReads(db)
    acme = Principal("a1a1a1a1a1a1a1a1", "acme ci", "acme", ("plans:read",))
    with pytest.raises(AmbiguousPlan) as exc:
        reads.view("abcd", principal=acme)
    assert exc.value.code == "plan.ambiguous" and exc.value.http_status == 409
    assert A1 in exc.value.message and A2 in exc.value.message and G1 not in exc.value.message
    assert exc.value.details[0]["field"] == "plan_id"
    assert reads.view("abcd9", principal=None).id == G1
    with pytest.raises(PlanNotFound):
        reads.view("abcd9", principal=acme)
