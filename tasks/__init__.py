"""Data plane: Celery task bodies (:mod:`tasks.phase`), the phase runner
(:mod:`tasks.runner`), the worker runtime, the lease keeper, gateway hooks, and the
model gateway (:mod:`tasks.llm`).

``celery -A tasks worker`` finds the app in :mod:`tasks.celery`. This package
imports nothing at import time, so the control plane can use ``tasks.llm`` (a leaf)
without loading any other task code.
"""
