"""Logs carry plan_id / phase / attempt / worker without being told, as JSON lines or text,
and never a secret.

* :mod:`~orchestrator.logs.context` — :func:`bind` sets the context in contextvars;
  :class:`ContextFilter` copies it onto every record.
* :mod:`~orchestrator.logs.formats` — :class:`JsonLines` (one object per line: timestamp in
  ISO 8601 UTC, level, logger, action, message, the context, the exception) or text.
* :mod:`~orchestrator.logs.redaction` — :class:`Redact`, on every handler: configured secret
  values and the shapes of credentials are replaced before anything is formatted.
* :mod:`~orchestrator.logs.handlers` / :mod:`~orchestrator.logs.worker` — only entry points
  install handlers: :func:`configure` (CLI, API), :func:`context_in_worker_logs` (Celery's
  handlers in worker and beat processes).

Log calls use lazy ``%`` formatting and an ``action`` name from a small vocabulary
(``plan.submitted``, ``phase.completed``, ``db.retry`` …).
"""

from orchestrator.logs.context import ContextFilter, bind, set_worker
from orchestrator.logs.formats import FORMAT, JsonLines, WithContext, wants_json
from orchestrator.logs.handlers import LogSetup, configure
from orchestrator.logs.redaction import Redact, Redactor, secrets_of
from orchestrator.logs.worker import context_in_worker_logs, quiet_beat

__all__ = [
    "FORMAT",
    "ContextFilter",
    "JsonLines",
    "LogSetup",
    "Redact",
    "Redactor",
    "WithContext",
    "bind",
    "configure",
    "context_in_worker_logs",
    "quiet_beat",
    "secrets_of",
    "set_worker",
    "wants_json",
]
