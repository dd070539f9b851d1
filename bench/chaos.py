"""Chaos run: many board plans on a worker fleet that keeps being killed.

Starts N ``celery -A tasks worker`` subprocesses — no beat: every worker reconciles on its
own under the fleet-wide lock (``--beat`` adds one, optional and harmless) — submits M board
plans on the offline model at a realistic latency, SIGKILLs a random worker every few seconds
(the one reconciling as likely as any) and restarts it, restarts the broker's Redis once
mid-run (it comes back empty, as a default install does), cuts every Postgres connection and
refuses new ones for a few seconds once (the workers reach Postgres through a TCP proxy the
run controls), then waits for every plan and prints one line per figure, read from the
database:

    plans completed / submitted
    phases run more than once (attempts > 1) and the model calls duplicated
    duplicate results (content rows beyond one per phase)      — must be 0
    usage rows not matching the model calls that succeeded      — must be 0
    wall time

It creates its own Postgres database and its own Redis (a private
``redis-server`` on a free port, or ``--redis-url`` with a database number of
its own, which is then FLUSHDB-ed instead of restarted), and removes both.

    python bench/chaos.py                 # defaults: 3 workers, 50 plans
    python bench/chaos.py --workers 4 --plans 100 --kill-every 3
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

PG_ADMIN = os.environ.get("CONCLAVE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=3, help="worker subprocesses (default 3)")
    p.add_argument("--concurrency", type=int, default=16, help="threads per worker (default 16)")
    p.add_argument("--plans", type=int, default=50, help="board plans to submit (default 50)")
    p.add_argument("--latency", type=float, default=0.03, help="offline model: seconds per chunk (default 0.03)")
    p.add_argument("--words", type=int, default=80, help="offline model: words per answer (default 80)")
    p.add_argument("--kill-every", type=float, default=5.0, help="seconds between SIGKILLs (default 5)")
    p.add_argument("--redis-fault-at", type=float, default=0.35,
                   help="restart/flush Redis once this share of phases has completed (default 0.35)")
    p.add_argument("--redis-url", default=None,
                   help="use this Redis URL (with a db number of its own) and FLUSHDB it instead of "
                        "starting and restarting a private redis-server")
    p.add_argument("--pg-outage-at", type=float, default=0.6,
                   help="cut Postgres once this share of phases has completed (default 0.6; above 1: never)")
    p.add_argument("--pg-outage-seconds", type=float, default=3.0, help="how long it refuses connections")
    p.add_argument("--beat", action="store_true", help="also run conclave's beat (the fleet does not need it)")
    p.add_argument("--timeout", type=float, default=270.0, help="give up waiting after this many seconds")
    p.add_argument("--seed", type=int, default=None, help="random seed for the kills")
    return p.parse_args(argv)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    """A private redis-server (restartable), or a db number on an existing one (flushable)."""

    def __init__(self, url: str | None, workdir: Path) -> None:
        self.private = url is None
        self.port = free_port() if url is None else 0
        self.url = url or f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not self.private:
            return
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        import redis

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url, socket_timeout=1).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def fault(self) -> str:
        import redis

        if self.private:
            self.stop()
            time.sleep(1.0)
            self.start()
            return "restarted (empty)"
        redis.Redis.from_url(self.url).flushdb()
        return "flushed"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class Proc:
    """A celery subprocess in its own process group (so SIGKILL takes all of it)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name, self.args, self.env, self.logdir = name, args, env, logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.crashes = 0

    def start(self) -> None:
        with open(self.logdir / f"{self.name}.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "tasks", *self.args], cwd=ROOT,
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            self.kills += 1

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def board(i: int, latency: float, words: int) -> dict[str, Any]:
    plan: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "board.yaml").read_text())
    plan["title"] = f"Chaos board {i}"
    plan["task_id"] = f"chaos-{i}"
    plan["models"] = {"default": {"provider": "offline", "options": {"latency": latency, "words": words}}}
    for expert in plan.get("experts", []):
        expert.pop("model", None)
    plan["moderator"].pop("model", None)
    return plan


FIGURES = """
WITH per_phase AS (
  SELECT ph.id, ph.status, ph.attempt,
         (SELECT count(*) FROM contents c WHERE c.id = ph.content_id) AS contents,
         -- a usage row is its phase's cost iff its attempt completed the phase (derived, not stored)
         (SELECT count(*) FROM usage u WHERE u.phase_id = ph.id AND ph.status = 'completed'
                                          AND u.attempt = ph.attempt) AS counted,
         (SELECT count(*) FROM usage u WHERE u.phase_id = ph.id AND NOT (ph.status = 'completed'
                                          AND u.attempt = ph.attempt)) AS waste
  FROM phases ph
)
SELECT
  count(*) AS phases,
  count(*) FILTER (WHERE status = 'completed') AS completed,
  count(*) FILTER (WHERE attempt > 1) AS rerun,
  coalesce(sum(waste), 0) AS waste_rows,
  coalesce(sum(greatest(contents - 1, 0)), 0) AS duplicate_results,
  count(*) FILTER (WHERE status = 'completed' AND contents = 0) AS lost_results,
  count(*) FILTER (WHERE status <> 'completed' AND contents > 0) AS stray_results,
  count(*) FILTER (WHERE status = 'completed' AND counted <> 1) AS usage_mismatches
FROM per_phase
"""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="conclave-chaos-"))
    dbname = f"conclave_chaos_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{dbname}"'))
    db_url = PG_ADMIN.rsplit("/", 1)[0] + f"/{dbname}"
    redis_srv = Redis(args.redis_url, workdir)
    from sqlalchemy.engine import make_url

    from tests.integration.durability import TcpProxy

    pg = make_url(db_url)
    proxy = TcpProxy(pg.host or "127.0.0.1", pg.port or 5432).accept()
    fleet_db_url = pg.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    procs: list[Proc] = []
    client: Any = None
    keep_logs = False
    try:
        from orchestrator.client.conclave import Conclave
        from orchestrator.core.settings import Settings
        from storage import upgrade

        upgrade(db_url)
        redis_srv.start()
        settings = Settings(database_url=db_url, broker_url=redis_srv.url, concurrency=args.concurrency,
                            lease_seconds=3.0, requeue_after=4.0, reconcile_interval=1.0,
                            db_retry_seconds=60.0, resume_guard_seconds=5.0,
                            max_active_plans=max(1000, args.plans), submit_rate=0,
                            allow_plan_models=True)  # the bench's plans drive the offline model's options
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
        env.update(settings.model_copy(update={"database_url": fleet_db_url}).environ())  # through the proxy
        env["CONCLAVE_LOG_LEVEL"] = "WARNING"
        for i in range(args.workers):
            procs.append(Proc(f"worker{i}", ["worker", "--pool", "threads", "--concurrency",
                                             str(args.concurrency), "-Q", "conclave", "--hostname",
                                             f"chaos{i}@%h", "--without-mingle", "--without-gossip",
                                             "--loglevel", "WARNING"], env, workdir))
        others = [Proc("beat", ["beat", "--schedule", str(workdir / "beat.schedule"), "--loglevel", "WARNING"],
                       env, workdir)] if args.beat else []
        for p in [*procs, *others]:
            p.start()
        client = Conclave(settings, worker=False)

        started = time.monotonic()
        plan_ids = [client.submit(board(i, args.latency, args.words)) for i in range(args.plans)]
        total_phases = _scalar(client, "SELECT count(*) FROM phases")
        print(f"submitted {len(plan_ids)} plans ({total_phases} phases) to {args.workers} workers",
              flush=True)

        next_kill = time.monotonic() + args.kill_every
        redis_faulted = pg_cut = False
        deadline = started + args.timeout
        while time.monotonic() < deadline:
            running = _scalar(client, "SELECT count(*) FROM plans WHERE status = 'running'")
            if running == 0:
                break
            done = _scalar(client, "SELECT count(*) FROM phases WHERE status = 'completed'")
            if not redis_faulted and done >= args.redis_fault_at * total_phases:
                what = redis_srv.fault()
                redis_faulted = True
                print(f"[{time.monotonic() - started:6.1f}s] redis {what} at {done}/{total_phases} phases",
                      flush=True)
            if not pg_cut and done >= args.pg_outage_at * total_phases:
                proxy.refuse()  # every connection cut, new ones refused
                pg_cut = True
                print(f"[{time.monotonic() - started:6.1f}s] postgres cut for {args.pg_outage_seconds:g}s at "
                      f"{done}/{total_phases} phases", flush=True)
                time.sleep(args.pg_outage_seconds)
                proxy.accept()
            for p in [*procs, *others]:  # a supervisor's restart policy: kombu 5.7 can crash a worker
                if p.proc is not None and (code := p.proc.poll()) is not None:  # when Redis goes away
                    p.crashes += 1
                    p.start()
                    print(f"[{time.monotonic() - started:6.1f}s] {p.name} exited on its own "
                          f"(code {code}), restarted", flush=True)
            if time.monotonic() >= next_kill:
                victim = rng.choice(procs)
                victim.kill()
                victim.start()
                next_kill = time.monotonic() + args.kill_every
                print(f"[{time.monotonic() - started:6.1f}s] SIGKILL {victim.name}, restarted "
                      f"({done}/{total_phases} phases done)", flush=True)
            time.sleep(0.25)
        wall = time.monotonic() - started

        with client.local.db.engine.connect() as c:
            f = c.execute(text(FIGURES)).mappings().one()
            completed_plans = c.execute(text("SELECT count(*) FROM plans WHERE status = 'completed'")).scalar()
            by_status = dict(c.execute(text("SELECT status, count(*) FROM plans GROUP BY status")).all())
        kills = sum(p.kills for p in procs)
        crashes = sum(p.crashes for p in [*procs, *others])
        print(f"plans completed / submitted: {completed_plans} / {len(plan_ids)}"
              + ("" if completed_plans == len(plan_ids) else f"  {by_status}"))
        print(f"phases run more than once: {f['rerun']} of {f['phases']} (attempts > 1: an earlier attempt "
              f"was killed or lost its lease); model calls duplicated: {f['waste_rows']} (calls that "
              f"finished for an attempt that then did not complete: usage kept as waste)")
        print(f"duplicate results: {f['duplicate_results']} (content rows beyond one per phase); "
              f"lost results: {f['lost_results'] + f['stray_results']}")
        print(f"usage rows not matching the model calls that succeeded: {f['usage_mismatches']}")
        print(f"wall time: {wall:.1f}s ({kills} worker SIGKILLs, {crashes} unprompted exits restarted, "
              f"redis {'faulted once' if redis_faulted else 'not faulted'}, postgres "
              f"{'cut once' if pg_cut else 'not cut'}, {'with' if args.beat else 'no'} beat)")
        ok = (completed_plans == len(plan_ids) and f["duplicate_results"] == 0 and f["lost_results"] == 0
              and f["stray_results"] == 0 and f["usage_mismatches"] == 0)
        if not ok:
            keep_logs = True
            print(f"worker logs kept in {workdir}")
        return 0 if ok else 1
    finally:
        for p in procs:
            p.stop()
        for p in locals().get("others", []):
            p.stop()
        proxy.close()
        if client is not None:
            client.close()
        redis_srv.stop()
        if not keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        with admin.connect() as c:
            c.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{dbname}'"))
            c.execute(text(f'DROP DATABASE IF EXISTS "{dbname}"'))
        admin.dispose()


def _scalar(client: Any, sql: str) -> int:
    with client.local.db.engine.connect() as c:
        return int(c.execute(text(sql)).scalar() or 0)


if __name__ == "__main__":
    sys.exit(main())
