"""How a fleet process starts, as an operator meets it: a worker with no broker or no
database configured exits at once naming what is missing (it never waits on an in-memory
broker), beat's schedule goes under CONCLAVE_STATE_DIR and never the working directory,
and ``conclave --version`` answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.core.version import __version__
from tests.conftest import settings_env, terminate
from tests.e2e.test_cli import run_cli


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env.update(extra)
    return env


def test_a_fleet_worker_without_a_broker_or_a_database_refuses_to_start(tmp_path: Path) -> None:
    celery = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "solo"]
    for env, named in ((_clean_env(), ("CONCLAVE_BROKER_URL", "CONCLAVE_DATABASE_URL")),
                       (_clean_env(CONCLAVE_BROKER_URL="redis://127.0.0.1:6379/15"), ("CONCLAVE_DATABASE_URL",))):
        out = subprocess.run(celery, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and all(n in out.stderr for n in named), out.stderr[-2000:]
        assert "Traceback" not in out.stderr
        via_cli = run_cli(["worker"], tmp_path, env=env, timeout=60)
        assert via_cli.returncode != 0 and all(n in via_cli.stderr for n in named), via_cli.stderr
        assert "Traceback" not in via_cli.stderr
    assert list(tmp_path.iterdir()) == []  # nothing embedded was created on the way


def test_conclave_version(tmp_path: Path) -> None:
    out = run_cli(["--version"], tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"conclave, version {__version__}"


def test_beat_keeps_its_schedule_under_the_state_dir(settings: Any, tmp_path: Path) -> None:
    cwd, state = tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    env = {**settings_env(settings), "CONCLAVE_STATE_DIR": str(state)}
    log = tmp_path / "worker.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "--beat"], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(state.glob("celerybeat-schedule*")):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        terminate(proc)
    assert list(cwd.iterdir()) == []
