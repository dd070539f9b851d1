"""Issue 8, attacks 1 and 2, below the API: a plan is untrusted input in a cluster.

* Submitting a plan whose model names ``api_key_env: CONCLAVE_DATABASE_URL`` or
  ``base_url: http://169.254.169.254/latest`` is refused naming the field — with and
  without the operator's opt-in to plan-defined models — and nothing is stored.
* A real worker subprocess given a plan-defined model (operator opted in) whose host
  resolves to a refused address never connects to it: the recording listener sees no
  connection and the phase fails with ``llm.egress_refused``. The same worker reaches
  the same listener through an address the operator listed (so the listener is there
  to be reached).
* A plan smuggled into the database past submit (a stored spec naming a Conclave
  variable) is refused again by the worker at call time: no request, no secret sent.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from orchestrator.client.conclave import Conclave
from orchestrator.core.errors import InvalidPlan
from orchestrator.plan.expand import expand
from orchestrator.plan.schema import load_plan
from storage import plans
from storage.models import Plan
from tests.integration.durability import ledger, wait_for
from tests.llm_server import LLMServer

SECRET_DB_URL = "postgresql://conclave:s3cr3t-db-password@db.internal/conclave"
BOARD: dict[str, Any] = {
    "kind": "board", "title": "Trust boundary", "question": "Should we switch to usage-based pricing?",
    "rounds": 1, "moderator": {"name": "Morgan", "role": "Chair", "model": "m"},
    "experts": [{"name": "Dana", "role": "CFO"}],
}


def board(model: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(BOARD)
    doc["models"] = {"m": {"first_chunk_timeout": 2, "idle_timeout": 2, "deadline": 10, "max_retries": 0, **model}}
    return doc


@pytest.fixture()
def listener() -> Iterator[LLMServer]:
    with LLMServer() as server:
        yield server


def stored_plans(c: Conclave) -> int:
    with c.local.db.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(Plan)).scalar_one())


@pytest.mark.parametrize("opted_in", [False, True])
@pytest.mark.parametrize(("model", "field", "words"), [
    ({"provider": "openai", "base_url": "https://api.openai.com/v1", "api_key_env": "CONCLAVE_DATABASE_URL"},
     "api_key_env", "Conclave's own configuration"),
    ({"provider": "openai", "base_url": "https://api.openai.com/v1", "api_key_env": "CONCLAVE_API_TOKEN"},
     "api_key_env", "Conclave's own configuration"),
    ({"provider": "openai", "base_url": "http://169.254.169.254/latest"}, "base_url", "metadata"),
    ({"provider": "openai", "base_url": "http://[fd00:ec2::254]/latest"}, "base_url", "metadata"),
    ({"provider": "ollama", "base_url": "http://metadata.google.internal/computeMetadata/v1"}, "base_url",
     "metadata"),
])
def test_submitting_a_secret_or_metadata_model_is_refused_naming_the_field(
        settings: Any, monkeypatch: pytest.MonkeyPatch, opted_in: bool, model: dict[str, Any], field: str,
        words: str) -> None:
    monkeypatch.setenv("CONCLAVE_DATABASE_URL", SECRET_DB_URL)
    cluster = settings.model_copy(update={"allow_plan_models": opted_in, "allowed_key_envs": ["OPENAI_API_KEY"],
                                          "allowed_base_urls": ["https://api.openai.com/v1"]})
    with Conclave(cluster, worker=False) as c:
        with pytest.raises(InvalidPlan) as info:
            c.submit(board(model))
        err = info.value
        fields = [d["field"] for d in err.details]
        if opted_in:
            assert fields == [f"models.m.{field}"], err.details
            assert words in err.message, err.message
        else:
            assert fields == ["models.m"] and "CONCLAVE_ALLOW_PLAN_MODELS" in err.message, err.details
        assert SECRET_DB_URL not in str(err.to_dict())
        assert stored_plans(c) == 0


def test_a_worker_never_connects_where_a_plan_defined_name_resolves_to_a_refused_address(
        settings: Any, workers: Any, listener: LLMServer) -> None:
    port = int(listener.url.rsplit(":", 1)[1])
    # The operator lists the NAME localhost (resolving to loopback: refused at call time,
    # a name never waives the address rules) and the literal 127.0.0.1 (a waiver).
    cluster = settings.model_copy(update={"allowed_base_urls": [f"http://localhost:{port}",
                                                                f"http://127.0.0.1:{port}"]})
    workers(settings=cluster)
    with Conclave(cluster, worker=False) as c:
        by_name = c.submit(board({"provider": "openai", "model": "normal", "base_url": f"http://localhost:{port}/v1"}))
        view = c.wait(by_name, timeout=60)
        assert view.status == "failed", view.status
        opening = ledger(c.local.db, by_name).phase("opening")
        assert opening.status == "failed" and opening.error_code == "llm.egress_refused", opening
        assert "localhost resolves to 127.0.0.1" in (opening.error_message or "")
        assert "loopback" in (opening.error_message or "")
        assert listener.connections == [] and listener.requests == []

        listed = c.submit(board({"provider": "openai", "model": "normal", "base_url": f"http://127.0.0.1:{port}/v1"}))
        assert c.wait(listed, timeout=60).status == "completed"
        assert listener.count("normal") >= 1 and listener.connections  # reachable by the listed address


def test_a_stored_plan_naming_a_conclave_variable_is_refused_by_the_worker(
        settings: Any, workers: Any, listener: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Submit's checks are bypassed (the plan is written straight into the database, as a
    row stored by an older or compromised API would be): the worker resolves the model
    from its own settings and refuses to read the variable."""
    monkeypatch.setenv("CONCLAVE_DATABASE_URL", SECRET_DB_URL)  # the worker inherits it
    port = int(listener.url.rsplit(":", 1)[1])
    cluster = settings.model_copy(update={"allowed_base_urls": [f"http://127.0.0.1:{port}"]})
    worker = workers(settings=cluster)
    plan = load_plan(board({"provider": "openai", "model": "normal", "base_url": f"http://127.0.0.1:{port}/v1",
                            "api_key_env": "CONCLAVE_DATABASE_URL"}))
    with Conclave(cluster, worker=False) as c:
        plan_id = plans.create_plan(c.local.db, title=plan.title, kind=plan.kind, spec=plan.model_dump(mode="json"),
                                    phases=expand(plan), task_id=None, max_active=100).plan_id
        c.local.coordinator.advance(plan_id)
        wait_for(lambda: ledger(c.local.db, plan_id).phase("opening").final, 60, what="the opening phase to end")
        opening = ledger(c.local.db, plan_id).phase("opening")
        assert opening.status == "failed" and opening.error_code == "llm.model_not_allowed", opening
        assert "CONCLAVE_ALLOWED_KEY_ENVS" in (opening.error_message or "") or \
            "own configuration" in (opening.error_message or "")
    assert listener.connections == []
    assert "s3cr3t-db-password" not in worker.log()
