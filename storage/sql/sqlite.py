"""SQLite (embedded mode): the shared statements, with SQLite's JSON table function.

No data-modifying CTEs here, so each hot-path operation runs as a few statements in one
``BEGIN IMMEDIATE`` transaction (:mod:`storage.sql.base`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql import ColumnElement

from storage.sql.base import Statements


class SQLiteStatements(Statements):
    def json_elements(self, column: ColumnElement[Any]) -> Any:
        return func.json_each(column).table_valued("value")

    def insert(self, table: Any) -> Any:
        return sqlite_insert(table)
