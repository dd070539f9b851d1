"""An eval through the fleet against the same number of plain plans, in one run: phases per
second, and the ratio of seconds per phase (issue 19: an eval costs no more per phase than the
hot path does).

Both sides run on one Celery worker (threads, --concurrency) over the same Postgres and Redis,
with the offline model at zero latency, at most --in-flight plans running at once, and are
followed the same way (one listing of the plans still running per poll, the whole view of each
plan once it has ended):

- eval: ``conclave eval``'s harness over N generated items, its panel a board of 5 experts over
  2 rounds deciding by plurality vote (each expert's verdicts read and stored, a decision
  phase: 15 phases each);
- panels: the same N plans (the same items, the same panel) submitted and followed as plain
  plans, without the harness: the peer of the goal, so the ratio says what the eval adds;
- boards: N plain boards of the same experts with no answer declared (14 phases each): what
  deliberation itself (verdicts, the tally) costs a phase.

Each plain side runs in two halves that bracket the eval, so a drift of the machine or the
growing tables weighs on every side alike.

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


def plain_board(item: Any) -> dict[str, Any]:
    """An item's question put to the panel as a plain board: no answer, no tally."""
    return {**board(item.question), "models": {"solver": SOLVER}, "labels": ["bench=boards"]}


def plain_panel(item: Any) -> dict[str, Any]:
    """An item's plan as the eval's panel arm builds it, submitted as a plain plan."""
    return {**board(item.question), "decide": "vote", "answer": {"type": "choice", "options": list(item.choices)},
            "models": {"solver": SOLVER}, "labels": ["bench=panels"]}


def plain(client: Any, items: list[Any], in_flight: int, make: Any) -> tuple[float, int]:
    """The plans ``make`` builds of ``items``, at most ``in_flight`` running, followed as the
    harness follows its plans: wall seconds and phases run."""
    t0, phases, running, sent = time.perf_counter(), 0, [], 0
    label = make(items[0])["labels"][0]
    while sent < len(items) or running:
        while sent < len(items) and len(running) < in_flight:
            running.append(client.submit(make(items[sent])))
            sent += 1
        listed, still = still_running(client, label), []
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
    from orchestrator.evaluation.datasets import generate
    from storage import upgrade

    name, url = new_database()
    upgrade(url)
    redis.Redis.from_url(args.redis).flushdb()
    log = Path(tempfile.gettempdir()) / f"{name}.log"
    settings = Settings(database_url=url, broker_url=args.redis, pool="threads", concurrency=args.concurrency,  # type: ignore[arg-type]
                        allow_plan_models=True, submit_rate=0, max_active_plans=100_000)
    worker = start_worker(settings, "threads", args.concurrency, log)
    client = Conclave(settings, worker=False)
    items = generate(args.items, options=2, seed=0)  # the eval's items (its spec's generate)
    half = args.items // 2
    wall = {"boards": 0.0, "panels": 0.0, "eval": 0.0}
    phases = {"boards": 0, "panels": 0, "eval": 0}
    cpu = {"boards": 0.0, "panels": 0.0, "eval": 0.0}

    def side(kind: str, run: Any, *args: Any) -> None:
        c0 = worker_cpu(worker.pid)
        w, n = run(*args)
        cpu[kind] += worker_cpu(worker.pid) - c0
        wall[kind] += w
        phases[kind] += n

    try:
        for part in (items[:half], None, items[half:]):
            if part is None:
                with tempfile.TemporaryDirectory() as folder:
                    side("eval", evaluation, client, args.items, args.in_flight, Path(folder))
                continue
            for kind, make in (("panels", plain_panel), ("boards", plain_board)):
                side(kind, plain, client, part, args.in_flight, make)
    finally:
        client.close()
        stop(worker)
        drop_database(name)
    rate = {k: phases[k] / wall[k] for k in wall}
    ms = {k: 1000 * cpu[k] / phases[k] for k in cpu}
    for k, what in (("boards", "plain boards (no answer)"), ("panels", "plain panels (vote)"), ("eval", "eval")):
        print(f"{k + ':':8}{args.items} {what}, {phases[k]} phases in {wall[k]:.1f}s: {rate[k]:.1f} phases/s, "
              f"worker CPU {ms[k]:.2f} ms a phase")
    print(f"RATIO eval / plain panels, seconds per phase: {rate['panels'] / rate['eval']:.2f}x "
          "(goal <= 1x: the harness costs a phase nothing)")
    print(f"RATIO eval / plain panels, worker CPU per phase: {ms['eval'] / ms['panels']:.2f}x")
    print(f"RATIO plain panels / plain boards, worker CPU per phase: {ms['panels'] / ms['boards']:.2f}x "
          "(what verdicts and the tally cost a phase)")


if __name__ == "__main__":
    main()
