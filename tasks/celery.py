"""The worker entry point: ``celery -A tasks worker`` (Celery looks up ``tasks.celery.app``).

Configuration is read from ``CONCLAVE_*`` here, at the edge, and nowhere else.
"""

from __future__ import annotations

from orchestrator.celery_app import build_app
from orchestrator.logs import context_in_worker_logs
from orchestrator.settings import Settings

settings = Settings()
app = build_app(settings)
context_in_worker_logs()
