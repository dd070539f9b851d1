"""The bare Celery peers of Conclave's canvases: the same Celery configuration (broker, result
backend, acks_late, prefetch, task events, threads pool), no database of Conclave's.

``celery -A bench.bare worker -Q bare`` runs them. Two canvases with the shape of a board's
(``opening → chord(turns) → summary → chord(turns) → summary → final → done``), whose last
task stores the time it ran under a Redis key:

- :func:`board_canvas`: no-op tasks — what Celery alone costs per step;
- :func:`working_canvas`: the same work as a board's phases without durability — each task
  makes the same offline model call (the requests a Conclave board made, with the earlier
  speeches passed along as Celery results instead of read from Postgres), publishes every
  chunk to Redis as it streams, and stores the text with one INSERT. Against it, the ratio
  is what durability costs (the claim, the lease, the usage row, the fenced completion).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import redis
from celery import chain, chord

from orchestrator.celery_app import build_app
from orchestrator.settings import Settings

QUEUE = "bare"

settings = Settings()
app = build_app(settings)
app.conf.update(task_default_queue=QUEUE, include=[])


@app.task(name="bare.noop")
def noop() -> None:
    return None


@app.task(name="bare.done")
def done(key: str) -> None:
    redis.Redis.from_url(settings.broker_url or "").set(key, repr(time.time()), ex=600)


_local = threading.local()


def _clients() -> tuple[Any, Any]:
    """This thread's Redis client and Postgres connection (the threads pool: one per slot)."""
    if not hasattr(_local, "redis"):
        import psycopg

        _local.redis = redis.Redis.from_url(settings.broker_url or "")
        _local.pg = psycopg.connect(os.environ["BENCH_PG_URL"], autocommit=True)
    return _local.redis, _local.pg


@app.task(name="bare.speak")
def speak(prior: Any, call: dict[str, Any]) -> dict[str, list[str]]:
    """One phase's work without durability. ``prior``: the texts so far, ``{source: [title,
    text]}`` (a list of them after a chord); ``call``: the request a Conclave phase made."""
    from tasks.llm.offline.provider import OfflineProvider
    from tasks.llm.types import ChatRequest, ContextBlock, ModelSpec, TextDelta

    texts: dict[str, list[str]] = {}
    for part in prior if isinstance(prior, list) else [prior or {}]:
        texts.update(part)
    blocks = tuple(ContextBlock(src, texts[src][0], texts[src][1]) for src in call["sources"] if src in texts)
    request = ChatRequest(call["system"], call["prompt"], blocks, hints=call["hints"])
    r, pg = _clients()
    out: list[str] = []
    spec = ModelSpec("offline", "offline", options=call["options"], trusted=True)
    for seq, event in enumerate(OfflineProvider().stream(spec, request)):
        if isinstance(event, TextDelta):
            out.append(event.text)
            r.publish(call["channel"], json.dumps({"type": "chunk", "phase": call["key"], "seq": seq,
                                                   "text": event.text}))
    text = "".join(out)
    pg.execute("INSERT INTO bare_results (key, text) VALUES (%s, %s)", (call["key"], text))
    return {**texts, call["key"]: [call["title"], text]}


def working_canvas(sender: Any, calls: list[dict[str, Any]], experts: int, key: str) -> Any:
    """The board's canvas doing the board's work: ``calls`` are its phases' requests in
    plan order (opening, a round's turns, its summary, …, final)."""

    def task(name: str, *args: Any, immutable: bool = False) -> Any:
        return sender.signature(name, args=args, immutable=immutable, queue=QUEUE)

    steps: list[Any] = [task("bare.speak", {}, calls[0])]
    i = 1
    while i < len(calls) - 1:
        turns, summary = calls[i:i + experts], calls[i + experts]
        steps.append(chord([task("bare.speak", c) for c in turns], task("bare.speak", summary)))
        i += experts + 1
    steps += [task("bare.speak", calls[-1]), task("bare.done", key, immutable=True)]
    return chain(*steps)


def board_canvas(sender: Any, experts: int, rounds: int, key: str) -> Any:
    """The canvas, for ``sender`` (a Celery app on the same broker) to send by task name.
    Critical path: 1 + 2 * rounds + 2 steps (7 for two rounds), like a board's canvas."""

    def task(name: str, *args: Any) -> Any:
        return sender.signature(name, args=args, immutable=True, queue=QUEUE)

    steps: list[Any] = [task("bare.noop")]
    for _ in range(rounds):
        steps.append(chord([task("bare.noop") for _ in range(experts)], task("bare.noop")))
    steps += [task("bare.noop"), task("bare.done", key)]
    return chain(*steps)
