"""Throughput benchmark: ratios measured in one run (this machine class is noisy).

1. Pool: the same board plans, with a model-like latency, on a threads pool of 32
   versus prefork with 2 processes — why the threads pool is the default.
2. Overhead: Conclave's cost per phase on the critical path (claim, prompt, offline
   model at zero latency, fenced completion, advance) versus a bare Celery chain hop
   on the same Redis — what durability costs per step.

Usage: python bench/throughput.py [--boards 6] [--latency 0.02] [--redis redis://127.0.0.1:6379/13]
Needs Postgres and Redis on 127.0.0.1 (make services). Creates and drops its own database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import drop_database, new_database  # noqa: E402

REDIS = "redis://127.0.0.1:6379/13"


def board(i: int, latency: float) -> dict[str, Any]:
    return {
        "kind": "board", "title": f"bench {i}", "question": f"Should we open office number {i}?", "rounds": 2,
        "models": {"default": {"provider": "offline", "options": {"latency": latency, "words": 80}}},
        "moderator": {"name": "Morgan", "role": "Chair"},
        "experts": [{"name": n, "role": r} for n, r in
                    [("Dana", "CFO"), ("Ravi", "CTO"), ("Sofia", "Head of Sales"), ("Tomas", "General Counsel")]],
    }


def env_for(settings: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env.update(settings.environ())
    return env


def start_worker(settings: Any, pool: str, concurrency: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", pool, "--concurrency", str(concurrency),
           "-Q", "conclave", "--without-mingle", "--without-gossip", "--loglevel", "WARNING",
           "--hostname", f"bench-{uuid.uuid4().hex[:6]}@%h"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env_for(settings), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    time.sleep(3.0)  # worker boot; not part of any measurement
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    import signal

    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def run_boards(client: Any, n: int, latency: float) -> tuple[float, int]:
    t0 = time.perf_counter()
    ids = [client.submit(board(i, latency)) for i in range(n)]
    phases = 0
    for pid in ids:
        view = client.wait(pid, timeout=900)
        assert view.status == "completed", (pid, view.status, view.error)
        phases += len(view.phases)
    return time.perf_counter() - t0, phases


def bare_hops(settings: Any, hops: int) -> float:
    """Seconds per hop of a bare Celery chain of no-op tasks on the same broker."""
    from celery import Celery, chain

    app = Celery("barebench", broker=settings.broker_url, backend=settings.broker_url, set_as_current=False)
    app.conf.update(task_default_queue="barebench", worker_prefetch_multiplier=1, task_acks_late=True)

    @app.task(name="bare.noop")
    def noop() -> None:
        return None

    from celery.contrib.testing.worker import start_worker as start

    with start(app, pool="threads", concurrency=4, perform_ping_check=False, queues=["barebench"]):
        sig = chain(*[noop.si() for _ in range(hops)])
        t0 = time.perf_counter()
        sig.apply_async().get(timeout=120, disable_sync_subtasks=False)
        return (time.perf_counter() - t0) / hops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boards", type=int, default=6)
    parser.add_argument("--latency", type=float, default=0.02, help="offline seconds between chunks")
    parser.add_argument("--redis", default=REDIS, help="a Redis database this run may flush")
    args = parser.parse_args()

    import redis

    from orchestrator.client.conclave import Conclave
    from orchestrator.core.settings import Settings
    from storage import upgrade

    name, url = new_database()
    upgrade(url)
    redis.Redis.from_url(args.redis).flushdb()
    log = Path(tempfile.gettempdir()) / f"{name}.log"
    results: dict[str, float] = {}
    try:
        for pool, conc in (("threads", 32), ("prefork", 2)):
            settings = Settings(database_url=url, broker_url=args.redis, pool=pool, concurrency=conc,  # type: ignore[arg-type]
                                allow_plan_models=True, submit_rate=0)
            worker = start_worker(settings, pool, conc, log)
            client = Conclave(settings, worker=False)
            try:
                wall, phases = run_boards(client, args.boards, args.latency)
                results[pool] = wall
                print(f"pool={pool:<8} concurrency={conc:<3} boards={args.boards} phases={phases} wall={wall:.1f}s")
            finally:
                client.close()
                stop(worker)

        settings = Settings(database_url=url, broker_url=args.redis, pool="threads", concurrency=32,  # type: ignore[arg-type]
                            allow_plan_models=True, submit_rate=0)
        worker = start_worker(settings, "threads", 32, log)
        client = Conclave(settings, worker=False)
        try:
            steps = []
            for i in range(5):  # one board at a time: 7 steps on its critical path, model latency 0
                view = client.wait(client.submit(board(100 + i, 0.0)), timeout=120, poll=0.05)
                assert view.status == "completed" and view.finished_at is not None
                elapsed = datetime.fromisoformat(view.finished_at) - datetime.fromisoformat(view.created_at)
                steps.append(elapsed.total_seconds() / 7)  # from stored timestamps, not client polling
            per_step = statistics.median(steps)
        finally:
            client.close()
            stop(worker)
        hop = bare_hops(settings, 50)
        print(f"conclave critical-path step (latency 0, median of 5 boards): {per_step * 1000:.1f} ms; "
              f"bare celery chain hop: "
              f"{hop * 1000:.1f} ms")
        print(f"RATIO prefork(2)/threads(32) wall time: {results['prefork'] / results['threads']:.1f}x")
        print(f"RATIO conclave step / bare chain hop: {per_step / hop:.1f}x")
    finally:
        drop_database(name)


if __name__ == "__main__":
    main()
