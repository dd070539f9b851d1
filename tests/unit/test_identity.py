"""Principals, scopes and tokens without a database."""

from __future__ import annotations

import pytest

from storage.identity import (
    ADMIN,
    READ,
    WRITE,
    Principal,
    api_token_principal,
    hash_matches,
    matches_api_token,
    new_token,
    parse_scopes,
    principal_id_of,
    token_hash,
)


def test_scopes_are_a_fixed_list() -> None:
    assert parse_scopes(["plans:write", "plans:read", "plans:read"]) == (READ, WRITE)
    for bad in (["plans:delete"], ["Admin"], ["plans:read", "*"], []):
        with pytest.raises(ValueError):
            parse_scopes(bad)


def test_admin_allows_everything_and_sees_every_tenant() -> None:
    reader = Principal("p1", "ci", "acme", (READ,))
    assert reader.allows(READ) and not reader.allows(WRITE) and not reader.allows(ADMIN)
    assert reader.reach == "acme"
    admin = Principal("p2", "ops", "default", (ADMIN,))
    assert admin.allows(WRITE) and admin.reach is None
    assert admin.audit() == {"id": "p2", "name": "ops"}


def test_tokens_carry_the_principal_id_and_only_their_hash_is_kept() -> None:
    principal_id, token, digest = new_token()
    assert token.startswith(f"conclave_{principal_id}_") and len(token) == len("conclave_") + 16 + 1 + 43
    assert principal_id_of(token) == principal_id
    assert digest == token_hash(token) and token not in digest and hash_matches(token, digest)
    other_id, other, _ = new_token()
    assert other_id != principal_id and not hash_matches(other, digest)


@pytest.mark.parametrize("token", ["", "conclave_", "Bearer x", "conclave_0123456789abcdef",
                                   "conclave_0123456789ABCDEF_" + "a" * 43, "conclave_0123456789abcdef_short",
                                   "conclave_0123456789abcdef_" + "a" * 44, "xconclave_0123456789abcdef_" + "a" * 43])
def test_malformed_tokens_have_no_principal_id(token: str) -> None:
    assert principal_id_of(token) is None


def test_the_api_token_is_one_admin_principal() -> None:
    principal = api_token_principal()
    assert principal.is_admin and principal.tenant == "default" and principal.name == "CONCLAVE_API_TOKEN"
    assert matches_api_token("s3cret", "s3cret") and not matches_api_token("s3cret", "other")
    assert not matches_api_token("", "")  # an empty configured token matches nothing
    with pytest.raises(ValueError, match="unknown scope"):
        api_token_principal(["root"])
