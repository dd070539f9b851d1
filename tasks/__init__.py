"""The worker: Celery task bodies (:mod:`tasks.phase`), the phase runner
(:mod:`tasks.runner`), the worker runtime, the lease keeper, the gateway hooks a phase
runs with, the briefer, the parsed-plan cache and the housekeeper.

``celery -A tasks worker`` finds the app in :mod:`tasks.celery`, built by the one start-up
every fleet process shares (:mod:`orchestrator.fleet.startup`). This package imports
nothing at import time: importing a task module builds no app and reads no settings.
"""
