"""PgBouncer benchmark: the same boards through a worker connected to Postgres directly, then
through PgBouncer in transaction pooling mode (``CONCLAVE_DATABASE_POOLER=pgbouncer``, so no
server-side prepared statements), in one run; the ratio of phases per second (this machine
class is noisy: compare within a run).

Both legs use the worker's default connection budget (``CONCLAVE_DATABASE_POOL_SIZE``) and the
same PgBouncer pool a fleet would share (``--server-pool`` server connections). The offline
model at a small latency keeps the database on the critical path.

Usage: python bench/pgbouncer.py [--boards 16] [--latency 0.005] [--server-pool 4]
                                 [--redis redis://127.0.0.1:6379/13]
Needs Postgres and Redis on 127.0.0.1 (make services) and pgbouncer (make pgbouncer).
Creates and drops its own database.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import drop_database, new_database  # noqa: E402
from bench.throughput import REDIS, board, run_boards, start_worker, stop  # noqa: E402


def leg(settings: Any, boards: int, latency: float, log: Path) -> tuple[float, int]:
    """Seconds and phases for ``boards`` boards on one threads worker of 32 with ``settings``."""
    from orchestrator.client.conclave import Conclave

    worker = start_worker(settings, "threads", 32, log)
    client = Conclave(settings, worker=False)
    try:
        client.wait(client.submit(board(10_000, 0.0)), timeout=120)  # warm: the spec cache, the pools
        return run_boards(client, boards, latency)
    finally:
        client.close()
        stop(worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boards", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.005, help="offline seconds between chunks")
    parser.add_argument("--server-pool", type=int, default=4, help="PgBouncer's server connections")
    parser.add_argument("--redis", default=REDIS, help="a Redis database this run may flush")
    args = parser.parse_args()

    import redis

    from orchestrator.core.settings import Settings
    from storage import upgrade
    from tests.pgbouncer import PgBouncer

    name, url = new_database()
    upgrade(url)
    redis.Redis.from_url(args.redis).flushdb()
    work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    bouncer = PgBouncer(url, work, pool_size=args.server_pool).start()
    rates: dict[str, float] = {}
    try:
        for label, database_url, pooler in (("direct", url, "none"), ("pgbouncer", bouncer.url(), "pgbouncer")):
            settings = Settings(database_url=database_url, database_pooler=pooler,  # type: ignore[arg-type]
                                broker_url=args.redis, concurrency=32, allow_plan_models=True, submit_rate=0)
            wall, phases = leg(settings, args.boards, args.latency, work / f"{label}.log")
            rates[label] = phases / wall
            print(f"{label:<9} boards={args.boards} phases={phases} wall={wall:.1f}s "
                  f"phases/s={rates[label]:.1f}")
        print(f"pgbouncer: pool_mode=transaction server connections={args.server_pool}, "
              f"transactions carried={bouncer.transactions()}")
        print(f"RATIO pgbouncer/direct phases per second: {rates['pgbouncer'] / rates['direct']:.2f}x")
    finally:
        bouncer.stop()
        drop_database(name)


if __name__ == "__main__":
    main()
