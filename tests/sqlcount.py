"""Count the SQL a process sends, by the repository function that sent it (opt-in).

Attached to an engine with SQLAlchemy events, it counts what reaches the database:

- ``statements``: every cursor execute (``before_cursor_execute``: on SQLite this includes
  ``BEGIN IMMEDIATE``) plus every COMMIT and ROLLBACK of a real transaction. A statement
  run in autocommit (Postgres, :meth:`storage.db.Database.statement`) commits itself and
  sends no COMMIT, so none is counted for it;
- ``begins``: transactions begun on a driver that sends BEGIN as its own round trip
  (psycopg); ``pings``: the ``SELECT 1`` a pool sends to check a connection that sat
  idle before handing it out (:data:`storage.db.PING_AFTER_IDLE`), invisible to
  ``before_cursor_execute``.

Each is attributed to the innermost ``storage`` repository function on the stack
(``storage.phases.claim_phase``, ``storage.usage.record_usage``, …), so a benchmark or a
test can say what a claim or a completion costs. Used by ``bench/`` and the unit tests;
nothing in production attaches it.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

_PLUMBING = ("storage.db", "storage.exceptions", "tests.sqlcount", "storage.sql", "storage.outbox")


def caller() -> str:
    """``module.function`` of the innermost repository frame on the stack ("other" if none)."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("storage.") and not module.startswith(_PLUMBING):
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "other"


class StatementCounter:
    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.begins: Counter[str] = Counter()
        self.pings: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._engines: list[Engine] = []

    def attach(self, engine: Engine) -> StatementCounter:
        event.listen(engine, "before_cursor_execute", self._execute)
        event.listen(engine, "commit", self._end)
        event.listen(engine, "rollback", self._end)
        event.listen(engine, "begin", self._begin)
        event.listen(engine.pool, "checkout", self._checkout)
        self._engines.append(engine)
        return self

    def detach(self) -> None:
        for engine in self._engines:
            event.remove(engine, "before_cursor_execute", self._execute)
            event.remove(engine, "commit", self._end)
            event.remove(engine, "rollback", self._end)
            event.remove(engine, "begin", self._begin)
            if event.contains(engine.pool, "checkout", self._checkout):
                event.remove(engine.pool, "checkout", self._checkout)
        self._engines.clear()

    def reset(self) -> None:
        with self._lock:
            self.statements.clear()
            self.begins.clear()
            self.pings.clear()

    def snapshot(self) -> dict[str, Counter[str]]:
        with self._lock:
            return {"statements": Counter(self.statements), "begins": Counter(self.begins),
                    "pings": Counter(self.pings)}

    def total(self, *prefixes: str) -> int:
        """Statements by repository functions whose name starts with one of ``prefixes`` (all if none)."""
        with self._lock:
            return sum(n for k, n in self.statements.items() if not prefixes or k.startswith(prefixes))

    @staticmethod
    def _autocommit(conn: Any) -> bool:
        return conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"

    def _execute(self, conn: Any, *_: Any) -> None:
        label = caller()
        with self._lock:
            self.statements[label] += 1

    def _end(self, conn: Any) -> None:
        if self._autocommit(conn):
            return
        label = caller()
        with self._lock:
            self.statements[label] += 1

    def _begin(self, conn: Any) -> None:
        if self._autocommit(conn) or conn.dialect.name != "postgresql":
            return
        label = caller()
        with self._lock:
            self.begins[label] += 1

    def _checkout(self, _dbapi: Any, record: Any, _proxy: Any) -> None:
        if not record.info.pop("pinged", False):
            return
        label = caller()
        with self._lock:
            self.pings[label] += 1
