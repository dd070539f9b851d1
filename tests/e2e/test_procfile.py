"""The Procfile as an operator runs it (README, "Run a cluster locally"): settings in a
``.env``, ``honcho run conclave db upgrade``, ``honcho start``; then ``conclave submit
examples/board.yaml --url …`` with a token runs the meeting to the end on the operator's
registry (``examples/models.yaml``: the offline model), every phase shows in Flower (behind
basic auth), the health checks answer for the processes honcho started, and stopping honcho
leaves no process behind."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import PG_ADMIN, ROOT, free_port

BIN = Path(sys.executable).parent  # conclave and honcho, as `make install` puts them
#: Every process of the run carries this variable (honcho hands its environment down), so
#: the ones left behind can be found.
MARK = "CONCLAVE_TEST_HONCHO_RUN"


@pytest.fixture()
def empty_database() -> Iterator[str]:
    """A new, empty Postgres database: the operator migrates it."""
    name = f"conclave_honcho_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    with admin.connect() as c:
        c.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


def marked(value: str) -> list[int]:
    """The processes whose environment carries ``MARK=value``."""
    needle = f"{MARK}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:  # gone, or not ours
                pass
    return found


def wait_for(what: str, check: Callable[[], bool], honcho: subprocess.Popen[bytes], log: Path,
             seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert honcho.poll() is None, f"honcho exited while waiting for {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} not within {seconds}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_honcho_start_runs_a_board_meeting_that_the_page_and_flower_show_and_stops_clean(
        empty_database: str, redis_url: str, tmp_path: Path) -> None:
    port, flower_port = free_port(), free_port()
    token, password = secrets.token_urlsafe(24), secrets.token_urlsafe(12)
    dotenv = tmp_path / ".env"
    dotenv.write_text("".join(f"{k}={v}\n" for k, v in {
        "CONCLAVE_DATABASE_URL": empty_database,
        "CONCLAVE_BROKER_URL": redis_url,
        "CONCLAVE_MODELS": "examples/models.yaml",
        "CONCLAVE_API_TOKEN": token,
        "CONCLAVE_STATE_DIR": str(tmp_path / "state"),
        "CONCLAVE_FLOWER_USER": "ops",
        "CONCLAVE_FLOWER_PASSWORD": password,
        "CONCLAVE_FLOWER_PORT": str(flower_port),
    }.items()))
    run_id = uuid.uuid4().hex
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("CONCLAVE_", "FLOWER_"))}
    shell.update({"PATH": f"{BIN}{os.pathsep}{shell.get('PATH', '')}", "PORT": str(port), MARK: run_id,
                  "PYTHONUNBUFFERED": "1"})

    def honcho_run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["honcho", "run", "-e", str(dotenv), *command], cwd=ROOT, env=shell,
                              capture_output=True, text=True, timeout=60)

    migrated = honcho_run("conclave", "db", "upgrade")
    assert migrated.returncode == 0 and "database at head" in migrated.stdout, migrated.stderr

    log = tmp_path / "honcho.log"
    with open(log, "wb") as out:
        honcho = subprocess.Popen(["honcho", "start", "-e", str(dotenv)], cwd=ROOT, env=shell, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{port}"
    flower = f"http://127.0.0.1:{flower_port}"
    try:
        def serving(url: str) -> bool:
            try:
                return httpx.get(url, timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for("the API on $PORT", lambda: serving(f"{api}/readyz"), honcho, log)
        # the containers' health checks, with their default node names, find what honcho started
        wait_for("the worker's health check", lambda: honcho_run("conclave", "health", "worker").returncode == 0,
                 honcho, log)
        wait_for("beat's health check", lambda: honcho_run("conclave", "health", "beat").returncode == 0, honcho, log)
        wait_for("Flower", lambda: serving(f"{flower}/healthcheck"), honcho, log)

        user = {**{k: v for k, v in shell.items() if k != "PORT"}, "CONCLAVE_TOKEN": token}
        submitted = subprocess.run(["conclave", "submit", "examples/board.yaml", "--url", api], cwd=ROOT, env=user,
                                   capture_output=True, text=True, timeout=60)
        assert submitted.returncode == 0, submitted.stderr
        plan_id = submitted.stdout.strip()
        watched = subprocess.run(["conclave", "watch", plan_id, "--url", api], cwd=ROOT, env=user,
                                 capture_output=True, text=True, timeout=240)
        assert watched.returncode == 0, (watched.stdout[-2000:], watched.stderr[-2000:], log.read_text()[-3000:])
        status = subprocess.run(["conclave", "status", plan_id, "--json", "--url", api], cwd=ROOT, env=user,
                                capture_output=True, text=True, timeout=60)
        view = json.loads(status.stdout)
        assert view["status"] == "completed"
        keys = {p["key"] for p in view["phases"]}
        assert len(keys) == 12 and all(p["status"] == "completed" for p in view["phases"])

        # the plan page, signed in the way a browser does (the form sets the session cookie)
        with httpx.Client(base_url=api, timeout=10) as browser:
            signed_in = browser.post("/ui/login", data={"token": token, "next": f"/ui/plans/{plan_id}"},
                                     follow_redirects=True)
            assert signed_in.status_code == 200 and "conclave_session" in browser.cookies
            page = browser.get(f"/ui/plans/{plan_id}")
            assert page.status_code == 200
            assert "Usage-based pricing for Ledgerly" in page.text and "completed" in page.text
            cards = re.findall(r'<article class="phase[^"]*" id="phase-([^"]+)"[^>]*? data-status="([a-z_]+)"',
                               page.text)
            assert dict(cards) == dict.fromkeys(keys, "completed")  # every phase's card, completed

        assert httpx.get(f"{flower}/api/tasks", timeout=5).status_code == 401
        shown: set[str] = set()

        def every_phase_in_flower() -> bool:
            tasks = httpx.get(f"{flower}/api/tasks", auth=("ops", password), timeout=5).json()
            shown.update(key for t in tasks.values() for key in keys
                         if str(t.get("name", "")).startswith("conclave.run_phase")
                         and plan_id in str(t.get("kwargs")) and f"'phase_key': '{key}'" in str(t.get("kwargs")))
            return keys <= shown

        wait_for("every run_phase of the plan in Flower", every_phase_in_flower, honcho, log, seconds=30)
        assert len(marked(run_id)) >= 5  # honcho and its four processes: the check below can see them
    finally:
        if honcho.poll() is None:
            honcho.send_signal(signal.SIGTERM)  # Ctrl-C / SIGTERM: honcho stops every process it started
            try:
                honcho.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(honcho.pid, signal.SIGKILL)
                honcho.wait(timeout=10)
        deadline = time.monotonic() + 10
        while (left := marked(run_id)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:  # never leave them running, even when the test fails
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes left after honcho stopped: {left}\n{log.read_text()[-3000:]}"
    output = log.read_text()
    assert token not in output and password not in output
