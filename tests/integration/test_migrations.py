"""Migrations: an empty database migrated to head matches the models exactly."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

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


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_existing_plans_join_the_default_tenant(dialect: str, tmp_path: Any, request: pytest.FixtureRequest) -> None:
    """0002 on a database with plans: they get the default tenant, and task ids become
    unique per tenant instead of globally."""
    if dialect == "postgresql":
        from tests.conftest import PG_ADMIN

        name = f"conclave_mig_{uuid.uuid4().hex[:8]}"
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"

        def drop() -> None:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()

        request.addfinalizer(drop)
    else:
        url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001")
    engine = create_engine(url)
    row = {"t": "job-1", "s": "{}", "n": datetime.now(UTC).replace(tzinfo=None)}
    with engine.begin() as c:
        c.execute(text("INSERT INTO plans (id, task_id, title, kind, spec, status, cancel_requested, created_at, "
                       "updated_at) VALUES ('p-old', :t, 'old', 'board', :s, 'running', false, :n, :n)"), row)
    upgrade(url)
    with engine.begin() as c:
        assert c.execute(text("SELECT tenant FROM plans WHERE id = 'p-old'")).scalar() == "default"
        c.execute(text("INSERT INTO plans (id, tenant, task_id, title, kind, spec, status, cancel_requested, "
                       "created_at, updated_at) VALUES ('p-acme', 'acme', :t, 'new', 'board', :s, 'running', "
                       "false, :n, :n)"), row)
    with pytest.raises(IntegrityError), engine.begin() as c:
        c.execute(text("INSERT INTO plans (id, tenant, task_id, title, kind, spec, status, cancel_requested, "
                       "created_at, updated_at) VALUES ('p-dup', 'default', :t, 'dup', 'board', :s, 'running', "
                       "false, :n, :n)"), row)
    engine.dispose()
    assert diff(url) == []
