"""The worker entry point: ``celery -A tasks worker`` (Celery looks up ``tasks.celery.app``).

Configuration is read from ``CONCLAVE_*`` here, at the edge, and nowhere else.
"""

from __future__ import annotations

from orchestrator.celery_app import build_app
from orchestrator.logs import ContextFilter
from orchestrator.settings import Settings

settings = Settings()
app = build_app(settings)


def _install_log_context(**_: object) -> None:
    import logging

    for handler in logging.getLogger().handlers:
        handler.addFilter(ContextFilter())


try:
    from celery.signals import after_setup_logger

    after_setup_logger.connect(_install_log_context, weak=False)
except ImportError:  # pragma: no cover
    pass
