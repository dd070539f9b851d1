"""The worker entry point: ``celery -A tasks worker`` (Celery looks up ``tasks.celery.app``).

The start-up — settings, model registry, broker and database, logs and tracing — is the one
``conclave worker`` runs too (:func:`orchestrator.fleet.startup.start`).
"""

from __future__ import annotations

from orchestrator.fleet.startup import start

app = start("worker").app
