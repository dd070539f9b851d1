"""Flower, as operators run it, shows every task by a readable name with its plan and phase ids."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, settings_env, terminate
from tests.integration.durability import board_plan


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_flower_lists_tasks_by_phase(settings: Any, workers: Any, client: Any, tmp_path: Path) -> None:
    port = free_port()
    env = {**settings_env(settings), "FLOWER_UNAUTHENTICATED_API": "true"}
    with open(tmp_path / "flower.log", "wb") as log:
        flower = subprocess.Popen([sys.executable, "-m", "celery", "-A", "tasks", "flower", f"--port={port}",
                                   "--address=127.0.0.1"], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/api/tasks"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()[-2000:]
            time.sleep(0.2)
        workers()
        plan_id = client.submit(board_plan(experts=2))
        view = client.wait(plan_id, timeout=60)
        assert view.status == "completed"
        expected = {p.key for p in view.phases}
        listed: dict[str, Any] = {}
        while time.monotonic() < deadline + 30 and not expected <= set(listed):
            tasks = httpx.get(url, timeout=5).json()
            listed = {key: t for t in tasks.values() for key in expected
                      if str(t.get("name", "")).startswith("conclave.run_phase")
                      and plan_id in str(t.get("kwargs")) and f"'phase_key': '{key}'" in str(t.get("kwargs"))}
            time.sleep(0.3)
        assert expected <= set(listed), sorted(listed)
        # the name carries the phase key once the worker reports the task (a producer's
        # task-sent event, if it arrives last, carries the plain registered name)
        assert all(t["name"] in ("conclave.run_phase", f"conclave.run_phase[{key}]") for key, t in listed.items())
        assert any(t["name"] == f"conclave.run_phase[{key}]" for key, t in listed.items())
        names = {t.get("name") for t in httpx.get(url, timeout=5).json().values()}
        assert "conclave.advance" in names
    finally:
        terminate(flower)
