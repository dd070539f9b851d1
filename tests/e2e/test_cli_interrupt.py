"""Ctrl-C during ``conclave run`` on a cluster, as a user presses it: a real SIGINT to a real
``conclave run`` subprocess. Once: it stops following, says how to follow or cancel, exits
130, and the shared plan goes on — a worker started afterwards finishes it. Twice within the
grace, or once with ``--cancel-on-exit``: the plan is cancelled, and says so. Before the live
display (while the commands load, while the submit waits): one line, exit 130, no traceback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.interrupted import MESSAGE
from orchestrator.client.conclave import Conclave
from storage.status import PlanStatus
from tests.conftest import ROOT, settings_env
from tests.e2e.test_cli import CONCLAVE

BOARD = str(ROOT / "examples" / "board.yaml")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal, whatever this test runs under


def start_run(settings: Any, cwd: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """``conclave run`` on the cluster, with no worker yet (the plan waits): the process and
    the plan it submitted, once it is stored."""
    proc = subprocess.Popen([*CONCLAVE, "run", BOARD, *extra], cwd=cwd, env=settings_env(settings),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    with Conclave(settings, worker=False) as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            plans = client.list_plans()["plans"]
            if plans:
                time.sleep(1.0)  # it follows the plan now
                return proc, plans[0]["id"]
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("conclave run stored no plan")


def status(settings: Any, plan_id: str, *, until: PlanStatus | None = None) -> PlanStatus:
    with Conclave(settings, worker=False) as client:
        if until is not None:
            return client.wait(plan_id, timeout=90).status
        return client.get(plan_id).status


@pytest.mark.slow
def test_one_ctrl_c_detaches_and_the_plan_goes_on(settings: Any, workers: Any, tmp_path: Path) -> None:
    proc, plan_id = start_run(settings, tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert f"stopped following plan {plan_id}" in err and "keeps running on the cluster" in err
    assert f"conclave watch {plan_id}" in err and f"conclave cancel {plan_id}" in err
    assert "Traceback" not in err + out
    assert status(settings, plan_id) == PlanStatus.RUNNING  # not cancelled
    workers()
    assert status(settings, plan_id, until=PlanStatus.COMPLETED) == PlanStatus.COMPLETED


@pytest.mark.slow
def test_a_second_ctrl_c_cancels_the_plan(settings: Any, tmp_path: Path) -> None:
    proc, plan_id = start_run(settings, tmp_path)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)  # within the grace
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"cancelling plan {plan_id}" in err and "cancel requested" in err
    assert "Traceback" not in err + out
    assert status(settings, plan_id) == PlanStatus.CANCELLED


@pytest.mark.slow
def test_cancel_on_exit_cancels_at_the_first_ctrl_c(settings: Any, tmp_path: Path) -> None:
    proc, plan_id = start_run(settings, tmp_path, "--cancel-on-exit")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Press Ctrl-C again" not in err and f"cancelling plan {plan_id}" in err
    assert "Traceback" not in err + out
    assert status(settings, plan_id) == PlanStatus.CANCELLED


@pytest.mark.slow
def test_resume_after_a_worker_was_killed_says_whose_lease_holds_the_plan(settings: Any, workers: Any,
                                                                         tmp_path: Path) -> None:
    """A worker SIGKILLed mid-phase: ``resume`` enqueues nothing while its lease lasts, and
    says so, naming the phase and until when — not a bare 'enqueued nothing'."""
    slow = settings.model_copy(update={"lease_seconds": 60.0, "offline_latency": 0.2})
    worker = workers(settings=slow)
    with Conclave(slow, worker=False) as client:
        plan_id = client.submit(BOARD)
        deadline = time.monotonic() + 60
        while not any(p.status == "running" for p in client.get(plan_id).phases):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    worker.kill(signal.SIGKILL)
    out = subprocess.run([*CONCLAVE, "resume", plan_id[:8]], cwd=tmp_path, env=settings_env(slow),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{plan_id}: enqueued nothing — running: opening held by a worker whose lease lasts until" in out.stdout
    assert "UTC" in out.stdout and "resume after then" in out.stdout
    assert status(slow, plan_id) == PlanStatus.RUNNING


@pytest.mark.slow
def test_resume_follow_streams_the_plan_and_ends_with_its_outcome(settings: Any, workers: Any,
                                                                  tmp_path: Path) -> None:
    """``resume --follow`` on a plan a worker is running: nothing to enqueue, said so, then the
    meeting followed to its end, which it prints, exiting 0 for a completed plan."""
    slow = settings.model_copy(update={"offline_latency": 0.02})
    with Conclave(slow, worker=False) as client:
        plan_id = client.submit(BOARD)
    workers(settings=slow)
    out = subprocess.run([*CONCLAVE, "resume", plan_id, "--follow"], cwd=tmp_path, env=settings_env(slow),
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert f"{plan_id}: enqueued nothing" in out.stdout
    assert "completed · 12/12 phases" in out.stdout.splitlines()[-1]  # it ends with the outcome
    assert "Traceback" not in out.stdout + out.stderr
    assert status(slow, plan_id) == PlanStatus.COMPLETED


def _said(err: str) -> list[str]:
    """What the process wrote to stderr, without Python's import-time report."""
    return [line for line in err.splitlines() if line.strip() and not line.startswith("import time:")]


def test_ctrl_c_while_the_commands_load_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A cold start loads for a second or so before anything shows: a Ctrl-C then (here, once
    Python reports it has loaded SQLAlchemy — inside the commands' import) ends in one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env |= {"CONCLAVE_DATABASE_URL": f"sqlite:///{tmp_path}/conclave.db", "PYTHONPROFILEIMPORTTIME": "1",
            "CONCLAVE_MODELS": str(ROOT / "examples" / "models.yaml")}
    proc = subprocess.Popen([*CONCLAVE, "run", BOARD, "--no-prompt"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # each import, as it finishes
        seen.append(line)
        if "sqlalchemy" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in "".join(seen) + err + out and "Aborted!" not in err
    assert _said(err) == [MESSAGE]
    assert not (tmp_path / "conclave.db").exists()  # it stopped before it opened anything


def test_ctrl_c_before_the_live_display_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """``conclave run`` against an API that has not answered its submit yet: a Ctrl-C before
    the live display ends in one line too (the sync point: the API accepted its connection)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(60)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")} | {"CONCLAVE_TOKEN": "t" * 20}
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        proc = subprocess.Popen([*CONCLAVE, "run", BOARD, "--no-prompt", "--url", url], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_default_sigint)
        conn, _ = server.accept()  # its first request is on the way; nothing answers it
        with conn:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err + out and "Aborted!" not in err
    assert _said(err)[-1] == MESSAGE and len(_said(err)) <= 2, err  # the banner line, at most, before it
