"""CPU per model call and makespan against a bare Celery peer (issue 9, goal 1), in one run.

The same work twice, one after the other, against the same OpenAI-compatible model server
(``bench/model_server.py``, a process of its own, so its CPU is nobody's): ``--plans`` team
plans of ``--experts`` experts side by side and a synthesis of their texts (40 x (4 + 1) = 200
streamed calls by default), each call ``--chunks`` chunks ``--interval`` apart (64 x 50 ms =
3.2 s).

- **Conclave**: one ``celery -A tasks worker`` (threads pool, concurrency 32) on a scratch
  Postgres database; the operator's registry (``CONCLAVE_MODELS``) points the ``default``
  model at the server (a registered model: trusted, no egress check for loopback); the plans
  are submitted through the direct client, as ``conclave submit`` would.
- **The bare peer** (``bench/bare.py``): one ``celery -A bench.bare worker`` with the same
  Celery configuration, pool and concurrency; per plan ``chord(experts x stream_call,
  stream_call(synthesis))``; each task makes the same streamed call with ONE ``httpx.Client``
  shared by the process, publishes every chunk to Redis (one PUBLISH each, Conclave's chunk
  shape), and stores the text with one INSERT. The goal's ratios are against this peer; the
  same peer publishing nothing runs next on the same worker, and its figures are printed beside
  (what the chunks cost a bare task).

Each side first runs one small plan untimed (imports, connections, the worker ready). Then:

- **CPU per call**: utime + stime (+ reaped children's) of the worker's process tree, from
  ``/proc/<pid>/stat``, sampled before the first submit and after the last plan finished,
  divided by the model calls the server answered in between (checked: exactly the plan's calls,
  no retry, no fallback). Postgres, Redis and the submitting client are other processes: not
  counted. What the same worker spends idle (Celery's own loop, Conclave's housekeeper),
  measured over the 5 s before, is printed beside: it is part of the figure, not subtracted.
- **Makespan**: first submit → the last plan's stored ``finished_at`` (Conclave; after its
  final ``advance``), first send → the last INSERT's ``clock_timestamp()`` (bare).
- **The concurrency bound**: no schedule beats ``max(ceil(calls / concurrency), critical path
  in calls) x call time`` — every call lasts at least the call time, a slot runs one at a time,
  and a synthesis waits for its experts: 7 x 3.2 s = 22.4 s for 200 calls on 32 slots. The
  fluid figure ``calls x call time / concurrency`` (20.0 s) is printed beside it; it is
  reachable only when the calls divide evenly into the slots (``--plans 32 --experts 6``).

``--profile DIR`` samples each worker with py-spy during its timed run (raw stacks in DIR, a
summary printed); the figures of a profiled run include py-spy's interference.

Usage: python bench/cpu.py [--plans 40] [--experts 4] [--chunks 64] [--interval 0.05]
       [--redis redis://127.0.0.1:6379/13] [--profile DIR] [--profile-rate 100]
Needs Postgres and Redis on 127.0.0.1 (make services). Creates and drops its own database;
flushes the Redis database it is given.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.model_server import ModelServer  # noqa: E402
from bench.scratch import drop_database, new_database  # noqa: E402
from bench.throughput import env_for, start_worker, stop  # noqa: E402

EXPERTS = [("Dana", "CFO"), ("Ravi", "CTO"), ("Sofia", "Head of Sales"), ("Tomas", "General Counsel"),
           ("Mei", "Head of Operations"), ("Omar", "Head of People"), ("Lena", "Chief of Staff"),
           ("Jon", "Head of Product")]
CONCURRENCY = 32
IDLE_SECONDS = 5.0
PROFILE_RATE = 100  # py-spy samples per second (--profile-rate)
#: Where a profiled worker's samples go, first match wins (see bench/profile.py: shares).
CELERY = [("celery: task tracing, results, chords", ("celery/app/trace.py",)),
          ("celery: consumer loop, kombu", ("celery/worker/", "kombu/"))]
CONCLAVE_PARTS = [
    ("the guard's producer thread: the first event (request, headers)", ("llm-stream-",)),
    ("the bus sender thread (PUBLISH packed, one write per batch)", ("RedisBus._send_loop",)),
    ("chunk publish call (JSON, queue)", ("RedisBus.publish",)),
    ("on_text (the chunk message, metrics)", ("_Timed.__call__",)),
    ("the stream read on the phase's thread: HTTP read, SSE decoding", ("_read_stream",)),
    ("the watchdog thread", ("conclave-llm-watchdog", "Watchdog._run")),
    ("claim", ("PhaseRunner.claim",)), ("prompt", ("PhaseRunner.prepare",)), ("usage row", ("record_usage",)),
    ("completion", ("PhaseRunner.complete",)), ("advance", ("Coordinator.advance",)),
    ("lease heartbeat", ("tasks/lease.py",)), ("housekeeper", ("tasks/housekeeping.py",)),
    ("rest of run_phase", ("run_phase",)), *CELERY]
BARE_PARTS = [("chunk PUBLISH", ("_publish_chunk",)), ("INSERT", ("psycopg/",)),
              ("streamed HTTP read and JSON", ("stream_call",)), *CELERY]


def team(i: int, experts: list[tuple[str, str]]) -> dict[str, Any]:
    return {"kind": "team", "title": f"cpu bench {i}", "question": f"Should we open office number {i}?",
            "divergence": "off", "experts": [{"name": n, "role": r} for n, r in experts],
            "phases": [{"id": f"e{k}", "expert": n, "prompt": f"Analyse it as the {r}."}
                       for k, (n, r) in enumerate(experts)],
            "synthesis": {"expert": experts[0][0]}}


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and every live descendant, with the children they reaped."""
    stats: dict[int, tuple[int, int]] = {}  # pid -> (ppid, ticks)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw.rsplit(")", 1)[1].split()
        stats[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, _) in stats.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(stats[p][1] for p in tree if p in stats) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    calls: int
    cpu: float  # seconds, the worker's process tree
    makespan: float  # seconds
    streamed: float  # the server's mean streamed call, seconds
    connections: int  # TCP connections the server accepted during the run
    idle: float  # the same worker's CPU seconds per second while idle, measured just before

    @property
    def cpu_per_call(self) -> float:
        return self.cpu / self.calls


class Window:
    """The worker's CPU and the server's counters from now until :meth:`close`."""

    def __init__(self, server: ModelServer, pid: int, profile: Path | None, name: str,
                 parts: list[tuple[str, tuple[str, ...]]]) -> None:
        from bench.profile import Sampler

        self.server, self.pid, self.name, self.parts = server, pid, name, parts
        before = tree_cpu(pid)
        time.sleep(IDLE_SECONDS)
        self.idle = (tree_cpu(pid) - before) / IDLE_SECONDS
        self.sampler = Sampler(pid, profile / f"{name}.txt", PROFILE_RATE) if profile is not None else None
        if self.sampler is not None:
            time.sleep(1.0)  # py-spy attached before the clock starts
        self.stats, self.cpu, self.t0 = server.stats(), tree_cpu(pid), time.time()

    def close(self, end: float) -> Run:
        cpu = tree_cpu(self.pid) - self.cpu
        stats = self.server.stats()
        if self.sampler is not None:
            from bench.profile import shares, summary

            samples = self.sampler.stop()
            print(f"[profile] {self.name} worker during its timed run:", *summary(samples, top=15),
                  "where the samples were:", *shares(samples, self.parts), sep="\n", flush=True)
        calls = stats["calls"] - self.stats["calls"]
        streamed = (stats["streamed_seconds"] - self.stats["streamed_seconds"]) / max(calls, 1)
        return Run(calls, cpu, end - self.t0, streamed, stats["connections"] - self.stats["connections"], self.idle)


def run_conclave(settings: Any, server: ModelServer, plans: int, experts: list[tuple[str, str]], log: Path,
                 profile: Path | None) -> Run:
    from orchestrator.client.conclave import Conclave

    worker = start_worker(settings, "threads", CONCURRENCY, log)
    client = Conclave(settings, worker=False)
    try:
        warm = client.wait(client.submit(team(-1, experts[:1])), timeout=120, poll=0.1)
        assert warm.status == "completed", (warm.status, warm.error)
        window = Window(server, worker.pid, profile, "conclave", CONCLAVE_PARTS)
        ids = [client.submit(team(i, experts)) for i in range(plans)]
        ends = []
        for pid in ids:
            view = client.wait(pid, timeout=900, poll=0.1)
            assert view.status == "completed" and view.finished_at is not None, (pid, view.status, view.error)
            ends.append(datetime.fromisoformat(view.finished_at).timestamp())
        run = window.close(max(ends))
    finally:
        client.close()
        stop(worker)
    assert run.calls == plans * (len(experts) + 1), run
    return run


def run_bare(settings: Any, server: ModelServer, plans: int, experts: list[tuple[str, str]], log: Path,
             profile: Path | None) -> dict[str, Run]:
    """The peer twice on one worker: publishing every chunk, then publishing nothing."""
    from sqlalchemy import create_engine, text

    from bench.bare import team_canvas
    from orchestrator.fleet.celery_app import build_app

    pg_url = settings.effective_database_url.replace("postgresql+psycopg://", "postgresql://")
    cmd = [sys.executable, "-m", "celery", "-A", "bench.bare", "worker", "--pool", "threads", "--concurrency",
           str(CONCURRENCY), "-Q", "bare", "--without-mingle", "--without-gossip", "--loglevel", "WARNING",
           "--hostname", f"bare-{uuid.uuid4().hex[:6]}@%h"]
    with open(log, "ab") as out:
        worker = subprocess.Popen(cmd, cwd=ROOT, env=env_for(settings) | {"BENCH_PG_URL": pg_url}, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    engine = create_engine(settings.effective_database_url)
    sender = build_app(settings)
    url = f"{server.url}/v1/chat/completions"
    calls = plans * (len(experts) + 1)

    def stored(prefix: str) -> tuple[int, float | None]:
        with engine.connect() as c:
            n, last = c.execute(text("SELECT count(*), max(done_at) FROM bare_results WHERE key LIKE :p"),
                                {"p": f"{prefix}%"}).one()
        return n, last.timestamp() if last is not None else None

    def wait(prefix: str, n: int) -> float:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            got, last = stored(prefix)
            if got >= n and last is not None:
                return last
            time.sleep(0.1)
        raise TimeoutError(f"bare peer: {stored(prefix)[0]} of {n} calls stored")

    runs = {}
    try:
        team_canvas(sender, "warm", experts[:1], "Should we warm up?", url).apply_async()
        wait("warm/", 2)
        for prefix, publish in (("pub", True), ("quiet", False)):
            window = Window(server, worker.pid, profile, f"bare-{prefix}", BARE_PARTS)
            for i in range(plans):
                team_canvas(sender, f"{prefix}{i}", experts, f"Should we open office number {i}?", url,
                            publish=publish).apply_async()
            runs[prefix] = run = window.close(wait(prefix, calls))
            assert run.calls == calls, run
        with engine.connect() as c:  # every call's text stored, none empty
            short = c.execute(text("SELECT count(*) FROM bare_results WHERE length(text) < 100")).scalar_one()
        assert short == 0, short
    finally:
        stop(worker)
        engine.dispose()
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plans", type=int, default=40)
    parser.add_argument("--experts", type=int, default=4, choices=range(1, len(EXPERTS) + 1))
    parser.add_argument("--chunks", type=int, default=64, help="chunks per streamed call")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between chunks")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13", help="a Redis database this run may flush")
    parser.add_argument("--profile", type=Path, help="sample each worker with py-spy; raw stacks go here")
    parser.add_argument("--profile-rate", type=int, default=PROFILE_RATE, help="py-spy samples per second")
    args = parser.parse_args()
    globals()["PROFILE_RATE"] = args.profile_rate

    import redis
    from sqlalchemy import create_engine, text

    from orchestrator.core.settings import Settings
    from storage import upgrade

    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    experts = EXPERTS[:args.experts]
    name, url = new_database()
    log = Path(tempfile.gettempdir()) / f"{name}.log"
    server = ModelServer(args.chunks, args.interval)
    registry = Path(tempfile.gettempdir()) / f"{name}-models.json"
    registry.write_text(server.registry())
    try:
        upgrade(url)
        engine = create_engine(url)
        with engine.begin() as c:
            c.execute(text("CREATE TABLE bare_results (id bigserial PRIMARY KEY, key text, text text, "
                           "done_at timestamptz NOT NULL DEFAULT clock_timestamp())"))
        engine.dispose()
        redis.Redis.from_url(args.redis).flushdb()
        settings = Settings(database_url=url, broker_url=args.redis, pool="threads",
                            concurrency=CONCURRENCY, models=registry, submit_rate=0)
        calls = args.plans * (len(experts) + 1)
        call = server.call_seconds
        waves = max(math.ceil(calls / CONCURRENCY), 2)  # the critical path: an expert, then the synthesis
        bound, fluid = waves * call, max(calls * call / CONCURRENCY, 2 * call)
        shape = f"{args.plans} team plans of {len(experts)} experts + synthesis"
        print(f"[goal 1] {calls} streamed calls ({shape}), {args.chunks} chunks {args.interval * 1000:.0f} ms "
              f"apart = {call:.1f} s each; threads pool, concurrency {CONCURRENCY}; concurrency bound "
              f"{waves} x {call:.1f} s = {bound:.1f} s (fluid {calls} x {call:.1f} s / {CONCURRENCY} = {fluid:.1f} s)",
              flush=True)
        ours = run_conclave(settings, server, args.plans, experts, log, args.profile)
        bare = run_bare(settings, server, args.plans, experts, log, args.profile)
        peer, quiet = bare["pub"], bare["quiet"]
        for who, r in (("conclave worker", ours), ("bare celery peer, publishing every chunk", peer),
                       ("bare celery peer publishing nothing", quiet)):
            print(f"[goal 1] {who}: {r.calls} calls, worker CPU {r.cpu:.2f} s = {r.cpu_per_call * 1000:.1f} ms per "
                  f"call; makespan {r.makespan:.1f} s = {bound / r.makespan:.2f} of the bound "
                  f"({fluid / r.makespan:.2f} of the fluid bound); model server: mean call {r.streamed:.2f} s, "
                  f"{r.connections} connections opened; idle, this worker spends {r.idle * 1000:.0f} ms of CPU "
                  "per second", flush=True)
        print(f"RATIO conclave CPU per call / bare: {ours.cpu_per_call / peer.cpu_per_call:.2f}x (goal <= 2x); "
              f"against the peer publishing nothing: {ours.cpu_per_call / quiet.cpu_per_call:.2f}x")
        print(f"RATIO makespan conclave / bare: {ours.makespan / peer.makespan:.2f}x (goal <= 1.05x); "
              f"against the peer publishing nothing: {ours.makespan / quiet.makespan:.2f}x")
        print(f"conclave fraction of the concurrency bound: {bound / ours.makespan:.2f} (goal >= 0.9); "
              f"bare: {bound / peer.makespan:.2f}, publishing nothing: {bound / quiet.makespan:.2f}")
    finally:
        server.stop()
        registry.unlink()
        drop_database(name)


if __name__ == "__main__":
    main()
