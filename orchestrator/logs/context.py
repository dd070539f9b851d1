"""What a log line knows without being told: the plan, the phase, the attempt, the worker.

:func:`bind` sets them in contextvars for the code it wraps; :class:`ContextFilter` copies
them onto every record a handler emits (``-`` when unknown, which the JSON format writes as
``null``). The worker defaults to the Celery node name of this process (:func:`set_worker`),
so every line of a worker says which one wrote it.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_plan: contextvars.ContextVar[str | None] = contextvars.ContextVar("plan_id", default=None)
_phase: contextvars.ContextVar[str | None] = contextvars.ContextVar("phase", default=None)
_attempt: contextvars.ContextVar[int | None] = contextvars.ContextVar("attempt", default=None)
_worker: contextvars.ContextVar[str | None] = contextvars.ContextVar("worker", default=None)
_process_worker: list[str] = []  # this process's Celery node name, once known

#: The record attributes :class:`ContextFilter` sets, in the order the formats show them.
FIELDS = ("plan_id", "phase", "attempt", "worker")


@contextmanager
def bind(*, plan_id: str | None = None, phase: str | None = None, attempt: int | None = None,
         worker: str | None = None) -> Iterator[None]:
    values: tuple[tuple[contextvars.ContextVar[Any], Any], ...] = (
        (_plan, plan_id), (_phase, phase), (_attempt, attempt), (_worker, worker))
    tokens = [(var, var.set(value)) for var, value in values if value is not None]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def set_worker(name: str) -> None:
    """The Celery node name of this process (``celery@host``): on every line it writes."""
    _process_worker[:] = [name]


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.plan_id = _plan.get() or "-"
        record.phase = _phase.get() or "-"
        attempt = _attempt.get()
        record.attempt = attempt if attempt is not None else "-"
        record.worker = _worker.get() or (_process_worker[0] if _process_worker else "-")
        if not hasattr(record, "action"):
            record.action = "-"
        return True
