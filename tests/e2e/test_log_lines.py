"""Issue 10, item 5: every process logs JSON lines that carry their context, and no secret.

Real processes, as an operator runs them with their output going to files (not a terminal,
so ``CONCLAVE_LOG_FORMAT=auto`` writes JSON): a ``celery -A tasks worker``, a
``conclave worker``, ``conclave beat``, ``conclave api`` and CLI commands. The operator's
registry points at the test model server with a key and a configured header of distinctive
values; one model's first call fails with an error that echoes every header it received
(``authorization: Bearer <key>`` included), another's always answers 401 echoing the key.
The database URL carries a password, the API has ``CONCLAVE_API_TOKEN``, a token is issued
with ``conclave tokens create``, and a request puts both in its query string (which the
API's access log prints). Two plans run to their end; then every line every process wrote
is read: each is a JSON object with the documented keys, the lines of a phase carry its plan,
phase, attempt and worker, and no secret value appears anywhere.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import SecretStr
from sqlalchemy.engine import make_url

from orchestrator.logs.formats import KEYS
from tests.conftest import ROOT, WorkerProcess, settings_env, terminate
from tests.e2e.test_api import CONCLAVE, ApiServer
from tests.llm_server import LLMServer

KEY = "sk-logtest-PROVIDER-3b9f1c7e5a2d4680"
HEADER_VALUE = "hdr-logtest-91c3e7a5f2b8d406"
DB_PASSWORD = "pg-logtest-Pw7x9q2"
API_TOKEN = "api-logtest-TOKEN-5e8d2c41f07a"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _registry(path: Path, url: str) -> Path:
    common = {"provider": "openai", "base_url": url, "api_key_env": "LOGTEST_PROVIDER_KEY",
              "headers": {"X-Logtest-Secret": "LOGTEST_HEADER"}, "first_chunk_timeout": 10, "idle_timeout": 10,
              "deadline": 30}
    models = {"lead": {**common, "model": "normal"},
              "flaky": {**common, "model": "echo-headers-then-ok", "max_retries": 1},
              "denied": {**common, "model": "auth", "max_retries": 0}}
    path.write_text(yaml.safe_dump({"models": models}))
    return path


def _plan(title: str, phases: dict[str, str]) -> dict[str, Any]:
    """A team plan: one phase per (id, model), then a synthesis by the lead."""
    return {
        "kind": "team", "title": title, "divergence": "off", "question": "Should we ship the pilot first?",
        "experts": [{"name": f"E{i}", "role": "Analyst", "model": model} for i, model in enumerate(phases.values())]
        + [{"name": "Lead", "role": "Lead", "model": "lead"}],
        "phases": [{"id": phase, "expert": f"E{i}", "prompt": "Analyse it."} for i, phase in enumerate(phases)],
        "synthesis": {"expert": "Lead"},
    }


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _wait_final(url: str, plan_id: str, headers: dict[str, str], timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = httpx.get(f"{url}/v1/plans/{plan_id}", headers=headers, timeout=10).json()
        if view["status"] in ("completed", "failed", "cancelled"):
            return view
        time.sleep(0.2)
    raise AssertionError(f"plan {plan_id} did not end in {timeout}s")


def _json_lines(name: str, text: str) -> list[dict[str, Any]]:
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            raise AssertionError(f"{name} line {number} is not JSON: {raw[:300]!r}") from None
        assert isinstance(line, dict) and set(KEYS) <= set(line), (name, number, raw[:300])
        assert TIMESTAMP.match(line["timestamp"]), (name, line["timestamp"])
        lines.append(line)
    return lines


def test_every_process_logs_json_lines_with_their_context_and_no_secret(settings: Any, tmp_path: Path,
                                                                        monkeypatch: Any) -> None:
    monkeypatch.setenv("LOGTEST_PROVIDER_KEY", KEY)  # the processes inherit them
    monkeypatch.setenv("LOGTEST_HEADER", HEADER_VALUE)
    database_url = make_url(settings.database_url).set(password=DB_PASSWORD).render_as_string(hide_password=False)
    with LLMServer() as llm:
        cluster = settings.model_copy(update={
            "models": _registry(tmp_path / "models.yaml", llm.url), "allow_plan_models": False,
            "database_url": database_url, "api_token": SecretStr(API_TOKEN), "log_format": "auto"})
        env = settings_env(cluster)
        processes: dict[str, Path] = {}
        running: list[subprocess.Popen[bytes]] = []
        fixture_worker = WorkerProcess(cluster, tmp_path, name="loga")
        try:
            fixture_worker.start()  # celery -A tasks worker
            processes["celery worker"] = fixture_worker.log_path
            processes["conclave worker"] = tmp_path / "conclave-worker.log"
            running.append(_spawn([CONCLAVE, "worker", "--hostname", "logb@%h", "--without-mingle",
                                   "--without-gossip"], env, processes["conclave worker"]))
            processes["conclave beat"] = tmp_path / "beat.log"
            running.append(_spawn([CONCLAVE, "beat"], {**env, "CONCLAVE_STATE_DIR": str(tmp_path / "state")},
                                  processes["conclave beat"]))
            server = ApiServer(cluster, tmp_path, env={"CONCLAVE_API_TOKEN": API_TOKEN})
            processes["conclave api"] = server.log_path
            try:
                issued = subprocess.run([CONCLAVE, "tokens", "create", "--tenant", "acme", "--scope", "plans:read",
                                         "--scope", "plans:write", "--json"], cwd=ROOT, env=env,
                                        capture_output=True, text=True, timeout=60)
                assert issued.returncode == 0, issued.stderr
                token = json.loads(issued.stdout)["token"]
                (tmp_path / "tokens-create.log").write_text(issued.stderr)
                processes["conclave tokens create"] = tmp_path / "tokens-create.log"

                plan_file = tmp_path / "retried.yaml"
                plan_file.write_text(yaml.safe_dump(_plan("Retried", {"steady": "lead", "flaky": "flaky"})))
                submitted = subprocess.run([CONCLAVE, "submit", str(plan_file), "--url", server.url, "--json"],
                                           cwd=ROOT, env={**env, "CONCLAVE_TOKEN": token}, capture_output=True,
                                           text=True, timeout=60)
                assert submitted.returncode == 0, submitted.stderr
                (tmp_path / "submit.log").write_text(submitted.stderr)
                processes["conclave submit"] = tmp_path / "submit.log"
                retried_id = json.loads(submitted.stdout)["plan_id"]

                admin = {"Authorization": f"Bearer {API_TOKEN}"}
                r = httpx.post(f"{server.url}/v1/plans", json=_plan("Denied", {"denied": "denied"}), headers=admin)
                assert r.status_code == 201, r.text
                denied_id = r.json()["plan_id"]
                # secrets in a query string, which the access log prints
                leaky = httpx.get(f"{server.url}/v1/plans", params={"token": token, "key": KEY, "x": API_TOKEN},
                                  headers={"Authorization": f"Bearer {token}"})
                assert leaky.status_code == 200, leaky.text

                retried = _wait_final(server.url, retried_id, admin)
                denied = _wait_final(server.url, denied_id, admin)
            finally:
                server.stop()
        finally:
            fixture_worker.stop()
            for proc in running:
                terminate(proc)
        # the model server was really sent the secrets, and echoed them back
        assert llm.count("echo-headers-then-ok") == 2 and llm.count("auth") == 1
        assert all(KEY in r.headers["authorization"] and r.headers["x-logtest-secret"] == HEADER_VALUE
                   for r in llm.requests)

    assert retried["status"] == "completed", retried
    assert denied["status"] == "failed" and {p["key"]: p["error_code"] for p in denied["phases"]}["denied"] == \
        "llm.auth"

    secrets = {"provider key": KEY, "configured header": HEADER_VALUE, "database password": DB_PASSWORD,
               "CONCLAVE_API_TOKEN": API_TOKEN, "issued token": token, "issued token's secret": token.rsplit("_")[-1]}
    logs = {name: path.read_text(errors="replace") for name, path in processes.items()}
    for name, text in logs.items():
        for what, value in secrets.items():
            assert value not in text, f"the {what} is in the {name}'s log"

    lines = {name: _json_lines(name, text) for name, text in logs.items()}
    assert all(lines[name] for name in ("celery worker", "conclave worker", "conclave beat", "conclave api"))
    # the access log printed the query string, with the secrets masked
    assert any("/v1/plans?token=" in line["message"] and "***" in line["message"] for line in lines["conclave api"])

    worked = lines["celery worker"] + lines["conclave worker"]
    workers = {"loga@", "logb@"}
    phase_keys = {(retried_id, "steady"), (retried_id, "flaky"), (retried_id, "synthesis"), (denied_id, "denied")}
    of_phases = [line for line in worked if (line["plan_id"], line["phase"]) in phase_keys]
    # every phase was logged about, and each line of a phase says which plan, phase and worker it is
    assert {(line["plan_id"], line["phase"]) for line in of_phases} == phase_keys
    assert all(line["worker"] and line["worker"].split("@")[0] + "@" in workers for line in of_phases), of_phases
    # the runner's and the gateway's lines come from a claimed attempt: they carry it
    attempts = [line for line in of_phases if line["logger"].startswith(("tasks.runner", "orchestrator.gateway"))]
    assert attempts and all(line["attempt"] == 1 for line in attempts), attempts
    assert {line["phase"] for line in attempts} >= {"steady", "flaky", "denied", "synthesis"}
    # Celery's own line about each phase's task carries the phase too
    assert any(line["logger"] == "celery.app.trace" and line["phase"] == "flaky" for line in of_phases)
    # the upstream errors (the echoed headers, the 401) were logged on the worker, redacted,
    # with the context of the attempt they belong to
    upstream = [line for line in attempts if "Internal error handling" in line["message"]
                or "Incorrect API key" in line["message"]]
    assert {line["phase"] for line in upstream} == {"flaky", "denied"}, upstream
    assert any("authorization: ***" in line["message"] and "x-logtest-secret: ***" in line["message"]
               for line in upstream), upstream
    assert all(line["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
               for name in lines for line in lines[name])
