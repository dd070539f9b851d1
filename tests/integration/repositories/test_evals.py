"""The eval repository on both databases: one record per (tenant, name), created once; the same
record again is the stored one, another record under a taken name a Conflict (also when two
creations race); reads are tenant-scoped."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from storage import Database, evals
from storage.exceptions import Conflict, NotFound


def spec(items: int = 2) -> dict[str, Any]:
    return {"format": 1, "name": "arith", "items": [{"id": f"q{i}", "question": "What is 2 + 3?", "answer": 5.0}
                                                    for i in range(items)], "arms": [{"name": "panel"}]}


def test_an_eval_is_created_once_and_the_same_spec_returns_it(db: Database) -> None:
    first = evals.create_eval(db, name="arith", spec=spec(), tenant="acme")
    again = evals.create_eval(db, name="arith", spec=spec(), tenant="acme")
    assert first.created and not again.created
    assert again.eval == first.eval and again.eval.spec == spec()
    assert evals.get_eval(db, "arith", tenant="acme") == first.eval
    with pytest.raises(Conflict, match=r"already exists with a different spec .*items"):
        evals.create_eval(db, name="arith", spec=spec(items=3), tenant="acme")
    assert evals.get_eval(db, "arith", tenant="acme").spec == spec()  # unchanged


def test_names_are_per_tenant_and_reads_stay_in_their_tenant(db: Database) -> None:
    mine = evals.create_eval(db, name="arith", spec=spec(), tenant="acme").eval
    theirs = evals.create_eval(db, name="arith", spec=spec(items=5), tenant="globex").eval
    assert mine.id != theirs.id
    assert evals.get_eval(db, "arith", tenant="globex").spec == spec(items=5)
    with pytest.raises(NotFound):
        evals.get_eval(db, "arith", tenant="initech")
    with pytest.raises(Conflict, match="several tenants"):
        evals.get_eval(db, "arith", tenant=None)  # the operator must say which
    evals.create_eval(db, name="later", spec=spec(), tenant="acme")
    assert [e.name for e in evals.list_evals(db, tenant="acme")] == ["later", "arith"]
    assert {(e.tenant, e.name) for e in evals.list_evals(db, tenant=None)} == {
        ("acme", "arith"), ("globex", "arith"), ("acme", "later")}


def test_racing_creations_store_one_eval_and_refuse_the_other_spec(db: Database) -> None:
    results: list[Any] = []
    barrier = threading.Barrier(4)

    def create(n: int) -> None:
        barrier.wait()
        try:
            results.append(evals.create_eval(db, name="race", spec=spec(items=2 if n % 2 else 9), tenant="acme"))
        except Conflict as exc:
            results.append(exc)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    stored = evals.get_eval(db, "race", tenant="acme")
    created = [r for r in results if not isinstance(r, Conflict) and r.created]
    assert len(created) == 1 and created[0].eval == stored
    # every other caller got the stored eval (the same spec) or a Conflict (the other spec)
    assert all(r.eval == stored for r in results if not isinstance(r, Conflict))
    assert len(results) == 4 and sum(isinstance(r, Conflict) for r in results) == 2
