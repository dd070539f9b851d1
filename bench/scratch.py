"""Each benchmark's own Postgres database: made empty at the start, dropped at the end (its
sessions ended first), so runs never share state and leave nothing behind."""

from __future__ import annotations

import uuid

from sqlalchemy import create_engine, text

PG = "postgresql+psycopg://postgres@127.0.0.1:5432"


def new_database(prefix: str = "conclave_bench") -> tuple[str, str]:
    """A new, empty database: its name and URL (not migrated: the caller decides when)."""
    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    admin = create_engine(f"{PG}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, f"{PG}/{name}"


def drop_database(name: str) -> None:
    admin = create_engine(f"{PG}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()
