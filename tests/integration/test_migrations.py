"""Migrations: an empty database migrated to head matches the models exactly."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from storage import upgrade
from storage.models import Base, in_models


def diff(url: str) -> list[Any]:
    engine = create_engine(url)
    with engine.connect() as conn:
        # in_models leaves out the dialect-specific search structures of migration 0003
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": in_models})
        out = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    return list(out)


def test_postgres_head_matches_models(pg_url: str) -> None:
    assert diff(pg_url) == []


def test_sqlite_head_matches_models(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    assert diff(url) == []
