"""Fair share benchmark: one tenant's burst does not starve another (issue 20, part A).

One worker (threads, concurrency 8), the offline model with latency, fair share on
(``CONCLAVE_TENANT_MAX_IN_FLIGHT``, default 4 = half the worker). Three runs on one fresh database:

1. tenant ``quiet`` submits one board alone: its solo time;
2. tenant ``burst`` submits ``--boards`` boards alone: the burst's throughput (phases/s);
3. ``burst`` submits ``--boards`` boards and ``quiet`` one right after: quiet's time behind the
   burst, and the burst's throughput beside it.

Times come from stored timestamps (a plan's ``created_at`` to ``finished_at``; the burst from its
first submit to its last finish), not client polling. Prints two ratios:

    RATIO quiet board behind a 40-board burst / solo: X (goal <= 1.5x)
    RATIO burst throughput with quiet / burst alone: Y (goal drop < 10%)

Usage: python bench/fairness.py [--boards 40] [--latency 0.05] [--share 4] [--fleet 0] [--redis redis://127.0.0.1:6379/13]
       [--share-off] (the same runs with fair share off, for comparison)
Needs Postgres and Redis on 127.0.0.1 (make services). Creates and drops its own database.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import drop_database, new_database  # noqa: E402
from bench.throughput import start_worker, stop  # noqa: E402

REDIS = "redis://127.0.0.1:6379/13"


def board(title: str, latency: float) -> dict[str, Any]:
    """Three experts, one round: six phases (opening, three turns, summary, final)."""
    return {
        "kind": "board", "title": title, "question": f"Should we do {title}?", "rounds": 1,
        "models": {"default": {"provider": "offline", "options": {"latency": latency, "words": 40}}},
        "moderator": {"name": "Morgan", "role": "Chair"},
        "experts": [{"name": n, "role": r} for n, r in [("Dana", "CFO"), ("Ravi", "CTO"), ("Sofia", "Sales")]],
    }


def span(view: Any) -> tuple[datetime, datetime]:
    assert view.status == "completed" and view.finished_at is not None, (view.id, view.status, view.error)
    return datetime.fromisoformat(view.created_at), datetime.fromisoformat(view.finished_at)


def burst_rate(client: Any, ids: list[str]) -> tuple[float, int, float]:
    """(phases/s, phases, seconds) of the burst, first submit to last finish."""
    views = [client.wait(p, timeout=1800, poll=0.5) for p in ids]
    spans = [span(v) for v in views]
    seconds = (max(e for _, e in spans) - min(s for s, _ in spans)).total_seconds()
    phases = sum(len(v.phases) for v in views)
    return phases / seconds, phases, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boards", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.05, help="offline seconds between chunks")
    parser.add_argument("--share", type=int, default=4, help="CONCLAVE_TENANT_MAX_IN_FLIGHT")
    parser.add_argument("--fleet", type=int, default=0, help="CONCLAVE_FLEET_MAX_IN_FLIGHT (0: no fleet cap)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--redis", default=REDIS, help="a Redis database this run may flush")
    parser.add_argument("--share-off", action="store_true",
                        help="run the same with fair share off (what it replaces: one broker FIFO for everyone)")
    args = parser.parse_args()

    import redis

    from orchestrator.client.conclave import Conclave
    from orchestrator.core.settings import Settings
    from storage import upgrade

    name, url = new_database("conclave_fair")
    upgrade(url)
    redis.Redis.from_url(args.redis).flushdb()
    log = Path(tempfile.gettempdir()) / f"{name}.log"
    settings = Settings(database_url=url, broker_url=args.redis, pool="threads",  # type: ignore[arg-type]
                        concurrency=args.concurrency, allow_plan_models=True, submit_rate=0, max_active_plans=1000,
                        tenant_max_in_flight=0 if args.share_off else args.share,
                        fleet_max_in_flight=0 if args.share_off else args.fleet)
    worker = start_worker(settings, "threads", args.concurrency, log)
    quiet, burst = Conclave(settings, worker=False, tenant="quiet"), Conclave(settings, worker=False, tenant="burst")
    try:
        start, end = span(quiet.wait(quiet.submit(board("quiet solo", args.latency)), timeout=300, poll=0.2))
        solo = (end - start).total_seconds()
        print(f"quiet board alone: {solo:.1f}s  (worker concurrency {args.concurrency}, "
              f"CONCLAVE_TENANT_MAX_IN_FLIGHT={0 if args.share_off else args.share}, "
              f"CONCLAVE_FLEET_MAX_IN_FLIGHT={0 if args.share_off else args.fleet}, offline latency "
              f"{args.latency}s/chunk)")

        alone, phases, seconds = burst_rate(burst, [burst.submit(board(f"burst {i}", args.latency))
                                                    for i in range(args.boards)])
        print(f"burst alone: {args.boards} boards, {phases} phases in {seconds:.1f}s = {alone:.2f} phases/s")

        ids = [burst.submit(board(f"burst again {i}", args.latency)) for i in range(args.boards)]
        quiet_id = quiet.submit(board("quiet behind the burst", args.latency))
        start, end = span(quiet.wait(quiet_id, timeout=1800, poll=0.2))
        behind = (end - start).total_seconds()
        beside, phases, seconds = burst_rate(burst, ids)
        print(f"quiet board behind the burst: {behind:.1f}s")
        print(f"burst with quiet: {args.boards} boards, {phases} phases in {seconds:.1f}s = {beside:.2f} phases/s")
        print(f"RATIO quiet board behind a {args.boards}-board burst / solo: {behind / solo:.2f}x (goal <= 1.5x)")
        print(f"RATIO burst throughput with quiet / burst alone: {beside / alone:.2f} "
              f"(goal drop < 10%: >= 0.90)")
    finally:
        quiet.close()
        burst.close()
        stop(worker)
        time.sleep(0.5)
        drop_database(name)


if __name__ == "__main__":
    main()
