"""The bare Celery peer of Conclave's canvases: the same Celery configuration (broker, result
backend, acks_late, prefetch, task events, threads pool), no-op tasks, no database.

``celery -A bench.bare worker -Q bare`` runs it; :func:`board_canvas` builds a canvas with
the shape of a board's (``opening → chord(turns) → summary → chord(turns) → summary →
final → advance``), whose last task stores the time it ran under a Redis key.
"""

from __future__ import annotations

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
