"""A client generated from the live server's ``/openapi.json`` by openapi-python-client
works: generated into a temporary directory, imported from there in a subprocess
(``generated_session.py``), and driven through submit, list, get, events and result
against a real ``conclave api`` with tokens on and a real worker running the offline
model. What its user saw is compared with the stored state; and while the database is
down, its calls get the declared 503 as a parsed error, not an exception."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, free_port
from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)

TOKEN = "generated-client-token-0123456789abcdef"
BIN = Path(sys.executable).parent
SESSION = Path(__file__).with_name("generated_session.py")


def generate(url: str, into: Path) -> subprocess.CompletedProcess[str]:
    """``openapi-python-client generate`` from the served document: the package ``conclave_client``."""
    config = into / "generator.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run: the client is used as generated
    return subprocess.run([str(BIN / "openapi-python-client"), "generate", "--url", f"{url}/openapi.json",
                           "--meta", "none", "--output-path", str(into / "conclave_client"), "--config",
                           str(config)], cwd=into, capture_output=True, text=True, timeout=300)


def run_session(into: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(into), str(ROOT)])}
    run = subprocess.run([sys.executable, str(SESSION), *args], cwd=into, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    out: dict[str, Any] = json.loads(run.stdout)
    return out


@pytest.mark.timeout(600)
def test_a_generated_client_drives_a_plan_from_submit_to_result(api: Any, workers: Any, settings: Any,  # noqa: F811
                                                                client: Any, tmp_path: Path) -> None:
    server = api(env={"CONCLAVE_API_TOKEN": TOKEN})
    generated = generate(server.url, tmp_path)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    said = generated.stdout + generated.stderr
    warnings = [line for line in said.splitlines() if line.startswith("WARNING")]
    # the one part a generator cannot use: the plan as YAML (the JSON body is generated)
    assert warnings == ["WARNING parsing POST /v1/plans within plans."], said
    assert "Unsupported content type application/yaml" in said
    package = tmp_path / "conclave_client"
    for module in ("submit_plan", "list_plans", "get_plan", "stream_events", "get_result"):
        assert (package / "api" / "plans" / f"{module}.py").is_file(), module

    workers(settings=settings.model_copy(update={"offline_latency": 0.005}))
    seen = run_session(tmp_path, server.url, TOKEN, str(ROOT / "examples" / "board.yaml"))

    plan_id = seen["submit"]["plan_id"]
    view = client.get(plan_id)  # the stored truth, read without the API
    assert view.status == "completed" and view.task_id == "generated-client-1"
    assert seen["health"] == "ok"
    assert seen["submit"]["status"] == 201 and seen["submit"]["created"] is True
    assert seen["submit"]["enqueued"] == [p.key for p in view.phases]
    assert plan_id in seen["listed"]
    assert seen["view"] == {"id": plan_id, "status": "completed",
                            "phases": [[p.key, str(p.status)] for p in view.phases],
                            "total_tokens": view.usage.total_tokens}
    assert seen["result"] == {"status": "completed", "text": client.result(plan_id)}

    stored = list(client.events(plan_id))
    assert seen["events"] == [{"id": e.id, "type": e.type, "phase": e.phase_key} for e in stored]
    assert seen["events"][0]["type"] == "plan_submitted" and seen["events"][-1]["type"] == "plan_finished"
    assert seen["after"] == [stored[-1].id]
    final = [c for c in seen["chunks"] if c["phase"] == "final"]
    assert final and "".join(c["text"] for c in final) == seen["result"]["text"]
    assert [c["seq"] for c in final] == sorted(c["seq"] for c in final)
    assert seen["missing"] == {"status": 404, "code": "plan.not_found"}
    assert TOKEN not in server.log()


@pytest.mark.timeout(300)
def test_a_generated_client_gets_the_declared_503_while_the_database_is_down(api: Any, settings: Any,  # noqa: F811
                                                                             tmp_path: Path) -> None:
    up = api(env={"CONCLAVE_API_TOKEN": TOKEN})
    assert generate(up.url, tmp_path).returncode == 0
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/conclave"  # nothing listens there
    down = api(env={"CONCLAVE_API_TOKEN": TOKEN}, settings_=settings.model_copy(update={"database_url": nowhere}))
    seen = run_session(tmp_path, down.url, TOKEN, "--unavailable")
    assert seen["list_plans"] == {"status": 503, "code": "service.unavailable", "message": "database unavailable"}
    assert seen["get_plan"] == seen["list_plans"]
    assert seen["get_readiness"] == {"status": 503, "code": "service.unavailable", "message": "database unreachable"}
    assert "127.0.0.1:" not in json.dumps(seen)  # the driver's text stays in the log
