"""The token format and the names a principal is made of refuse everything they did not
make, and say why in words a user can act on (survivors of the systematic mutation run,
docs/mutation.md)."""

from __future__ import annotations

import pytest

from storage import connect, principals
from storage.identity import (
    SCOPES,
    api_token_principal,
    check_name,
    check_tenant,
    parse_scopes,
    principal_id_of,
)

SECRET = "a" * 43
ID = "0123456789abcdef"


@pytest.mark.parametrize("prefix", ["Conclave_", "xonclave_", "conclave-", "CONCLAVE_"])
def test_a_token_needs_the_exact_prefix(prefix: str) -> None:
    assert principal_id_of(f"{prefix}{ID}_{SECRET}") is None


@pytest.mark.parametrize("token", [None, 42, b"conclave_0123456789abcdef_" + SECRET.encode()])
def test_a_token_that_is_not_text_has_no_principal_id(token: object) -> None:
    assert principal_id_of(token) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("secret", ["_" * 43, "ab_cd-" * 7 + "e", "x" * 42 + "_"])
def test_a_secret_may_contain_the_separator(secret: str) -> None:
    """``token_urlsafe`` draws from an alphabet with ``_``: about half of all tokens carry one."""
    assert principal_id_of(f"conclave_{ID}_{secret}") == ID


def test_errors_name_what_is_allowed() -> None:
    known = "plans:read, plans:write, webhooks, admin"
    assert ", ".join(SCOPES) == known
    with pytest.raises(ValueError) as unknown:
        parse_scopes(["plans:delete"])
    assert str(unknown.value) == f"unknown scope 'plans:delete' (known: {known})"
    with pytest.raises(ValueError) as none:
        parse_scopes([])
    assert str(none.value) == f"at least one scope is needed (known: {known})"
    with pytest.raises(ValueError) as tenant:
        check_tenant("Acme")
    assert "'Acme'" in str(tenant.value) and "lower-case" in str(tenant.value)
    with pytest.raises(ValueError) as name:
        check_name("")
    assert "''" in str(name.value) and "1-80" in str(name.value)


@pytest.mark.parametrize("tenant", [None, 7, "", "-acme", "acme!", "a" * 65, "Acme"])
def test_a_malformed_tenant_is_refused(tenant: object) -> None:
    with pytest.raises(ValueError):
        check_tenant(tenant)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [None, 7, "", " ci", "ci\nbot", "a" * 81, "ci;drop"])
def test_a_malformed_name_is_refused(name: object) -> None:
    with pytest.raises(ValueError):
        check_name(name)  # type: ignore[arg-type]


def test_a_principal_is_stored_with_its_checked_name(sqlite_url: str) -> None:
    db = connect(sqlite_url)  # a copy of the migrated template
    try:
        principals.create(db, tenant="acme", scopes=["plans:read"], name="ci bot@acme/1")
        principals.create(db, tenant="acme", scopes=["plans:read"])
        with pytest.raises(ValueError):
            principals.create(db, tenant="acme", scopes=["plans:read"], name="ci\nbot")
        assert {p.name for p in principals.list_principals(db)} == {"ci bot@acme/1", "acme token"}
    finally:
        db.dispose()


def test_the_api_token_principal_has_a_stable_audit_identity() -> None:
    """Audit events and session cookies name the shared token by this id."""
    assert api_token_principal().audit() == {"id": "api-token", "name": "CONCLAVE_API_TOKEN"}
