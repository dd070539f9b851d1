"""The SQL of the phase hot path, written once, with each dialect overriding only what differs.

In the style of dbos's ``_sys_db.py``: :class:`~storage.sql.base.Statements` holds the
shared statements (the conditional claim UPDATE, the dependency check, the inputs
SELECT, the usage INSERT, the lease renewal) and runs each hot-path operation as a few
plain statements in one transaction — what SQLite (embedded mode) does.
:class:`~storage.sql.postgres.PostgresStatements` folds the same statements into one
statement with data-modifying CTEs (claim + ``phase_started`` + inputs; fenced status +
content + ``phase_completed``). Repositories (:mod:`storage.phases`, :mod:`storage.usage`)
reach them through :attr:`storage.db.Database.sql`.
"""

from __future__ import annotations

from storage.sql.base import Statements
from storage.sql.postgres import PostgresStatements
from storage.sql.sqlite import SQLiteStatements


def for_dialect(name: str) -> Statements:
    if name == "postgresql":
        return PostgresStatements()
    if name == "sqlite":
        return SQLiteStatements()
    raise ValueError(f"unsupported database dialect {name!r} (Postgres or SQLite)")


__all__ = ["PostgresStatements", "SQLiteStatements", "Statements", "for_dialect"]
