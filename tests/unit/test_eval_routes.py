"""The eval routes (``/v1/evals``) in process, over ``httpx.ASGITransport``: a record is stored
once per tenant and name, read back by the same tenant only (another tenant's token gets the
404 of a missing eval), a wrong record is a 422 naming the field in the API's error shape; and
an eval run through ``Conclave.connect`` stores and reports what the local client sees."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from orchestrator.api.app import create_app
from orchestrator.client.conclave import Conclave
from orchestrator.client.local import LocalBackend
from orchestrator.core.errors import EvalConflict, EvalNotFound, Forbidden, InvalidEval
from orchestrator.core.settings import Settings
from orchestrator.evaluation.collect import collect
from orchestrator.evaluation.harness import Harness
from orchestrator.evaluation.spec import resolve
from storage import principals
from storage.identity import READ, WRITE
from tests.unit.test_one_client import InProcessTransport

PANEL = {"kind": "team", "title": "Panel", "question": "Answer: {question}", "decide": "vote", "divergence": "off",
         "experts": [{"name": n, "role": "Solver", "model": "solver"} for n in ("Ada", "Bo", "Cy")],
         "phases": [{"id": n.lower(), "expert": n, "prompt": "Solve it."} for n in ("Ada", "Bo", "Cy")]}


def spec_file(tmp_path: Path, n: int = 4) -> Path:
    (tmp_path / "panel.yaml").write_text(yaml.safe_dump(PANEL))
    path = tmp_path / f"spec-{n}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "arith", "generate": {"n": n, "options": 2, "seed": 2}, "plan": "panel.yaml",
        "models": {"solver": {"provider": "offline", "options": {"latency": 0, "solver": {"skill": 0.7}}}},
        "baselines": {"single": {"model": "solver"}}}))
    return path


class Shared(httpx.BaseTransport):
    """One in-process transport for several clients: closing a client leaves it open."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self.transport = transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.transport.handle_request(request)


@pytest.fixture()
def api(home: Path) -> Iterator[dict[str, Any]]:
    """The API of an embedded local backend (its worker runs the plans), tokens required, two
    tenants' tokens and a read-only one."""
    settings = Settings(home=home, offline_latency=0.0, reconcile_interval=0.5, auth="tokens")
    local = LocalBackend(settings)
    transport = InProcessTransport(create_app(settings, local=local))
    tokens = {name: principals.create(local.db, tenant=tenant, scopes=scopes)[1] for name, tenant, scopes in (
        ("acme", "acme", [READ, WRITE]), ("globex", "globex", [READ, WRITE]), ("reader", "acme", [READ]))}
    clients = {name: Conclave.connect("http://conclave.test", token=token, transport=Shared(transport))
               for name, token in tokens.items()}
    raw = httpx.Client(base_url="http://conclave.test", transport=Shared(transport))
    try:
        yield {"local": local, "clients": clients, "tokens": tokens, "raw": raw}
    finally:
        raw.close()
        for c in clients.values():
            c.close()
        transport.close()
        local.close()


def test_a_record_is_stored_once_per_tenant_and_read_back_by_its_tenant_only(api: dict[str, Any],
                                                                             tmp_path: Path) -> None:
    acme, globex, reader = (api["clients"][n] for n in ("acme", "globex", "reader"))
    record = resolve(spec_file(tmp_path)).record
    first, again = acme.create_eval("arith", record), acme.create_eval("arith", record)
    assert first.created and not again.created and again.eval == first.eval
    assert first.eval.tenant == "acme" and first.eval.spec == record
    assert acme.get_eval("arith") == first.eval
    assert [(e.name, e.tenant) for e in acme.list_evals()] == [("arith", "acme")]
    with pytest.raises(EvalNotFound):
        globex.get_eval("arith")  # another tenant's eval is a missing one
    assert globex.list_evals() == []
    theirs = globex.create_eval("arith", resolve(spec_file(tmp_path, n=3)).record)  # their own, same name
    assert theirs.created and theirs.eval.id != first.eval.id and acme.get_eval("arith") == first.eval
    with pytest.raises(EvalConflict) as conflict:
        acme.create_eval("arith", resolve(spec_file(tmp_path, n=5)).record)
    assert "already exists with a different spec" in conflict.value.message
    with pytest.raises(Forbidden):
        reader.create_eval("other", record)
    assert reader.get_eval("arith") == first.eval

    raw, token = api["raw"], api["tokens"]
    answer = raw.get("/v1/evals/arith", headers={"Authorization": f"Bearer {token['globex']}"})
    assert answer.status_code == 200 and answer.json()["tenant"] == "globex"
    missing = raw.get("/v1/evals/nothing", headers={"Authorization": f"Bearer {token['acme']}"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "eval.not_found"
    assert raw.get("/v1/evals/arith").status_code == 401


def test_a_wrong_record_is_a_422_naming_the_field(api: dict[str, Any], tmp_path: Path) -> None:
    raw, auth = api["raw"], {"Authorization": f"Bearer {api['tokens']['acme']}"}
    record = resolve(spec_file(tmp_path)).record

    def post(body: Any, **headers: str) -> httpx.Response:
        return raw.post("/v1/evals", content=json.dumps(body), headers={
            **auth, "Content-Type": "application/json", **headers})

    cases = [
        ({"name": "arith"}, "spec"),
        ({"name": "arith", "spec": record, "extra": 1}, "extra"),
        ({"name": "Not A Name", "spec": record}, "name"),
        ({"name": "arith", "spec": {**record, "items": []}}, "spec.items"),
        ({"name": "arith", "spec": {**record, "items": [{"id": "q", "question": "?", "answer": "x"}]}},
         "spec.items[0]"),
        ({"name": "arith", "spec": {k: v for k, v in record.items() if k != "arms"}}, "spec.arms"),
        ({"name": "other", "spec": record}, "name"),  # the record is another eval's
        ({"name": "arith", "spec": {**record, "arms": [{**record["arms"][0], "plan": {
            **record["arms"][0]["plan"], "experts": []}}, record["arms"][1]]}}, "spec.arms[0].plan.experts"),
    ]
    for body, field in cases:
        answer = post(body)
        assert answer.status_code == 422, (field, answer.text)
        error = answer.json()["error"]
        assert set(error) == {"code", "message", "details"} and error["details"][0]["field"] == field, error
    assert post(record, **{"Content-Type": "application/yaml"}).status_code == 415
    bad_path = raw.get("/v1/evals/Bad%20Name", headers=auth)
    assert bad_path.status_code == 422 and bad_path.json()["error"]["details"][0]["field"] == "name"
    assert raw.get("/v1/evals", params={"limit": 0}, headers=auth).status_code == 422
    with pytest.raises(InvalidEval) as refused:  # the client raises the same error, with its fields
        api["clients"]["acme"].create_eval("arith", {**record, "items": []})
    assert refused.value.details[0]["field"] == "spec.items"


def test_an_eval_run_over_http_stores_and_reports_what_the_local_client_sees(api: dict[str, Any],
                                                                              tmp_path: Path) -> None:
    remote = api["clients"]["acme"]
    result = Harness(remote, resolve(spec_file(tmp_path)), in_flight=4, poll=0.05).run()
    assert result.submitted == 8 and len(result.outcomes) == 8
    stored = remote.get_eval("arith")
    local = Conclave(backend=api["local"])
    assert collect(remote, stored) == result.outcomes
    assert collect(local, local.local.evals.get("arith")) == result.outcomes  # the operator reads the same
    assert all(remote.get(o.plan_id).labels[-2:] == ["eval=arith", f"arm={o.arm}"] for o in result.outcomes)
    with pytest.raises(EvalNotFound):
        collect(api["clients"]["globex"], api["clients"]["globex"].get_eval("arith"))
