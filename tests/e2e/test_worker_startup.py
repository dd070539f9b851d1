"""How a fleet process starts, as an operator meets it — the same through both entry points,
``conclave worker`` and ``celery -A tasks worker`` (one start-up, ``orchestrator.fleet.startup``):
a worker with no broker or no database configured exits at once naming what is missing (it
never waits on an in-memory broker); a model registry naming an unknown provider, or a broker
or database that does not answer, stops it with one line saying which and where (secrets
redacted, never a traceback); a set-up that fails once the worker runs (its metrics) stops it
too, instead of a worker running on without it; beat's schedule goes under CONCLAVE_STATE_DIR
and never the working directory, and ``conclave --version`` answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.core.version import __version__
from tests.conftest import free_port, settings_env, terminate
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


CELERY = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "solo"]


def both_entry_points(env: dict[str, str], cwd: Path, *args: str) -> list[subprocess.CompletedProcess[str]]:
    """``celery -A tasks worker`` and ``conclave worker``, run to their end (none should run on)."""
    celery = subprocess.run([*CELERY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    return [celery, run_cli(["worker", *args], cwd, env=env, timeout=60)]


def test_a_registry_naming_an_unknown_provider_stops_both_entry_points(settings: Any, tmp_path: Path) -> None:
    registry = tmp_path / "models.yaml"
    registry.write_text("models:\n  gpt:\n    provider: nosuch\n")
    env = {**settings_env(settings), "CONCLAVE_MODELS": str(registry)}
    for out in both_entry_points(env, tmp_path):
        assert out.returncode == 2, out.stderr[-2000:]
        assert f"conclave worker: error [config.invalid] CONCLAVE_MODELS ({registry})" in out.stderr, out.stderr
        assert "models.gpt.provider" in out.stderr and "Traceback" not in out.stderr
        assert " ready." not in out.stdout + out.stderr
    beat = run_cli(["beat"], tmp_path, env=env, timeout=60)
    assert beat.returncode == 2 and "conclave beat: error [config.invalid]" in beat.stderr, beat.stderr


def test_a_broker_and_a_database_that_do_not_answer_stop_both_entry_points(settings: Any, tmp_path: Path) -> None:
    down = free_port()  # nothing listens there
    env = {**settings_env(settings), "CONCLAVE_BROKER_URL": f"redis://:broker-secret@127.0.0.1:{down}/0",
           "CONCLAVE_DATABASE_URL": f"postgresql://postgres:db-secret@127.0.0.1:{down}/conclave"}
    for name in ("CONCLAVE_RESULT_BACKEND", "CONCLAVE_REDIS_URL"):
        env.pop(name, None)  # both follow the broker
    for out in both_entry_points(env, tmp_path):  # each checked once, no retry loop: one line each
        broker, database = out.stderr.strip().splitlines()
        assert out.returncode == 1 and broker.startswith(
            f"conclave worker: error [broker.unreachable] the broker at redis://:***@127.0.0.1:{down}/0 "
            "(CONCLAVE_BROKER_URL) does not answer: "), out.stderr[-2000:]
        assert database.startswith(
            f"conclave worker: error [database.unreachable] the database at postgresql://postgres:***@127.0.0.1:{down}"
            "/conclave (CONCLAVE_DATABASE_URL) does not answer: "), out.stderr
        assert "refused" in broker.lower() and "refused" in database.lower()


def test_a_worker_that_cannot_serve_its_metrics_stops_instead_of_running_on(settings: Any, tmp_path: Path) -> None:
    """Set-up done as the worker becomes ready (its housekeeper, its metrics) cannot fail
    silently: Celery would log the handler's error and run on without it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {**settings_env(settings), "CONCLAVE_METRICS_PORT": str(taken.getsockname()[1]),
               "CONCLAVE_LOG_FORMAT": "text"}
        for out in both_entry_points(env, tmp_path, "--without-mingle", "--without-gossip"):
            said = out.stdout + out.stderr
            assert out.returncode == 1, said[-2000:]
            assert "the worker stops: serving the metrics failed: OSError" in said, said[-2000:]
            assert "Signal handler" not in said and "Traceback" not in said


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


def test_a_worker_with_a_logfile_writes_nothing_on_the_terminal(settings: Any, tmp_path: Path) -> None:
    """`conclave worker --logfile worker.log &` beside `conclave run`: what the worker says — the
    warning Celery prints before it sets up logging (running as root) included — goes to the
    file, never over the live display in the terminal they share."""
    env = settings_env(settings)
    for form in (["--logfile", "worker.log"], ["-f", "worker.log"], ["--logfile=worker.log"]):
        cwd = tmp_path / form[0].strip("-").split("=")[0] / str(len(form))
        cwd.mkdir(parents=True)
        terminal = cwd.parent / f"terminal-{len(form)}.txt"  # the shell's stdout and stderr
        with open(terminal, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "--pool", "solo", *form],
                                    cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        log = cwd / "worker.log"
        try:
            deadline = time.monotonic() + 60
            while " ready." not in (log.read_text() if log.exists() else ""):
                assert proc.poll() is None and time.monotonic() < deadline, terminal.read_text()[-2000:]
                time.sleep(0.2)
        finally:
            terminate(proc)
        assert terminal.read_text() == "", terminal.read_text()[-2000:]
        if os.geteuid() == 0:  # Celery warns a root worker before its logging exists: in the file too
            assert "SecurityWarning" in log.read_text()
