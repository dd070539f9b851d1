"""``conclave health worker|beat``, the containers' health checks, against real processes:
healthy while the process answers over the broker; unhealthy — exit 1, naming the node —
while it is stopped (SIGSTOP: its process still exists, it just does not work) and once it
is dead; and when the broker cannot be reached."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, free_port, settings_env, terminate
from tests.e2e.test_cli import run_cli


def health(role: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = run_cli(["health", role, *args], ROOT, env=env, timeout=60)
    return result


def until_healthy(role: str, env: dict[str, str], proc: subprocess.Popen[bytes], log: Path, *args: str) -> str:
    deadline = time.monotonic() + 60
    while (out := health(role, env, *args)).returncode != 0:
        assert proc.poll() is None and time.monotonic() < deadline, (out.stderr, log.read_text()[-2000:])
        time.sleep(0.5)
    return out.stdout


def unhealthy(role: str, env: dict[str, str], node: str, *args: str) -> None:
    out = health(role, env, "--timeout", "1", *args)  # an answer comes in milliseconds, or never
    assert out.returncode == 1 and f"unhealthy: {node} did not answer within 1s" in out.stderr, (out.stdout,
                                                                                                  out.stderr)
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_worker_is_healthy_while_it_answers_not_while_stopped_nor_once_dead(settings: Any, workers: Any) -> None:
    env = settings_env(settings)
    worker = workers()
    node = f"{worker.name}@{socket.gethostname()}"
    assert until_healthy("worker", env, worker.proc, worker.log_path, "-n", f"{worker.name}@%h") == f"{node}: alive\n"
    unhealthy("worker", env, f"someone-else@{socket.gethostname()}", "-n", "someone-else@%h")

    os.killpg(worker.pid, signal.SIGSTOP)
    try:
        unhealthy("worker", env, node, "-n", node)
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
    until_healthy("worker", env, worker.proc, worker.log_path, "-n", node)

    worker.kill()
    unhealthy("worker", env, node, "-n", node)


@pytest.mark.slow
def test_beat_is_healthy_while_its_scheduler_ticks_not_while_stopped_nor_once_dead(settings: Any,
                                                                                    tmp_path: Path) -> None:
    state, cwd = tmp_path / "state", tmp_path / "cwd"
    cwd.mkdir()
    env = {**settings_env(settings), "CONCLAVE_STATE_DIR": str(state)}
    log = tmp_path / "beat.log"
    with open(log, "wb") as out:  # `conclave beat` as the Procfile and the compose file run it
        beat = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "beat"], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    node = f"celerybeat@{socket.gethostname()}"
    try:
        assert until_healthy("beat", env, beat, log) == f"{node}: alive\n"  # the default node name
        assert list(state.glob("celerybeat-schedule*")) and list(cwd.iterdir()) == []

        os.killpg(beat.pid, signal.SIGSTOP)
        try:
            unhealthy("beat", env, node)
        finally:
            os.killpg(beat.pid, signal.SIGCONT)
        until_healthy("beat", env, beat, log)

        os.killpg(beat.pid, signal.SIGKILL)
        beat.wait(timeout=30)
        unhealthy("beat", env, node)
    finally:
        terminate(beat)


def test_a_broker_that_cannot_be_reached_is_unhealthy(settings: Any) -> None:
    env = {**settings_env(settings), "CONCLAVE_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"}
    out = health("worker", env)
    assert out.returncode == 1 and "unhealthy: the broker cannot be reached" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    embedded = {k: v for k, v in env.items() if k != "CONCLAVE_BROKER_URL"}
    out = health("worker", embedded)
    assert out.returncode == 1 and "CONCLAVE_BROKER_URL is not set" in out.stderr, out.stderr
