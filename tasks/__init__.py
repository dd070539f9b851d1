"""Data plane: Celery task bodies, the model gateway (``tasks.llm``) and the lease keeper.

``celery -A tasks worker`` finds the app in :mod:`tasks.celery`. This package
imports nothing at import time, so the control plane can use ``tasks.llm`` types
without loading Celery task bodies.
"""
