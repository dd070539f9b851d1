"""An eval through the fleet against the same number of plain plans, in one run: phases per
second, and the ratio of seconds per phase (issue 19: an eval costs no more per phase than the
hot path does).

Both sides run on one Celery worker (threads, --concurrency) over the same Postgres and Redis,
with the offline model at zero latency, at most --in-flight plans running at once, and are
followed the same way (one listing of the plans still running per poll, the whole view of each
plan once it has ended):

- plain: N boards of 5 experts over 2 rounds, no answer declared (14 phases each), in two
  halves that bracket the eval, so a drift of the machine or the growing tables weighs on both;
- eval: ``conclave eval``'s harness over N generated items, its panel the same board deciding by
  plurality vote (each expert's verdicts read and stored, a decision phase: 15 phases each).

Usage: python bench/eval_throughput.py [--items 1000] [--in-flight 32] [--concurrency 8]
                                       [--redis redis://127.0.0.1:6379/13]
Needs Postgres and Redis on 127.0.0.1 (make services). Creates and drops its own database.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import drop_database, new_database  # noqa: E402
from bench.throughput import start_worker, stop  # noqa: E402

REDIS = "redis://127.0.0.1:6379/13"
EXPERTS = [{"name": n, "role": "Analyst", "model": "solver"} for n in ("Ada", "Bo", "Cy", "Di", "Ed")]
SOLVER = {"provider": "offline", "options": {"latency": 0, "words": 60, "solver": {"skill": 0.7}}}


def board(question: str) -> dict[str, Any]:
    return {"kind": "board", "title": "bench panel", "question": question, "rounds": 2,
            "moderator": {"name": "Morgan", "role": "Chair", "model": "solver"}, "experts": EXPERTS}


def worker_cpu(pid: int) -> float:
    """CPU seconds the worker process has used (user + system: its threads pool is one
    process): a measure of the work per phase that the machine's other load disturbs less."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def still_running(client: Any, label: str) -> set[str]:
    """The ids of the plans with ``label`` that are running, every page of the listing."""
    ids: set[str] = set()
    cursor = None
    while True:
        page = client.list_plans(status="running", label=label, limit=200, cursor=cursor)
        ids.update(p["id"] for p in page["plans"])
        cursor = page.get("next_cursor")
        if not cursor:
            return ids


def plain(client: Any, n: int, in_flight: int, first: int = 0) -> tuple[float, int]:
    """N plain boards, at most ``in_flight`` running, followed as the harness follows its
    plans: wall seconds and phases run."""
    t0, phases, running, sent = time.perf_counter(), 0, [], 0
    while sent < n or running:
        while sent < n and len(running) < in_flight:
            k = first + sent
            plan = {**board(f"What is {k % 90 + 2} + {k % 7 + 2}?"), "models": {"solver": SOLVER},
                    "labels": ["bench=plain"]}
            running.append(client.submit(plan))
            sent += 1
        listed, still = still_running(client, "bench=plain"), []
        for plan_id in running:
            view = None if plan_id in listed else client.get(plan_id)
            if view is not None and view.final:
                assert view.status == "completed", (plan_id, view.status, view.error)
                phases += len(view.phases)
            else:
                still.append(plan_id)
        running = still
        time.sleep(0.05)
    return time.perf_counter() - t0, phases


def evaluation(client: Any, n: int, in_flight: int, folder: Path) -> tuple[float, int]:
    """The harness over N generated items, its panel the same board: wall seconds and phases."""
    from orchestrator.evaluation.harness import Harness
    from orchestrator.evaluation.spec import resolve

    template = {**board("{question}"), "decide": "vote"}
    (folder / "panel.yaml").write_text(yaml.safe_dump(template))
    (folder / "bench.yaml").write_text(yaml.safe_dump({
        "name": "bench", "generate": {"n": n, "options": 2, "seed": 0}, "plan": "panel.yaml",
        "models": {"solver": SOLVER}, "scoring": "exact"}))
    t0 = time.perf_counter()
    result = Harness(client, resolve(folder / "bench.yaml"), in_flight=in_flight, poll=0.05).run()
    wall = time.perf_counter() - t0
    assert len(result.outcomes) == n and all(o.status == "completed" for o in result.outcomes)
    phases = sum(len(client.get(o.plan_id).phases) for o in result.outcomes)
    return wall, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
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
    settings = Settings(database_url=url, broker_url=args.redis, pool="threads", concurrency=args.concurrency,  # type: ignore[arg-type]
                        allow_plan_models=True, submit_rate=0, max_active_plans=100_000)
    worker = start_worker(settings, "threads", args.concurrency, log)
    client = Conclave(settings, worker=False)
    try:
        half = args.items // 2
        cpu0 = worker_cpu(worker.pid)
        before_wall, before_phases = plain(client, half, args.in_flight)
        cpu1 = worker_cpu(worker.pid)
        with tempfile.TemporaryDirectory() as folder:
            eval_wall, eval_phases = evaluation(client, args.items, args.in_flight, Path(folder))
        cpu2 = worker_cpu(worker.pid)
        after_wall, after_phases = plain(client, args.items - half, args.in_flight, first=half)
        cpu3 = worker_cpu(worker.pid)
        plain_wall, plain_phases = before_wall + after_wall, before_phases + after_phases
        plain_cpu, eval_cpu = (cpu1 - cpu0) + (cpu3 - cpu2), cpu2 - cpu1
    finally:
        client.close()
        stop(worker)
        drop_database(name)
    plain_rate, eval_rate = plain_phases / plain_wall, eval_phases / eval_wall
    print(f"plain: {args.items} boards, {plain_phases} phases in {plain_wall:.1f}s: {plain_rate:.1f} phases/s"
          f" (before the eval {before_phases / before_wall:.1f}, after it {after_phases / after_wall:.1f})")
    print(f"eval:  {args.items} items, {eval_phases} phases in {eval_wall:.1f}s: {eval_rate:.1f} phases/s")
    plain_ms, eval_ms = 1000 * plain_cpu / plain_phases, 1000 * eval_cpu / eval_phases
    print(f"worker CPU per phase: plain {plain_ms:.2f} ms, eval {eval_ms:.2f} ms")
    print(f"RATIO eval / plain plans, seconds per phase: {plain_rate / eval_rate:.2f}x (goal <= 1x the hot path's)")
    print(f"RATIO eval / plain plans, worker CPU per phase: {eval_ms / plain_ms:.2f}x")


if __name__ == "__main__":
    main()
