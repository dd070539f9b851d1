"""Persistence: SQLAlchemy 2 models, one repository module per aggregate, migrations.

``storage`` imports neither ``orchestrator`` nor ``tasks``. Driver errors stop here:
repositories raise :mod:`storage.exceptions` exceptions, never SQLAlchemy or psycopg ones.
"""

from storage.db import Database, connect, upgrade
from storage.exceptions import Conflict, NotFound, StorageError, Unavailable
from storage.status import PhaseStatus, PlanStatus

__all__ = ["Conflict", "Database", "NotFound", "PhaseStatus", "PlanStatus", "StorageError", "Unavailable", "connect",
           "upgrade"]
