"""The worker entry point: ``celery -A tasks worker`` (Celery looks up ``tasks.celery.app``).

Configuration is read from ``CONCLAVE_*`` here, at the edge, and nowhere else.
"""

from __future__ import annotations

from pydantic import ValidationError

from orchestrator import tracing
from orchestrator.core.errors import InvalidConfiguration
from orchestrator.core.settings import Settings, settings_errors
from orchestrator.fleet.celery_app import build_app
from orchestrator.logs import context_in_worker_logs
from orchestrator.plan.registry import ModelResolver

try:
    settings = Settings()
    ModelResolver.from_settings(settings)  # a bad model registry refuses to start too
except ValidationError as exc:  # refuse to start, naming the variable
    raise SystemExit("\n".join(f"conclave worker: {line}" for line in settings_errors(exc))) from None
except InvalidConfiguration as exc:
    raise SystemExit(f"conclave worker: [{exc.code}] {exc.message}") from None
if (problem := settings.fleet_problem()) is not None:  # fail loudly, never wait on an in-memory broker
    raise SystemExit(f"conclave worker: {problem}")
app = build_app(settings)
context_in_worker_logs(settings)
tracing.setup(settings, service="conclave-worker")
