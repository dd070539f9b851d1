"""A gate in Postgres that holds one session's statements at their start (or their end), for
tests that must put a race in a chosen order (a completion held while another attempt takes
over, a plan's finish held while a cancel lands, an admission held at its insert while a
second process asks, a claim held between its event's insert and its commit).

A statement-level ``BEFORE`` trigger on ``table`` waits for an advisory lock the gate holds,
for the sessions named :attr:`StatementGate.app` (their ``application_name``) whose query
matches ``query_like``. Nothing else is held: the trigger fires before the statement locks a
row, so what the held session did before (its transaction's earlier locks) is what others
wait on. With ``when="AFTER"`` the statement has done its writes (and holds their locks) and
waits before it returns: before its transaction can commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from sqlalchemy import text

from storage import Database


class StatementGate:
    def __init__(self, db: Database, *, name: str, event: Literal["INSERT", "UPDATE"], table: str = "plans",
                 query_like: str | None = None, when: Literal["BEFORE", "AFTER"] = "BEFORE") -> None:
        tag = uuid.uuid4().hex[:8]
        self.app = f"{name}-{tag}"
        self.key = int(tag, 16)
        self.query_like = query_like
        self._table = table
        self._trigger = f"gate_{name.replace('-', '_')}_{tag}"
        self._db = db
        match = f"AND current_query() ILIKE '{query_like}'" if query_like else ""
        with db.engine.begin() as c:
            c.execute(text(f"""
                CREATE FUNCTION {self._trigger}() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF current_setting('application_name') = '{self.app}' {match} THEN
                        PERFORM pg_advisory_lock({self.key});
                        PERFORM pg_advisory_unlock({self.key});
                    END IF;
                    RETURN NULL;
                END $$"""))
            c.execute(text(f"CREATE TRIGGER {self._trigger} {when} {event} ON {table} "
                           f"FOR EACH STATEMENT EXECUTE FUNCTION {self._trigger}()"))
        self._holder = db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self.key})

    def url(self, database_url: str) -> str:
        """``database_url`` for a session the gate holds."""
        return f"{database_url}{'&' if '?' in database_url else '?'}application_name={self.app}"

    def waiting(self) -> bool:
        """A held session waits at the gate (in the statement the gate matches)."""
        query = "AND query ILIKE :like" if self.query_like else ""
        with self._db.engine.connect() as c:
            return bool(c.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                f"AND application_name = :app AND wait_event_type = 'Lock' AND wait_event = 'advisory' {query}"),
                {"app": self.app, "like": self.query_like}).scalar())

    def open(self) -> None:
        if not self._holder.closed:
            self._holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
            self._holder.close()

    def remove(self) -> None:
        self.open()
        with self._db.engine.begin() as c:
            c.execute(text("SET LOCAL lock_timeout = '30s'"))
            c.execute(text(f"DROP TRIGGER IF EXISTS {self._trigger} ON {self._table}"))
            c.execute(text(f"DROP FUNCTION IF EXISTS {self._trigger}()"))


@contextmanager
def statement_gate(db: Database, **how: object) -> Iterator[StatementGate]:
    """A :class:`StatementGate` for the length of a test: opened and dropped at the end."""
    gate = StatementGate(db, **how)  # type: ignore[arg-type]
    try:
        yield gate
    finally:
        gate.remove()
