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


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_stored_results_become_contents_their_phases_point_at(dialect: str, tmp_path: Any,
                                                              request: pytest.FixtureRequest) -> None:
    """0014 on a database with results: each phase points at the content row that was its own, the
    content keeps its text and gains its SHA-256, and nothing is left that no phase references."""
    import hashlib

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
    upgrade(url, "0010")
    engine = create_engine(url)
    now = datetime.now(UTC).replace(tzinfo=None)
    words = {"ph-1": "Opening words — déjà vu", "ph-2": "The final word"}
    with engine.begin() as c:
        c.execute(text("INSERT INTO plans (id, tenant, title, kind, spec, status, cancel_requested, max_debates, "
                       "labels, created_at, updated_at) VALUES ('p-old', 'default', 'old', 'board', '{}', "
                       "'completed', false, 0, '[]', :n, :n)"), {"n": now})
        for i, (phase, said) in enumerate(words.items()):
            c.execute(text("INSERT INTO phases (id, plan_id, key, kind, position, depends_on, inputs, meta, status, "
                           "attempt, retries_requested, truncated, created_at) VALUES (:id, 'p-old', :k, 'opening', "
                           ":i, '[]', '[]', '{}', 'completed', 1, 0, false, :n)"),
                      {"id": phase, "k": f"k{i}", "i": i, "n": now})
            c.execute(text("INSERT INTO contents (id, plan_id, phase_id, attempt, text, chars, created_at) "
                           "VALUES (:id, 'p-old', :ph, 1, :t, :c, :n)"),
                      {"id": f"c-{phase}", "ph": phase, "t": said, "c": len(said), "n": now})
    upgrade(url)
    with engine.connect() as c:
        got = {r.id: (r.content_id, r.text, r.sha256) for r in c.execute(text(
            "SELECT p.id, p.content_id, c.text, c.sha256 FROM phases p JOIN contents c ON c.id = p.content_id"))}
        assert got == {ph: (f"c-{ph}", said, hashlib.sha256(said.encode()).hexdigest()) for ph, said in words.items()}
        assert c.execute(text("SELECT count(*) FROM contents")).scalar() == 2
    engine.dispose()
    assert diff(url) == []
