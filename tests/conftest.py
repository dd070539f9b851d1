"""Shared fixtures.

Tiers: ``tests/unit`` needs no services (a plain ``pytest`` runs only it);
``tests/integration`` and ``tests/e2e`` use the real Postgres and Redis on 127.0.0.1
(``make test`` starts them if they are down, and runs them on pytest-xdist workers).

Each test process (each xdist worker) gets its own Postgres database, copied with
``CREATE DATABASE ... TEMPLATE`` from a template migrated once (and kept, named after
a digest of the migrations, so later runs and mutant trees with the same migrations
reuse it), tables truncated per test; and its own Redis database,
``CONCLAVE_TEST_REDIS_DB`` plus the worker's index, flushed per test. SQLite tests
copy a file migrated once per process.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get("CONCLAVE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_BASE = os.environ.get("CONCLAVE_TEST_REDIS", "redis://127.0.0.1:6379")


def worker_index() -> int:
    """This test process's index among pytest-xdist's workers (``gw0``, ``gw1``, ...); 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") else 0


REDIS_DB = int(os.environ.get("CONCLAVE_TEST_REDIS_DB", "11")) + worker_index()


def migrations_digest() -> str:
    """What the schema at head is made of: the migration scripts the imported ``storage``
    runs, and the models module they import."""
    from storage.db import MIGRATIONS

    digest = hashlib.sha256()
    for path in [*sorted(Path(MIGRATIONS).rglob("*.py")), Path(MIGRATIONS).parent / "models.py"]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def pg_template(admin: Any) -> str:
    """The name of a Postgres database migrated to head, made once for these migrations:
    under an advisory lock (workers and concurrent runs wait for the first), migrated
    under a scratch name and renamed when complete, so a half-migrated template is never
    copied."""
    from sqlalchemy import text

    from storage import upgrade

    template = f"conclave_template_{migrations_digest()}"
    with admin.connect() as c:
        c.execute(text("SELECT pg_advisory_lock(hashtext('conclave_test_template'))"))
        try:
            if c.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": template}).first() is None:
                building = f"{template}_{uuid.uuid4().hex[:6]}"
                c.execute(text(f'CREATE DATABASE "{building}"'))
                upgrade(PG_ADMIN.rsplit("/", 1)[0] + f"/{building}")
                _with_retry(c, f'ALTER DATABASE "{building}" RENAME TO "{template}"')
        finally:
            c.execute(text("SELECT pg_advisory_unlock(hashtext('conclave_test_template'))"))
    return template


def _with_retry(conn: Any, statement: str) -> None:
    """Run a CREATE/ALTER DATABASE that fails while another session is still connected to
    its source (a migration's connection closing): retried for a few seconds."""
    from sqlalchemy import exc, text

    for attempt in range(50):
        try:
            conn.execute(text(statement))
            return
        except exc.OperationalError as e:
            if "is being accessed by other users" not in str(e) or attempt == 49:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh Postgres database for this test process, copied from the migrated template."""
    from sqlalchemy import create_engine, text

    name = f"conclave_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    template = pg_template(admin)
    with admin.connect() as c:
        _with_retry(c, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with admin.connect() as c:
        c.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head, once per test process."""
    from storage import upgrade

    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture()
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A SQLite database at head for this test: a copy of the template (no migration)."""
    path = tmp_path / "conclave.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture()
def redis_url() -> str:
    import redis

    url = f"{REDIS_BASE}/{REDIS_DB}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture()
def clean_db(pg_url: str) -> str:
    from sqlalchemy import create_engine, text

    engine = create_engine(pg_url)
    with engine.begin() as c:
        c.execute(text("TRUNCATE plans, phases, contents, usage, reservations, events, principals, fleet_state, evals, "
                       "webhook_endpoints, webhook_deliveries "
                       "RESTART IDENTITY CASCADE"))
    engine.dispose()
    return pg_url


#: The test cluster's model registry: ``default`` is the offline model.
REGISTRY = ROOT / "tests" / "data" / "registry.yaml"


@pytest.fixture()
def settings(clean_db: str, redis_url: str) -> Any:
    """Cluster settings with short timings so recovery paths run in seconds. The operator
    registered the offline model as ``default``, lets plans define models and runs in
    testing mode (the durability tests drive the offline model's options and its fault
    switches: ``hang``, ``fail``, …); tests of the trust boundary build their own
    settings without these opt-ins."""
    from orchestrator.core.settings import Settings

    return Settings(database_url=clean_db, broker_url=redis_url, concurrency=8, lease_seconds=3.0,
                    requeue_after=4.0, reconcile_interval=1.0, offline_latency=0.0, db_retry_seconds=30.0,
                    resume_guard_seconds=10.0, models=REGISTRY, allow_plan_models=True, testing=True)


def settings_env(settings: Any) -> dict[str, str]:
    """The ``CONCLAVE_*`` environment that reproduces ``settings`` in a subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env.update(settings.environ())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """Stop a subprocess started with ``start_new_session``: SIGTERM its group, SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class WorkerProcess:
    """A real ``celery -A tasks worker`` subprocess (optionally with beat)."""

    def __init__(self, settings: Any, log_dir: Path, *, beat: bool = False, concurrency: int = 8,
                 name: str | None = None, pool: str = "threads") -> None:
        self.settings = settings
        self.name = name or f"w{uuid.uuid4().hex[:6]}"
        self.log_path = log_dir / f"{self.name}.log"
        self.beat = beat
        self.concurrency = concurrency
        self.pool = pool
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: float = 30.0) -> WorkerProcess:
        self.launch()
        return self.wait_ready(wait)

    def launch(self) -> WorkerProcess:
        """Spawn the subprocess without waiting for it (start several, then wait_ready each)."""
        cmd = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", self.pool,
               "--concurrency", str(self.concurrency), "-Q", "conclave", "--hostname", f"{self.name}@%h",
               "--without-mingle", "--without-gossip", "--loglevel", "INFO"]
        if self.beat:
            cmd += ["-B", "--schedule", str(self.log_path.with_suffix(".beat"))]
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=settings_env(self.settings), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, wait: float = 30.0) -> WorkerProcess:
        assert self.proc is not None
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if b" ready." in self.log_path.read_bytes():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready in {wait}s: {self.log_path.read_text()[-2000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture()
def workers(settings: Any, tmp_path: Path) -> Iterator[Any]:
    """Factory: ``workers(beat=True)`` starts a worker subprocess; all are stopped at teardown."""
    started: list[WorkerProcess] = []

    def start(**kwargs: Any) -> WorkerProcess:
        w = WorkerProcess(kwargs.pop("settings", settings), tmp_path, **kwargs).start()
        started.append(w)
        return w

    def start_many(n: int, **kwargs: Any) -> list[WorkerProcess]:
        """Start ``n`` workers at once (``beat=True`` puts beat on the first only)."""
        beat = kwargs.pop("beat", False)
        chosen = kwargs.pop("settings", settings)
        ws = [WorkerProcess(chosen, tmp_path, beat=beat and i == 0, **kwargs) for i in range(n)]
        started.extend(ws)
        for w in ws:
            w.launch()
        return [w.wait_ready() for w in ws]

    start.many = start_many  # type: ignore[attr-defined]
    yield start
    for w in started:
        w.stop()


@pytest.fixture()
def client(settings: Any) -> Iterator[Any]:
    """A cluster client (no embedded worker) on the test Postgres and Redis."""
    from orchestrator.client.conclave import Conclave

    c = Conclave(settings, worker=False)
    yield c
    c.close()


# ---------------------------------------------------------------- fault injection (durability tests)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A private, disposable ``redis-server`` (no persistence, like a default install's
    restart): tests may FLUSHALL it or kill and restart it without touching the
    machine's shared Redis."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_dir / f"redis-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        import redis

        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                 "--appendonly", "no", "--dir", str(self.log_path.parent)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url(), socket_timeout=1).ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def flushall(self) -> None:
        import redis

        redis.Redis.from_url(self.url(), socket_timeout=5).flushall()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self, down_for: float = 0.0) -> None:
        """SIGKILL and start again on the same port: it comes back empty."""
        self.kill()
        time.sleep(down_for)
        self.start()


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.kill()


@pytest.fixture()
def private_settings(clean_db: str, redis_server: RedisServer) -> Any:
    """Like ``settings``, but the broker, results and bus live on a private Redis
    (override ``settings`` with it in a module to run ``workers``/``client`` there)."""
    from orchestrator.core.settings import Settings

    return Settings(database_url=clean_db, broker_url=redis_server.url(0), concurrency=8, lease_seconds=3.0,
                    requeue_after=4.0, reconcile_interval=1.0, offline_latency=0.0, db_retry_seconds=30.0,
                    resume_guard_seconds=10.0, models=REGISTRY, allow_plan_models=True, testing=True)
