"""Repository tests run on both databases Conclave supports: the test Postgres and a
SQLite file (the embedded mode's store), each copied from a template migrated to head
(``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from storage import Database, connect


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest) -> Iterator[Database]:
    if request.param == "postgresql":
        url = request.getfixturevalue("clean_db")
    else:
        url = request.getfixturevalue("sqlite_url")
    database = connect(url, pool_size=4)
    yield database
    database.dispose()


@pytest.fixture()
def pg(clean_db: str) -> Iterator[Database]:
    """Postgres only: for what only Postgres does (row and advisory locks across connections)."""
    database = connect(clean_db, pool_size=8)
    yield database
    database.dispose()
