"""One start-up for every fleet process: ``conclave worker``, ``conclave beat`` and
``celery -A tasks worker`` (``tasks/celery.py``) all call :func:`start`.

Before Celery runs anything it checks, in this order:

1. the settings (a bad value names its variable);
2. the model registry (``CONCLAVE_MODELS``: a bad one names the file and the field);
3. that a fleet's broker and database are configured (:meth:`Settings.fleet_problem`:
   never an in-memory broker, never a local SQLite file);
4. that the broker and the database answer;

then builds the Celery app and sets up worker logs and tracing. A check that fails ends
the process with one line per problem on stderr (``conclave worker: error [code] …``),
secrets redacted, never a traceback: exit 2 for a wrong setting or registry, 1 for a
service that is missing or does not answer. What a worker sets up once it runs (its
housekeeper, its metrics) stops it the same way when it fails (:mod:`tasks.runtime`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

from celery import Celery
from kombu.exceptions import OperationalError
from pydantic import ValidationError

from orchestrator import tracing
from orchestrator.core.errors import InvalidConfiguration
from orchestrator.core.settings import Settings, settings_errors
from orchestrator.fleet.celery_app import build_app
from orchestrator.logs import Redactor, context_in_worker_logs, secrets_of
from orchestrator.plan.registry import ModelResolver
from storage import StorageError

Role = Literal["worker", "beat"]


@dataclass(frozen=True)
class Fleet:
    """What a started fleet process runs on."""

    settings: Settings
    app: Celery


def start(role: Role, logfile: str | None = None) -> Fleet:
    """The checked settings and the app of a ``role`` process, its logs and tracing set up;
    or the end of the process, saying why (see the module docstring). ``logfile``: where
    the process was told to log (``--logfile``), warnings before Celery's logging included."""
    prog = f"conclave {role}"
    try:
        settings = Settings()
    except ValidationError as exc:
        _refuse(prog, [f"[settings.invalid] {line}" for line in settings_errors(exc)], 2)
    try:
        ModelResolver.from_settings(settings)
    except InvalidConfiguration as exc:
        _refuse(prog, [f"[{exc.code}] {exc.message}"], 2, settings)
    if (problem := settings.fleet_problem()) is not None:
        _refuse(prog, [f"[fleet.unconfigured] {problem}"], 1, settings)
    app = build_app(settings)
    silent = [p for p in (_broker_problem(app, settings), _database_problem(settings)) if p is not None]
    if silent:
        _refuse(prog, silent, 1, settings)
    context_in_worker_logs(settings, logfile)
    tracing.setup(settings, service=f"conclave-{role}")
    return Fleet(settings, app)


def run(app: Celery, argv: Sequence[str]) -> NoReturn:
    """Run Celery's command line (``worker …``, ``beat …``) on ``app`` and exit with its code,
    as ``celery -A tasks …`` does: a worker that stopped on a failure exits non-zero
    (``Celery.start`` and ``worker_main`` drop the code)."""
    from celery.bin.celery import celery

    celery.params[0].default = app  # what Celery.start does: the app for its -A option
    celery.main(args=list(argv), prog_name="celery")  # standalone: exits with the command's code
    raise SystemExit(0)  # not reached: click exits


def _broker_problem(app: Celery, settings: Settings) -> str | None:
    """Why the broker does not answer (None when it does): one attempt, no retry."""
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=0)
    except (OperationalError, OSError) as exc:
        return f"[broker.unreachable] the broker at {settings.broker_url} (CONCLAVE_BROKER_URL) does not answer: {exc}"
    return None


def _database_problem(settings: Settings) -> str | None:
    """Why the database does not answer (None when it does)."""
    db = settings.open_database(pool_size=1)
    try:
        db.ping()
    except StorageError as exc:
        return (f"[database.unreachable] the database at {settings.database_url} (CONCLAVE_DATABASE_URL) "
                f"does not answer: {exc}")
    finally:
        db.dispose()
    return None


def _refuse(prog: str, problems: Sequence[str], code: int, settings: Settings | None = None) -> NoReturn:
    redact = Redactor(secrets_of(settings) if settings is not None else ())
    for problem in problems:
        print(redact(f"{prog}: error {problem}"), file=sys.stderr, flush=True)
    raise SystemExit(code)
