"""Principals in storage, on Postgres and SQLite: a token is shown once and stored only
as a hash; authentication finds the principal by the id in the token and compares the
hash; revoked or tampered tokens authenticate nobody; two tokens of one tenant are
valid at once (rotation)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from storage import Database, connect, principals
from storage.exceptions import NotFound
from storage.identity import token_hash


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest) -> Iterator[Database]:
    if request.param == "postgresql":
        url = request.getfixturevalue("clean_db")
    else:
        url = request.getfixturevalue("sqlite_url")
    database = connect(url)
    yield database
    database.dispose()


def stored_rows(db: Database) -> list[dict[str, object]]:
    with db.engine.connect() as c:
        return [dict(r._mapping) for r in c.execute(text("SELECT * FROM principals ORDER BY created_at"))]


def test_a_token_is_shown_once_and_stored_only_as_its_hash(db: Database) -> None:
    record, token = principals.create(db, tenant="acme", scopes=["plans:write", "plans:read"], name="acme ci")
    assert record.tenant == "acme" and record.scopes == ("plans:read", "plans:write") and record.name == "acme ci"
    assert token.startswith(f"conclave_{record.id}_")
    rows = stored_rows(db)
    assert len(rows) == 1 and rows[0]["token_hash"] == token_hash(token)
    assert all(token not in str(value) for value in rows[0].values())  # the token itself is nowhere
    listed = principals.list_principals(db)
    assert [p.id for p in listed] == [record.id]
    assert "hash" not in str(listed[0].to_dict()) and token_hash(token) not in str(listed[0])
    principal = principals.authenticate(db, token)
    assert principal is not None and (principal.id, principal.tenant) == (record.id, "acme")
    assert principals.list_principals(db)[0].last_used_at is not None


def test_tampered_unknown_and_malformed_tokens_authenticate_nobody(db: Database) -> None:
    record, token = principals.create(db, tenant="acme", scopes=["plans:read"])
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    other_id = token.replace(record.id, "0" * 16)
    for bad in (flipped, other_id, token + "x", token.upper(), "", "Bearer " + token, record.id):
        assert principals.authenticate(db, bad) is None, bad


def test_rotation_two_tokens_of_a_tenant_then_revoke_the_old_one(db: Database) -> None:
    old, old_token = principals.create(db, tenant="acme", scopes=["plans:write"], name="ci 2025")
    new, new_token = principals.create(db, tenant="acme", scopes=["plans:write"], name="ci 2026")
    assert principals.authenticate(db, old_token) is not None and principals.authenticate(db, new_token) is not None
    revoked = principals.revoke(db, old.id)
    assert revoked.revoked_at is not None
    assert principals.authenticate(db, old_token) is None
    assert principals.authenticate(db, new_token) == new.principal
    assert principals.revoke(db, old.id).revoked_at == revoked.revoked_at  # idempotent
    assert [p.revoked_at is not None for p in principals.list_principals(db, tenant="acme")] == [True, False]
    with pytest.raises(NotFound):
        principals.revoke(db, "f" * 16)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"tenant": "acme", "scopes": ["plans:delete"]}, "unknown scope"),
    ({"tenant": "acme", "scopes": []}, "at least one scope"),
    ({"tenant": "Acme Corp", "scopes": ["admin"]}, "tenant"),
    ({"tenant": "acme", "scopes": ["admin"], "name": ""}, "name"),
])
def test_bad_principals_are_refused(db: Database, kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        principals.create(db, **kwargs)  # type: ignore[arg-type]
    assert principals.list_principals(db) == []
