"""Logs carry plan_id / phase / attempt without being told.

:func:`bind` sets them in contextvars; :class:`ContextFilter` copies them onto
every record. Handlers are configured only by entry points (:func:`configure`).
Log calls use lazy ``%`` formatting and an ``action`` name from a small vocabulary
(``plan.submitted``, ``phase.completed``, ``db.retry`` …).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

_plan: contextvars.ContextVar[str | None] = contextvars.ContextVar("plan_id", default=None)
_phase: contextvars.ContextVar[str | None] = contextvars.ContextVar("phase", default=None)
_attempt: contextvars.ContextVar[int | None] = contextvars.ContextVar("attempt", default=None)


@contextmanager
def bind(*, plan_id: str | None = None, phase: str | None = None, attempt: int | None = None) -> Iterator[None]:
    resets: list[Callable[[], None]] = []
    if plan_id is not None:
        token = _plan.set(plan_id)
        resets.append(lambda: _plan.reset(token))
    if phase is not None:
        phase_token = _phase.set(phase)
        resets.append(lambda: _phase.reset(phase_token))
    if attempt is not None:
        attempt_token = _attempt.set(attempt)
        resets.append(lambda: _attempt.reset(attempt_token))
    try:
        yield
    finally:
        for reset in reversed(resets):
            reset()


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.plan_id = _plan.get() or "-"
        record.phase = _phase.get() or "-"
        record.attempt = _attempt.get() if _attempt.get() is not None else "-"
        if not hasattr(record, "action"):
            record.action = "-"
        return True


FORMAT = ("%(asctime)s %(levelname)s %(name)s [plan=%(plan_id)s phase=%(phase)s attempt=%(attempt)s] "
          "%(action)s: %(message)s")


def context_in_worker_logs() -> None:
    """Worker entry points: put the context filter on the handlers Celery sets up, and the
    context on their lines (Celery's format knows nothing of it)."""
    from celery.signals import after_setup_logger

    after_setup_logger.connect(_add_context_filter, weak=False, dispatch_uid="conclave.log_context")


def _add_context_filter(**_: object) -> None:
    for handler in logging.getLogger().handlers:
        handler.addFilter(ContextFilter())
        if not isinstance(handler.formatter, WithContext):
            handler.setFormatter(WithContext(handler.formatter))


class WithContext(logging.Formatter):
    """Another formatter's line, with ``[plan=… phase=… attempt=…]`` after its first line
    when the record was logged while a plan was bound (:func:`bind`)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self._inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        text = self._inner.format(record)
        plan = getattr(record, "plan_id", "-")
        if plan == "-":
            return text
        first, newline, rest = text.partition("\n")
        context = f" [plan={plan} phase={getattr(record, 'phase', '-')} attempt={getattr(record, 'attempt', '-')}]"
        return first + context + newline + rest


def configure(level: str = "INFO", *, stream: TextIO | None = None) -> None:
    """Entry points only: install one handler with the context filter on the root logger."""
    handler: logging.Handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_conclave", False):
            root.removeHandler(h)
    handler._conclave = True  # type: ignore[attr-defined,unused-ignore]
    root.addHandler(handler)
    root.setLevel(level.upper())
