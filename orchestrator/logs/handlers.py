"""Handlers are configured only by entry points: the CLI and the API call :func:`configure`;
worker and beat processes dress the handlers Celery sets up
(:func:`orchestrator.logs.worker.context_in_worker_logs`).

Every handler gets the same three things (:meth:`LogSetup.dress`): the context filter, the
redaction filter, and the JSON or text format ``CONCLAVE_LOG_FORMAT`` asks for.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TextIO

from orchestrator.core.settings import Settings
from orchestrator.logs.context import ContextFilter
from orchestrator.logs.formats import FORMAT, JsonLines, LogFormat, wants_json
from orchestrator.logs.redaction import Redact, Redactor, secrets_of


@dataclass(frozen=True)
class LogSetup:
    log_format: LogFormat
    redactor: Redactor

    @classmethod
    def from_settings(cls, settings: Settings) -> LogSetup:
        return cls(settings.log_format, Redactor(secrets_of(settings)))

    def dress(self, handler: logging.Handler, text: logging.Formatter) -> None:
        """Context and redaction filters on ``handler`` (once each), and its format: JSON
        lines, or ``text`` for a terminal."""
        handler.filters = [f for f in handler.filters if not isinstance(f, ContextFilter | Redact)]
        handler.addFilter(ContextFilter())
        handler.addFilter(Redact(self.redactor))  # after the context: it may name a secret too
        as_json = wants_json(self.log_format, getattr(handler, "stream", None))
        handler.setFormatter(JsonLines() if as_json else text)
        if as_json:
            logging.captureWarnings(True)  # a warning is a log line like any other, not raw stderr


def configure(settings: Settings, level: str | None = None, *, stream: TextIO | None = None) -> None:
    """Entry points only: one dressed handler on the root logger, at ``level`` (default
    ``CONCLAVE_LOG_LEVEL``), writing to ``stream`` (default stderr)."""
    handler: logging.Handler = logging.StreamHandler(stream or sys.stderr)
    LogSetup.from_settings(settings).dress(handler, logging.Formatter(FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_conclave", False):
            root.removeHandler(h)
    handler._conclave = True  # type: ignore[attr-defined,unused-ignore]
    root.addHandler(handler)
    root.setLevel((level or settings.log_level).upper())
