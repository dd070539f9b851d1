"""Worker and beat processes: Celery sets up their handlers itself, and these signals dress them.

* ``after_setup_logger`` / ``after_setup_task_logger``: every handler Celery put on the root,
  task and multiprocessing loggers gets the context and redaction filters and the format
  ``CONCLAVE_LOG_FORMAT`` asks for (:class:`~orchestrator.logs.handlers.LogSetup`); in text,
  Celery's format is kept and the context is added to it
  (:class:`~orchestrator.logs.formats.WithContext`).
* ``celeryd_init`` / ``celeryd_after_setup``: the node name (``celery@host``) becomes the
  ``worker`` of every line of the process; with JSON on stdout the banner, which is not a
  log line, is replaced by one ``worker.starting`` line.
* ``task_prerun`` / ``task_postrun``: Celery's own lines about a task (succeeded, failed,
  retried) carry its plan and phase — bound from the task's keyword arguments, as the
  canvas sends them (``plan_id``, ``phase_key``) — and the worker that ran it.
"""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import ExitStack
from typing import Any

from orchestrator.core.settings import Settings
from orchestrator.logs.context import bind, set_worker
from orchestrator.logs.formats import FORMAT, WithContext, wants_json
from orchestrator.logs.handlers import LogSetup

log = logging.getLogger("orchestrator.worker")

_tasks: dict[tuple[str, int], ExitStack] = {}  # (task id, thread): the context bound for its run
_quieted: list[bool] = []


def context_in_worker_logs(settings: Settings, logfile: str | None = None) -> None:
    """Worker and beat entry points, before Celery sets up logging (see the module docstring).
    ``logfile``: the worker's ``--logfile``, where its warnings go even before Celery logs."""
    from celery import signals

    setup = LogSetup.from_settings(settings)
    early = _warnings_until_celery_logs(setup, logfile)

    def dress(logger: logging.Logger | None = None, **_: Any) -> None:
        from celery.utils.log import get_multiprocessing_logger

        _stop_early(early)
        for target in (logger, get_multiprocessing_logger()):
            for handler in target.handlers if target is not None else ():
                inner = handler.formatter
                setup.dress(handler, inner if isinstance(inner, WithContext) else WithContext(inner))

    def starting(sender: Any = None, instance: Any = None, **_: Any) -> None:
        if wants_json(setup.log_format, sys.__stdout__) and instance is not None:
            from celery.apps import worker as celery_worker

            instance.quiet = True  # the banner is printed, not logged: it would be the one non-JSON text
            _quieted[:] = [True]
            # so are its shutdown notices ("worker: Warm shutdown (MainProcess)"), from its signal
            # handlers: they become log lines (handler locks are re-entrant; Python runs signal
            # handlers between bytecodes, never inside a write)
            celery_worker.safe_say = _say

    def started(sender: Any = None, instance: Any = None, **_: Any) -> None:
        set_worker(str(sender))
        if _quieted and instance is not None:
            log.info("%s starting (concurrency %s)", sender, getattr(instance, "concurrency", "?"),
                     extra={"action": "worker.starting"})

    signals.after_setup_logger.connect(dress, weak=False, dispatch_uid="conclave.logs.root")
    signals.after_setup_task_logger.connect(dress, weak=False, dispatch_uid="conclave.logs.task")
    signals.celeryd_init.connect(starting, weak=False, dispatch_uid="conclave.logs.banner")
    signals.celeryd_after_setup.connect(started, weak=False, dispatch_uid="conclave.logs.worker")
    signals.task_prerun.connect(_task_started, weak=False, dispatch_uid="conclave.logs.task_started")
    signals.task_postrun.connect(_task_ended, weak=False, dispatch_uid="conclave.logs.task_ended")


def _warnings_until_celery_logs(setup: LogSetup, logfile: str | None = None) -> logging.Handler | None:
    """Celery warns before it sets up logging (running as root, say): with a ``logfile``
    (``conclave worker --logfile worker.log &`` beside a live display) the warning goes to
    that file like every later line, not over the terminal; else, with JSON on stderr, a
    warning is a JSON line from the start, through a handler of its own until Celery's
    handlers exist."""
    if logfile:
        handler: logging.Handler = logging.FileHandler(logfile, encoding="utf-8", delay=True)
        setup.dress(handler, logging.Formatter(FORMAT))
        logging.captureWarnings(True)  # in text too: a warning is a line of the file, not raw stderr
    elif not wants_json(setup.log_format, sys.__stderr__):
        return None
    else:
        handler = logging.StreamHandler(sys.__stderr__)
        setup.dress(handler, logging.Formatter())
    warnings = logging.getLogger("py.warnings")
    warnings.addHandler(handler)
    warnings.propagate = False
    return handler


def _stop_early(handler: logging.Handler | None) -> None:
    if handler is not None:
        warnings = logging.getLogger("py.warnings")
        warnings.removeHandler(handler)
        warnings.propagate = True


def quiet_beat(settings: Settings) -> list[str]:
    """Celery's global options for ``beat``: ``--quiet`` when its stdout takes JSON lines
    (beat prints its banner before any signal could stop it)."""
    return ["--quiet"] if wants_json(settings.log_format, sys.__stdout__) else []


def _say(message: str, f: Any = None) -> None:
    log.warning("%s", message.strip(), extra={"action": "worker.signal"})


def _task_started(task_id: str | None = None, task: Any = None, kwargs: dict[str, Any] | None = None,
                  **_: Any) -> None:
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    request = getattr(task, "request", None)
    stack = ExitStack()
    stack.enter_context(bind(plan_id=_text(kwargs.get("plan_id")), phase=_text(kwargs.get("phase_key")),
                             worker=_text(getattr(request, "hostname", None))))
    _tasks[(str(task_id), threading.get_ident())] = stack


def _task_ended(task_id: str | None = None, **_: Any) -> None:
    stack = _tasks.pop((str(task_id), threading.get_ident()), None)
    if stack is not None:
        stack.close()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
