"""The durable hot path against its goals (issue 9, goals 2 and 3), measured in one run.

Goal 2 — SQL statements per completed phase, COMMITs included, counted in the WORKER with
SQLAlchemy events (``tests.sqlcount.StatementCounter``: every cursor execute plus every
COMMIT/ROLLBACK of a real transaction), for 5 board plans and for a 200-phase team plan,
with claim and completion shown separately (they must not grow with the plan). The worker
runs in this process (a real Celery ``WorkController`` on the threads pool, consuming from
Redis) so its engine can be counted; the submitter (client) has its own engine and its own
count. BEGINs (psycopg sends BEGIN as a round trip of its own) and pings of idle connections are
printed beside, as round trips, but are not statements.

Goal 3 — overhead per critical-path step at zero model latency, against bare Celery
canvases of the same shape (``bench/bare.py``: Conclave's Celery configuration,
chain(t, chord(4 t, t), chord(4 t, t), t, done)): one of no-op tasks (what Celery alone
costs), and the peer doing the same work without durability — each task makes the same
offline model call a board's phase made (its requests recorded in the in-process run),
publishes each chunk to Redis, passes the texts on as Celery results and stores the text
with one INSERT. The ratio to that peer is what durability costs. All run as worker
subprocesses on the same Redis, interleaved, one canvas at a time; a board's steps are
measured from its stored timestamps (created → finished, 7 steps), a bare canvas from the
send to the time its last task stored.

Usage: python bench/hotpath.py [--boards 5] [--runs 7] [--redis redis://127.0.0.1:6379/13]
       [--share N] (fair share on, every plan within its share) [--statements-only] (goal 2 only)
Needs Postgres and Redis on 127.0.0.1 (make services). Creates and drops its own database;
flushes the Redis database it is given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import drop_database, new_database  # noqa: E402
from bench.throughput import env_for, start_worker, stop  # noqa: E402

CLAIM = ("storage.phases.claim_phase", "storage.phases.release_waiting", "storage.plans.get_spec",
         "storage.fairshare.claim")  # fair share: the claim under the share's lock
USAGE = ("storage.usage.record_usage",)
COMPLETE = ("storage.phases.complete_phase", "storage.phases.fail_phase")
HEARTBEAT = ("storage.phases.renew_leases",)
EXPERTS = [("Dana", "CFO"), ("Ravi", "CTO"), ("Sofia", "Head of Sales"), ("Tomas", "General Counsel")]


def board(i: int, latency: float, words: int = 80) -> dict[str, Any]:
    return {
        "kind": "board", "title": f"bench {i}", "question": f"Should we open office number {i}?", "rounds": 2,
        "models": {"default": {"provider": "offline", "options": {"latency": latency, "words": words}}},
        "moderator": {"name": "Morgan", "role": "Chair"},
        "experts": [{"name": n, "role": r} for n, r in EXPERTS],
    }


def team200(latency: float) -> dict[str, Any]:
    """200 phases: 10 lanes of 19-20 expert phases side by side, then the synthesis."""
    lanes = [20] * 9 + [19]
    phases = [{"id": f"l{lane}-{step}", "expert": f"E{lane}", "prompt": "Carry the analysis one step further.",
               "depends_on": [f"l{lane}-{step - 1}"] if step else []}
              for lane, n in enumerate(lanes) for step in range(n)]
    return {"kind": "team", "title": "bench team of 200", "question": "Should we open an office in Lisbon?",
            "divergence": "off",
            # a window the synthesis of 199 inputs fits in: no summariser calls, one model call per phase
            "models": {"default": {"provider": "offline", "context_window": 1_000_000,
                                   "options": {"latency": latency, "words": 20}}},
            "experts": [{"name": f"E{i}", "role": "Analyst"} for i in range(10)], "phases": phases,
            "synthesis": {"expert": "E0", "depends_on": [f"l{i}-{n - 1}" for i, n in enumerate(lanes)]}}


# ---------------------------------------------------------------- goal 2: statements


def count_statements(settings: Any, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run ``docs`` to completion on an in-process worker; the statements each side sent."""
    from celery.contrib.testing.worker import start_worker as in_process

    from orchestrator.client.conclave import Conclave
    from orchestrator.control.coordinator import Coordinator
    from orchestrator.control.dispatch import CeleryDispatcher
    from orchestrator.core.bus import RedisBus
    from orchestrator.fleet.celery_app import QUEUE, Shared, build_app, share
    from tasks import runtime
    from tests.sqlcount import StatementCounter

    app = build_app(settings)
    db = settings.open_database()  # the worker's budget (CONCLAVE_DATABASE_POOL_SIZE), as tasks.runtime opens it
    bus = RedisBus(settings.redis_url or "")
    share(app, Shared(settings, db, bus, Coordinator(db, settings, CeleryDispatcher(app), bus)))
    runtime.current(app)
    worker, submitter = StatementCounter().attach(db.engine), StatementCounter()
    client = Conclave(settings, worker=False)
    submitter.attach(client.local.db.engine)
    try:
        with in_process(app, pool="threads", concurrency=settings.concurrency, perform_ping_check=False,
                        queues=[QUEUE], loglevel="WARNING"):
            worker.reset()
            t0 = time.perf_counter()
            ids = [client.submit(doc) for doc in docs]
            phases = 0
            for pid in ids:
                view = client.wait(pid, timeout=900, poll=0.5)
                assert view.status == "completed", (pid, view.status, view.error)
                phases += len(view.phases)
            wall = time.perf_counter() - t0
            time.sleep(0.5)  # the last advance's writes land before the count is read
            counts = {"worker": worker.snapshot(), "submitter": submitter.snapshot()}
    finally:
        client.close()
        worker.detach()
        submitter.detach()
        db.dispose()
    return {"phases": phases, "wall": wall, **counts}


def report_statements(name: str, r: dict[str, Any]) -> float:
    n = r["phases"]
    w: Counter[str] = r["worker"]["statements"]

    def per(prefixes: tuple[str, ...], c: Counter[str] = w) -> float:
        return sum(v for k, v in c.items() if k.startswith(prefixes)) / n

    total = sum(w.values()) / n
    rest = Counter({k: v for k, v in w.items() if not k.startswith(CLAIM + USAGE + COMPLETE + HEARTBEAT)})
    sub = sum(r["submitter"]["statements"].values()) / n
    begins = sum(r["worker"]["begins"].values()) / n
    pings = sum(r["worker"]["pings"].values()) / n
    print(f"[goal 2] {name}: {n} phases completed in {r['wall']:.1f}s")
    print(f"  worker statements per completed phase: {total:.2f}  (goal <= 8)   "
          f"with the submitter: {total + sub:.2f}")
    print(f"    claim {per(CLAIM):.2f} | usage {per(USAGE):.2f} | completion {per(COMPLETE):.2f} | "
          f"heartbeat {per(HEARTBEAT):.2f} | advance & rest {sum(rest.values()) / n:.2f}")
    print(f"    round trips beside statements, per phase: BEGIN {begins:.2f}, ping of an idle connection {pings:.2f}")
    print(f"    worker statements by repository call: {dict(sorted(w.items()))}")
    return total


# ---------------------------------------------------------------- goal 3: overhead per step


def overhead(settings: Any, runs: int, log: Path, calls: list[dict[str, Any]]) -> tuple[float, float, float]:
    """Median seconds per critical-path step: a Conclave board at zero model latency, the bare
    canvas of the same shape of no-op tasks, and the bare canvas doing the board's work
    (``calls``: its requests); interleaved, one canvas in flight at a time."""
    import subprocess

    import redis
    from sqlalchemy import create_engine, text

    from bench.bare import board_canvas, working_canvas
    from orchestrator.client.conclave import Conclave
    from orchestrator.fleet.celery_app import build_app

    conclave_worker = start_worker(settings, "threads", 32, log)
    bare_cmd = [sys.executable, "-m", "celery", "-A", "bench.bare", "worker", "--pool", "threads",
                "--concurrency", "32", "-Q", "bare", "--without-mingle", "--without-gossip", "--loglevel", "WARNING",
                "--hostname", f"bare-{uuid.uuid4().hex[:6]}@%h"]
    pg_url = settings.effective_database_url.replace("postgresql+psycopg://", "postgresql://")
    engine = create_engine(settings.effective_database_url)
    with engine.begin() as c:
        c.execute(text("CREATE TABLE IF NOT EXISTS bare_results (id bigserial PRIMARY KEY, key text, text text)"))
    engine.dispose()
    with open(log, "ab") as out:
        bare_worker = subprocess.Popen(bare_cmd, cwd=ROOT, env=env_for(settings) | {"BENCH_PG_URL": pg_url}, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(3.0)
    client = Conclave(settings, worker=False)
    sender = build_app(settings)
    r = redis.Redis.from_url(settings.broker_url)
    ours, bare, working = [], [], []

    def bare_step(canvas: Any, key: str) -> float:
        t0 = time.time()
        canvas.apply_async()
        while (end := r.get(key)) is None:
            time.sleep(0.005)
        return (float(end) - t0) / 7

    try:
        for i in range(runs + 1):  # the first of each warms up (connections, imports)
            view = client.wait(client.submit(board(100 + i, 0.0)), timeout=120, poll=0.05)
            assert view.status == "completed" and view.finished_at is not None
            took = datetime.fromisoformat(view.finished_at) - datetime.fromisoformat(view.created_at)
            key, key2 = f"bare:{uuid.uuid4().hex}", f"bare:{uuid.uuid4().hex}"
            noop = bare_step(board_canvas(sender, 4, 2, key), key)
            worked = bare_step(working_canvas(sender, calls, 4, key2), key2)
            if i:
                ours.append(took.total_seconds() / 7)
                bare.append(noop)
                working.append(worked)
    finally:
        client.close()
        stop(conclave_worker)
        stop(bare_worker)
    engine = create_engine(settings.effective_database_url)
    with engine.connect() as c:  # the peer did the work: every phase's text, none empty
        stored, empty = c.execute(text("SELECT count(*), count(*) FILTER (WHERE length(text) < 100) "
                                       "FROM bare_results")).one()
    engine.dispose()
    assert (stored, empty) == (len(calls) * (runs + 1), 0), (stored, empty)
    return statistics.median(ours), statistics.median(bare), statistics.median(working)


def where_time_goes(settings: Any, boards: int) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Mean milliseconds per phase of each part of running it, in this process, without
    Celery (the canvases are run by hand, one phase at a time): the same runner, Postgres
    and Redis bus as a worker's. What a critical-path step costs besides the Celery hop."""
    from orchestrator.control.coordinator import Coordinator
    from orchestrator.control.dispatch import RecordingDispatcher
    from orchestrator.core.bus import RedisBus
    from orchestrator.gateway.model_gateway import default_providers
    from orchestrator.plan.canvas import Advance, Chain, Group, Run, Step
    from storage import connect
    from tasks.lease import Lease
    from tasks.runner import PhaseRunner

    db = connect(settings.effective_database_url)
    bus = RedisBus(settings.redis_url or "")
    dispatcher = RecordingDispatcher()
    coordinator = Coordinator(db, settings, dispatcher, bus)
    runner = PhaseRunner(db, settings, bus, default_providers())
    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    calls_made: list[dict[str, Any]] = []

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0
                calls[name] += 1
        return wrapper

    for name in ("claim", "execute", "publish_text", "record_usage", "complete"):
        setattr(runner, name, timed(name, getattr(runner, name)))
    prepare = runner.prepare

    def recorded(work: Any, model: str | None = None) -> Any:  # the first board's requests, for the peer's work
        spec, request = prepare(work, model)
        if len(calls_made) < 12:
            calls_made.append({
                "key": work.key, "title": _title(work), "system": request.system, "prompt": request.prompt,
                "hints": dict(request.hints), "sources": [b.source for b in request.context],
                "options": dict(spec.options), "channel": f"bare:{work.plan_id}"})
        return spec, request

    runner.prepare = recorded  # type: ignore[method-assign]
    coordinator.advance = timed("advance", coordinator.advance)  # type: ignore[method-assign]

    def run(plan_id: str, step: Step) -> None:
        if isinstance(step, Run):
            work = runner.claim(step.phase_id, owner="bench:1:inproc", plan_id=plan_id)
            if work is not None:
                runner.execute(work, Lease(step.phase_id, work.attempt))
        elif isinstance(step, Advance):
            coordinator.advance(plan_id)
        else:
            for s in step.steps if isinstance(step, Chain) else step.lanes:
                run(plan_id, s)

    try:
        for i in range(boards + 1):
            if i == 1:  # the first board warms up (connections, statement caches)
                spent.clear()
                calls.clear()
            plan_id = coordinator.submit(board(200 + i, 0.0)).plan_id
            for canvas in dispatcher.take():
                assert isinstance(canvas.root, Chain | Group | Run | Advance)
                run(plan_id, canvas.root)
    finally:
        db.dispose()
    phases = calls["claim"]
    own = {k: spent[k] / phases * 1000 for k in ("claim", "publish_text", "record_usage", "complete")}
    model = (spent["execute"] - spent["publish_text"] - spent["record_usage"] - spent["complete"]) / phases * 1000
    return {**own, "model": model, "chunks": calls["publish_text"] / phases,
            "advance": spent["advance"] / boards * 1000}, calls_made


def _title(work: Any) -> str:
    """The title a later phase's prompt gives this phase's text (as the prompt builder does)."""
    from orchestrator.plan.prompts import _block

    return _block(work.plan, work.phase, "").title


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boards", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7, help="canvases of each kind for the overhead ratio")
    parser.add_argument("--latency", type=float, default=0.02, help="offline seconds between chunks (goal 2)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--share", type=int, default=0,
                        help="CONCLAVE_TENANT_MAX_IN_FLIGHT (fair share; 0: off): plans within it pay for it")
    parser.add_argument("--statements-only", action="store_true", help="goal 2 only")
    args = parser.parse_args()

    import redis

    from orchestrator.core.settings import Settings
    from storage import upgrade

    name, url = new_database()
    upgrade(url)
    redis.Redis.from_url(args.redis).flushdb()
    log = Path(tempfile.gettempdir()) / f"{name}.log"
    settings = Settings(database_url=url, broker_url=args.redis, pool="threads", concurrency=32,  # type: ignore[arg-type]
                        allow_plan_models=True, submit_rate=0,  # the bench plans define the offline model
                        tenant_max_in_flight=args.share)
    try:
        boards = count_statements(settings, [board(i, args.latency) for i in range(args.boards)])
        team = count_statements(settings, [team200(args.latency / 4)])
        per_board = report_statements(f"{args.boards} board plans (12 phases each)", boards)
        per_team = report_statements("a team plan of 200 phases", team)
        for what, prefixes in (("claim", CLAIM), ("usage", USAGE), ("completion", COMPLETE)):
            b = sum(v for k, v in boards["worker"]["statements"].items() if k.startswith(prefixes)) / boards["phases"]
            t = sum(v for k, v in team["worker"]["statements"].items() if k.startswith(prefixes)) / team["phases"]
            print(f"[goal 2] {what} statements per phase: boards {b:.2f}, 200-phase team {t:.2f}")
        if args.statements_only:
            fair = ", fair share on" if args.share else ""
            print(f"RATIO worker SQL statements per completed phase (5 boards{fair}): {per_board:.2f} (goal <= 8); "
                  f"200-phase team: {per_team:.2f}")
            return
        parts, calls = where_time_goes(settings, args.boards)
        print(f"[goal 3] where a phase's time goes, in-process without Celery (mean ms per phase, zero model "
              f"latency): claim {parts['claim']:.2f} (with publishing phase_started) | offline model and stream "
              f"guard {parts['model']:.2f} | chunks published {parts['publish_text']:.2f} "
              f"({parts['chunks']:.0f} per phase) | usage row {parts['record_usage']:.2f} | completion "
              f"{parts['complete']:.2f} (with publishing its event) | advance per board {parts['advance']:.2f}")
        step, bare, working = overhead(settings, args.runs, log, calls)
        print(f"[goal 3] critical-path step at zero model latency (median of {args.runs}): conclave board "
              f"{step * 1000:.1f} ms, bare canvas of the same shape {bare * 1000:.1f} ms (no-op tasks), "
              f"{working * 1000:.1f} ms (the same model calls, chunks published, one INSERT each)")
        print(f"RATIO worker SQL statements per completed phase (5 boards): {per_board:.2f} (goal <= 8); "
              f"200-phase team: {per_team:.2f}")
        print(f"RATIO conclave step / bare canvas step doing the same work: {step / working:.2f}x (goal <= 1.5x)")
        print(f"RATIO conclave step / bare canvas step of no-op tasks: {step / bare:.2f}x")
    finally:
        drop_database(name)


if __name__ == "__main__":
    main()
