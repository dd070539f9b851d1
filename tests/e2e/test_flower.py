"""Flower, as operators run it (``conclave flower``): behind basic auth from the settings,
never with the password on its command line, refusing to start open unless told to; and it
shows every task by a readable name with its plan and phase ids."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, free_port, settings_env, terminate
from tests.e2e.test_cli import run_cli
from tests.integration.durability import board_plan

USER, PASSWORD = "ops", "flower:pass-73c1"  # a colon in the password is fine for basic auth


class FlowerProcess:
    """``conclave flower --address 127.0.0.1 --port N`` as a subprocess, up once it serves."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "flower", "--address=127.0.0.1",
                                          f"--port={self.port}"], cwd=ROOT, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{self.url}/healthcheck", timeout=2)
                return
            except httpx.TransportError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.2)

    def get(self, path: str, auth: tuple[str, str] | None = (USER, PASSWORD)) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", auth=auth, timeout=5)

    def command_line(self) -> str:
        return Path(f"/proc/{self.proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.fixture()
def flower(settings: Any, tmp_path: Path) -> Iterator[Any]:
    """Factory: ``flower(**env)`` starts ``conclave flower``; all are stopped at teardown."""
    started: list[FlowerProcess] = []

    def start(**env: str) -> FlowerProcess:
        process = FlowerProcess({**settings_env(settings), **env}, tmp_path / f"flower-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        terminate(process.proc)


@pytest.mark.slow
def test_flower_asks_for_basic_auth_and_lists_tasks_by_phase(flower: Any, workers: Any, client: Any) -> None:
    f = flower(CONCLAVE_FLOWER_USER=USER, CONCLAVE_FLOWER_PASSWORD=PASSWORD,
               FLOWER_BASIC_AUTH="intruder:letmein")  # only the settings' credentials open it
    assert f.get("/api/tasks", auth=None).status_code == 401
    assert f.get("/", auth=None).status_code == 401
    assert f.get("/api/tasks", auth=(USER, "wrong")).status_code == 401
    assert f.get("/api/tasks", auth=("intruder", "letmein")).status_code == 401
    assert f.get("/").status_code == 200
    assert f.get("/api/tasks").status_code == 200
    assert PASSWORD not in f.command_line()  # ps shows command lines to everyone

    workers()
    plan_id = client.submit(board_plan(experts=2))
    view = client.wait(plan_id, timeout=60)
    assert view.status == "completed"
    expected = {p.key for p in view.phases}
    listed: dict[str, Any] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not expected <= set(listed):
        tasks = f.get("/api/tasks").json()
        listed = {key: t for t in tasks.values() for key in expected
                  if str(t.get("name", "")).startswith("conclave.run_phase")
                  and plan_id in str(t.get("kwargs")) and f"'phase_key': '{key}'" in str(t.get("kwargs"))}
        time.sleep(0.3)
    assert expected <= set(listed), sorted(listed)
    # the name carries the phase key once the worker reports the task (a producer's
    # task-sent event, if it arrives last, carries the plain registered name)
    assert all(t["name"] in ("conclave.run_phase", f"conclave.run_phase[{key}]") for key, t in listed.items())
    assert any(t["name"] == f"conclave.run_phase[{key}]" for key, t in listed.items())
    # an advance that follows a single run is that run's own last step (run_phase(advance=True)):
    # the final's task carries it, and no separate advance task follows it
    assert "'advance': True" in str(listed["final"].get("kwargs")), listed["final"]
    assert PASSWORD not in f.log_path.read_text()


def test_flower_refuses_to_start_without_credentials_naming_them(settings: Any, tmp_path: Path) -> None:
    env = {k: v for k, v in settings_env(settings).items() if not k.startswith("CONCLAVE_FLOWER_")}
    for extra, named in (({}, ["CONCLAVE_FLOWER_USER and CONCLAVE_FLOWER_PASSWORD are not set"]),
                         ({"CONCLAVE_FLOWER_USER": USER}, ["CONCLAVE_FLOWER_PASSWORD is not set"]),
                         ({"CONCLAVE_FLOWER_USER": "a:b", "CONCLAVE_FLOWER_PASSWORD": PASSWORD},
                          ["CONCLAVE_FLOWER_USER: must be non-empty and contain no ',' or ':'"])):
        out = run_cli(["flower", f"--port={free_port()}"], tmp_path, env={**env, **extra}, timeout=60)
        assert out.returncode == 2 and all(n in out.stderr for n in named), out.stderr
        assert "Traceback" not in out.stderr and PASSWORD not in out.stderr
    embedded = {k: v for k, v in env.items() if k != "CONCLAVE_BROKER_URL"}
    out = run_cli(["flower"], tmp_path, env={**embedded, "CONCLAVE_FLOWER_AUTH": "off"}, timeout=60)
    assert out.returncode == 2 and "CONCLAVE_BROKER_URL is not set" in out.stderr, out.stderr


def test_flower_runs_open_only_when_told_to(flower: Any) -> None:
    f = flower(CONCLAVE_FLOWER_AUTH="off")
    assert f.get("/", auth=None).status_code == 200
