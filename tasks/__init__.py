"""Data plane: Celery task bodies (:mod:`tasks.phase`), the phase runner
(:mod:`tasks.runner`), the worker runtime, the lease keeper, gateway hooks, and the
model gateway (:mod:`orchestrator.gateway`).

``celery -A tasks worker`` finds the app in :mod:`tasks.celery`. This package
imports nothing at import time, so the control plane can use ``orchestrator.gateway`` (a leaf)
without loading any other task code.
"""
