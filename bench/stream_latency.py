"""Streaming latency: a chunk from the model server to an SSE client of the API (issue 9,
goal 5: p50 < 5 ms and p99 < 50 ms on loopback, over >= 1,000 chunks).

Real processes on 127.0.0.1: the model server (``bench/model_server.py``), which writes into
each chunk's text the wall-clock time it sent it; ``conclave api`` (uvicorn); one
``celery -A tasks worker`` (threads pool, concurrency 32) whose registry (``CONCLAVE_MODELS``)
points the ``default`` model at the server. ``--plans`` team plans (``--experts`` experts side
by side, then a synthesis; every call ``--chunks`` chunks ``--interval`` apart) are submitted
with ``POST /v1/plans`` while no worker runs; one SSE client per plan follows
``GET /v1/plans/{id}/events`` (a thread of this process each, httpx); once every stream is
open the worker starts. A client stamps each ``chunk`` event when its line arrives; the
latency is that time minus the send time in the chunk's text (one clock: same machine).

Beside the goal's figure, a Redis subscriber in this process listens on the plans' bus
channels: model server → worker → Redis → here is the worker's share of the latency, the
rest is the API's (Redis → ``EventStreams`` → uvicorn → the client).

``--profile DIR`` samples the API process with py-spy while the plans run.

Usage: python bench/stream_latency.py [--plans 4] [--experts 4] [--chunks 64] [--interval 0.05]
       [--redis redis://127.0.0.1:6379/13] [--profile DIR]
Needs Postgres and Redis on 127.0.0.1 (make services). Creates and drops its own database;
flushes the Redis database it is given.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cpu import EXPERTS, team  # noqa: E402
from bench.model_server import ModelServer  # noqa: E402
from bench.scratch import drop_database, new_database  # noqa: E402
from bench.throughput import env_for, start_worker, stop  # noqa: E402

CONCLAVE = str(Path(sys.executable).parent / "conclave")
STAMP = re.compile(r"t=(\d+\.\d+)")


class Api:
    """``conclave api`` on a free loopback port, authentication off (the operator's opt-out)."""

    def __init__(self, settings: Any, log: Path) -> None:
        import httpx

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        env = env_for(settings) | {"CONCLAVE_AUTH": "off", "CONCLAVE_LOG_LEVEL": "WARNING"}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([CONCLAVE, "api", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                                         env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the API exited; see {log}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the API did not come up in 30 s; see {log}")


def follow(url: str, plan_id: str, opened: threading.Event, out: list[tuple[float, str]]) -> None:
    """Read the plan's event stream to its end; every chunk event's arrival time and text."""
    import httpx

    with httpx.stream("GET", f"{url}/v1/plans/{plan_id}/events", timeout=httpx.Timeout(120, connect=5)) as r:
        assert r.status_code == 200, r.read()
        event = ""
        for line in r.iter_lines():
            now = time.time()
            opened.set()  # the stream subscribes to the bus before it sends its first line
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "chunk":
                out.append((now, json.loads(line[6:])["text"]))
            elif not line:
                event = ""


def listen(redis_url: str, channels: list[str], stop_at: threading.Event, out: list[tuple[float, str]]) -> None:
    """The bus as the API sees it: every chunk published on ``channels``, when it arrived here."""
    import redis

    pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(*channels)
    while not stop_at.is_set():
        msg = pubsub.get_message(timeout=0.2)
        if msg is None:
            continue
        now = time.time()
        data = json.loads(msg["data"])
        if data.get("type") == "chunk":
            out.append((now, data["text"]))
    pubsub.close()


def latencies(received: list[tuple[float, str]]) -> list[float]:
    return [(at - float(sent)) * 1000 for at, text in received for sent in STAMP.findall(text)]


def describe(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return f"p50 {q[49]:.1f} ms, p90 {q[89]:.1f} ms, p99 {q[98]:.1f} ms, max {max(ms):.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plans", type=int, default=4)
    parser.add_argument("--experts", type=int, default=4, choices=range(1, len(EXPERTS) + 1))
    parser.add_argument("--chunks", type=int, default=64, help="chunks per streamed call")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between chunks")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13", help="a Redis database this run may flush")
    parser.add_argument("--profile", type=Path, help="sample the API process with py-spy; raw stacks go here")
    args = parser.parse_args()

    import httpx
    import redis

    from orchestrator.core.bus import RedisBus
    from orchestrator.core.settings import Settings
    from storage import upgrade

    experts = EXPERTS[:args.experts]
    name, url = new_database()
    log = Path(tempfile.gettempdir()) / f"{name}.log"
    server = ModelServer(args.chunks, args.interval)
    registry = Path(tempfile.gettempdir()) / f"{name}-models.json"
    registry.write_text(server.registry())
    api = worker = None
    try:
        upgrade(url)
        redis.Redis.from_url(args.redis).flushdb()
        settings = Settings(database_url=url, broker_url=args.redis, pool="threads",
                            concurrency=32, models=registry, submit_rate=0)
        api = Api(settings, log)
        ids = []
        for i in range(args.plans):
            r = httpx.post(f"{api.url}/v1/plans", json=team(i, experts), timeout=30)
            assert r.status_code == 201, r.text
            ids.append(r.json()["plan_id"])
        received: list[list[tuple[float, str]]] = [[] for _ in ids]
        on_bus: list[tuple[float, str]] = []
        done = threading.Event()
        bus = threading.Thread(target=listen, args=(args.redis, [RedisBus.channel(p) for p in ids], done, on_bus))
        bus.start()
        opened = [threading.Event() for _ in ids]
        clients = [threading.Thread(target=follow, args=(api.url, p, o, out))
                   for p, o, out in zip(ids, opened, received, strict=True)]
        for t in clients:
            t.start()
        for o in opened:
            assert o.wait(30), "an event stream did not open"
        sampler = None
        if args.profile is not None:
            from bench.profile import Sampler

            args.profile.mkdir(parents=True, exist_ok=True)
            sampler = Sampler(api.proc.pid, args.profile / "api.txt")
        worker = start_worker(settings, "threads", 32, log)
        for t in clients:
            t.join(300)
        done.set()
        bus.join(5)
        if sampler is not None:
            from bench.profile import summary

            print("\n".join(summary(sampler.stop())))
        expected = args.plans * (len(experts) + 1) * args.chunks
        ms = latencies([x for out in received for x in out])
        worker_ms = latencies(on_bus)
        print(f"[goal 5] {args.plans} team plans of {len(experts)} experts + synthesis, {args.chunks} chunks "
              f"{args.interval * 1000:.0f} ms apart per call, one SSE client per plan on GET /v1/plans/{{id}}/events "
              f"(conclave api, one worker): {len(ms)} of {expected} chunks received")
        print(f"[goal 5] model server -> worker -> Redis -> a bus subscriber: {describe(worker_ms)} "
              f"({len(worker_ms)} chunks)")
        print(f"[goal 5] model server -> SSE client of the API: {describe(ms)}")
        q = statistics.quantiles(ms, n=100, method="inclusive")
        print(f"RATIO stream latency p50: {q[49]:.1f} ms (goal < 5 ms), p99: {q[98]:.1f} ms (goal < 50 ms), "
              f"over {len(ms)} chunks (goal >= 1000)")
    finally:
        for proc in (worker, api.proc if api is not None else None):
            if proc is not None:
                stop(proc)
        server.stop()
        registry.unlink()
        drop_database(name)


if __name__ == "__main__":
    main()
