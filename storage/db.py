"""Engine, transactions and migrations.

Repositories open every transaction through :meth:`Database.transaction`, which
translates driver errors into :mod:`storage.errors`. Nothing outside ``storage``
sees a SQLAlchemy session.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from storage.errors import translated

MIGRATIONS = Path(__file__).parent / "migrations"


class Database:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """One unit of work: commits on success, rolls back on error, errors translated."""
        with translated(), self._sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def connect(url: str, *, pool_size: int = 10, echo: bool = False) -> Database:
    """Open a database. ``pool_size`` should match the worker's concurrency."""
    if url.startswith("sqlite"):
        _ensure_sqlite_dir(url)
        engine = create_engine(
            url, echo=echo, poolclass=NullPool, connect_args={"timeout": 30, "check_same_thread": False}
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin_immediate)
    else:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        engine = create_engine(
            url,
            echo=echo,
            pool_size=pool_size,
            max_overflow=max(2, pool_size // 4),
            pool_pre_ping=True,
            pool_recycle=1800,
            connect_args={"connect_timeout": 5},
        )
    return Database(engine)


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
