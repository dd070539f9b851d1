"""Engine, transactions and migrations.

Repositories open every transaction through :meth:`Database.transaction` (or, for a
write that is one statement, :meth:`Database.statement`), which translate driver errors
into :mod:`storage.exceptions`. Nothing outside ``storage`` sees a SQLAlchemy session.
The SQL that differs between Postgres and SQLite is :attr:`Database.sql`
(:mod:`storage.sql`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from storage.exceptions import translated
from storage.sql import Statements, for_dialect

MIGRATIONS = Path(__file__).parent / "migrations"


class Database:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.sql: Statements = for_dialect(self.dialect)
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        # A unit that is one statement needs no BEGIN and no COMMIT: the statement is
        # atomic on its own. Postgres runs it in autocommit (one round trip); SQLite's
        # writes go through BEGIN IMMEDIATE like every other transaction.
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT") if self.sql.autocommit else None

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One unit of work: commits on success, rolls back on error, errors translated."""
        with translated(), self._sessions() as session, session.begin():
            yield session

    @contextmanager
    def statement(self) -> Iterator[Connection]:
        """A unit of work that is exactly one statement (atomic by itself): autocommit on
        Postgres, a transaction on SQLite. Errors translated."""
        if self._autocommit is None:
            with translated(), self.engine.begin() as conn:
                yield conn
        else:
            with translated(), self._autocommit.connect() as conn:
                yield conn

    def ping(self) -> None:
        """One round trip: :class:`~storage.exceptions.Unavailable` when the database
        cannot be reached (a process checks it once, at start)."""
        with self.statement() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()


#: What stands between a process and Postgres. ``pgbouncer``: PgBouncer in transaction pooling
#: mode, which hands each transaction whatever server connection is free, so nothing may outlive
#: a transaction on one (see :func:`connect`).
Pooler = Literal["none", "pgbouncer"]


def connect(url: str, *, pool_size: int = 4, max_overflow: int = 2, pool_timeout: float = 30.0,
            pooler: Pooler = "none", echo: bool = False) -> Database:
    """Open a database with a budget of connections that is the process's, not its threads':
    ``pool_size`` kept, ``max_overflow`` more at a peak; a thread finding none free waits up to
    ``pool_timeout`` seconds (then :class:`~storage.exceptions.Unavailable`, which callers retry).
    A connection is checked out only for a statement or a transaction, never across a model call.

    Behind PgBouncer (``pooler="pgbouncer"``) psycopg prepares nothing on the server: a statement
    it prepared on one server connection would be missing on the next (``prepared statement
    "_pg3_1" does not exist``). Nothing else here keeps session state: advisory locks are
    transaction-scoped, settings are ``SET LOCAL``, no LISTEN, no temporary tables.

    ``sqlalchemy.create_engine`` is looked up when called, so that tracing, which wraps it
    (:mod:`orchestrator.tracing`), sees every engine made after it started."""
    if url.startswith("sqlite"):
        _ensure_sqlite_dir(url)
        engine = sqlalchemy.create_engine(
            url, echo=echo, poolclass=NullPool, connect_args={"timeout": 30, "check_same_thread": False}
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin_immediate)
    else:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        connect_args: dict[str, Any] = {"connect_timeout": 5}
        if pooler == "pgbouncer":
            connect_args["prepare_threshold"] = None
        engine = sqlalchemy.create_engine(
            url,
            echo=echo,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=pool_timeout,
            pool_recycle=1800,
            connect_args=connect_args,
        )
        event.listen(engine.pool, "checkin", _checked_in)
        event.listen(engine.pool, "checkout", _ping_if_idle(engine.dialect))
    return Database(engine)


# A connection back in use within this many seconds is not pinged: the ping is a round trip
# on every checkout, more than a third of a hot-path statement's cost. A connection that
# died in between (a database restart) fails its statement instead; SQLAlchemy then
# invalidates the pool and every write on the hot path is retried (``_durably``, a task
# retry for the claim), so it costs a retry, never a result.
PING_AFTER_IDLE = 5.0


def _checked_in(_dbapi: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _ping_if_idle(dialect: Any) -> Any:
    """Pessimistic disconnect handling for connections that sat idle (SQLAlchemy's
    ``pool_pre_ping``, limited to them): a dead one makes the pool connect anew."""

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if time.monotonic() - record.info.get("idle_since", 0.0) < PING_AFTER_IDLE:
            return
        record.info["pinged"] = True  # for tests.sqlcount
        try:
            dialect.do_ping(dbapi_connection)  # outside any transaction (autocommit on psycopg)
        except Exception as exc:
            raise DisconnectionError(str(exc)) from exc

    return checkout


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` with Alembic."""
    from alembic import command
    from alembic.config import Config

    if url.startswith("sqlite"):
        _ensure_sqlite_dir(url)
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    with translated():
        command.upgrade(cfg, revision)


def _ensure_sqlite_dir(url: str) -> None:
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # let SQLAlchemy's "begin" hook issue BEGIN
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin_immediate(conn: Any) -> None:
    # Take the write lock at BEGIN so read-then-write transactions serialise instead of
    # failing with "database is locked" on upgrade from a shared lock.
    conn.exec_driver_sql("BEGIN IMMEDIATE")
