"""A browser session cookie opens the plan page only for the token that made it, until it
expires, and only on safe requests; a forged, stale or foreign cookie gets a 401 (survivors of
the systematic mutation run, docs/mutation.md; the e2e plan-page tests drive the same path
through a browser)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import SecretStr

from orchestrator.api import session
from orchestrator.api.auth import Credentials
from orchestrator.core.errors import Unauthorized
from orchestrator.core.settings import Settings
from storage import connect, principals
from storage.identity import ADMIN, API_TOKEN_ID, READ, session_mac, token_hash

API_TOKEN = "the-shared-operator-token"


def credentials(api_token: str | None = API_TOKEN, **settings: Any) -> Credentials:
    return Credentials(Settings(api_token=SecretStr(api_token) if api_token is not None else None, **settings))


def scope(cookie: str | None, *, method: str = "GET", app: Any = None, authorization: str | None = None
          ) -> dict[str, Any]:
    headers = [] if cookie is None else [(b"cookie", f"theme=dark; {session.COOKIE}={cookie}".encode())]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    return {"type": "http", "method": method, "headers": headers, "app": app}


def principal_of(creds: Credentials, cookie: str, **kw: Any) -> Any:
    return asyncio.run(creds.principal(scope(cookie, **kw)))


def refused(creds: Credentials, cookie: str, **kw: Any) -> bool:
    try:
        principal_of(creds, cookie, **kw)
    except Unauthorized:
        return True
    return False


def forged(value: str, *, mac: str | None = None, expires: int | None = None) -> str:
    claim = session.decode(value)
    assert claim is not None
    return session.encode(claim.principal_id, claim.expires if expires is None else expires,
                          claim.mac if mac is None else mac)


def test_the_api_token_session_opens_the_page_and_nothing_else_does() -> None:
    creds = credentials()
    admin = asyncio.run(creds.token_principal(None, API_TOKEN))
    assert admin is not None and admin.is_admin
    cookie = creds.open_session(API_TOKEN, admin)
    assert principal_of(creds, cookie) == admin
    assert principal_of(creds, cookie, method="HEAD") == admin
    claim = session.decode(cookie)
    assert claim is not None
    flipped = ("0" if claim.mac[0] != "0" else "1") + claim.mac[1:]
    for bad in (forged(cookie, mac=flipped), forged(cookie, mac="0" * 64),
                forged(cookie, expires=claim.expires + 3600)):  # a longer session under the old MAC
        assert refused(creds, bad), bad
    # a cookie made for another CONCLAVE_API_TOKEN, or when none is configured any more
    assert refused(credentials("a-different-token"), cookie)
    assert refused(credentials(None, auth="tokens"), cookie)


def test_a_session_lasts_the_configured_hours_and_not_a_second_more() -> None:
    creds = credentials(ui_session_hours=2)
    admin = asyncio.run(creds.token_principal(None, API_TOKEN))
    assert admin is not None
    before = int(time.time())
    claim = session.decode(creds.open_session(API_TOKEN, admin))
    assert claim is not None and before + 2 * 3600 <= claim.expires <= int(time.time()) + 2 * 3600
    assert not claim.expired(now=claim.expires - 1) and claim.expired(now=claim.expires)
    mac = session_mac(token_hash(API_TOKEN), session.message(admin.id, int(time.time()) - 1))
    stale = session.encode(admin.id, int(time.time()) - 1, mac)
    assert refused(creds, stale)  # correctly signed, but over


def test_a_session_never_authorises_a_write() -> None:
    creds = credentials()
    admin = asyncio.run(creds.token_principal(None, API_TOKEN))
    assert admin is not None
    cookie = creds.open_session(API_TOKEN, admin)
    for method in ("POST", "PATCH", "PUT", "DELETE"):
        with pytest.raises(Unauthorized) as info:
            principal_of(creds, cookie, method=method)
        assert "GET and HEAD" in info.value.details[0]["message"]


def test_a_principal_session_dies_with_its_token(sqlite_url: str) -> None:
    db = connect(sqlite_url)  # a copy of the migrated template
    app = SimpleNamespace(state=SimpleNamespace(local=SimpleNamespace(db=db)))
    try:
        record, token = principals.create(db, tenant="acme", scopes=[READ])
        _, other_token = principals.create(db, tenant="acme", scopes=[ADMIN])
        creds = credentials()
        reader = asyncio.run(creds.token_principal(app, token))
        assert reader is not None and reader.id == record.id and reader.tenant == "acme"
        cookie = creds.open_session(token, reader)
        assert principal_of(creds, cookie, app=app) == reader
        # the same claim signed with another principal's token is not this principal's session
        claim = session.decode(cookie)
        assert claim is not None
        assert refused(creds, forged(cookie, mac=session_mac(token_hash(other_token), claim.message)), app=app)
        principals.revoke(db, record.id)
        assert refused(creds, cookie, app=app)
    finally:
        db.dispose()


@pytest.mark.parametrize("value", [
    "", "v1", "v2.api-token.9999999999." + "0" * 64, "v1.api-token.9999999999." + "0" * 63,
    "v1.API-TOKEN.9999999999." + "0" * 64, "v1.0123456789abcdeF.9999999999." + "0" * 64,
    "v1.api-token.-1." + "0" * 64, "v1.api-token.9999999999." + "0" * 64 + ".",
    " v1.api-token.9999999999." + "0" * 64, "v1.api-token.1234567890123." + "0" * 64,
    "v1xapi-token.9999999999." + "0" * 64,
])
def test_a_value_this_module_did_not_make_is_no_claim(value: str) -> None:
    assert session.decode(value) is None


def test_a_claim_round_trips_and_its_mac_covers_version_principal_and_expiry() -> None:
    value = session.encode("0123456789abcdef", 1_900_000_000, "ab" * 32)
    assert value == "v1.0123456789abcdef.1900000000." + "ab" * 32
    assert session.decode(value) == session.Claim("0123456789abcdef", 1_900_000_000, "ab" * 32)
    assert session.decode(value + "x" * 300) is None
    assert session.message("0123456789abcdef", 1_900_000_000) == "conclave-session:v1:0123456789abcdef:1900000000"
    digest = token_hash(API_TOKEN)
    mac = session_mac(digest, session.message("api-token", 5))
    assert len(mac) == 64 and mac == session_mac(digest, session.message("api-token", 5))
    assert mac != session_mac(digest, session.message("api-token", 6))
    assert mac != session_mac(token_hash("another"), session.message("api-token", 5))


def test_the_cookie_is_read_from_any_cookie_header() -> None:
    assert session.read(scope("v1.x")) == "v1.x"
    assert session.read(scope(None)) is None
    split = {"headers": [(b"Cookie", b"theme=dark"), (b"COOKIE", f"{session.COOKIE}=v1.y".encode())]}
    assert session.read(split) == "v1.y"  # type: ignore[arg-type]
    assert session.read({"headers": [(b"cookie", b"theme=dark")]}) is None  # type: ignore[arg-type]


def test_the_browser_is_told_to_guard_the_cookie() -> None:
    opened = session.set_cookie("v1.x", max_age=7200, secure=False)
    assert opened == "conclave_session=v1.x; Path=/; Max-Age=7200; HttpOnly; SameSite=Strict"
    assert session.set_cookie("v1.x", max_age=60, secure=True).endswith("; HttpOnly; SameSite=Strict; Secure")
    assert session.clear_cookie(secure=False) == "conclave_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
    assert session.clear_cookie(secure=True).endswith("; Secure")
    assert frozenset({"GET", "HEAD"}) == session.SAFE_METHODS


@pytest.mark.parametrize("configured", [None, "", " \n"], ids=["unset", "empty", "blank"])
def test_without_an_api_token_no_cookie_stands_for_one(configured: str | None) -> None:
    """With no usable ``CONCLAVE_API_TOKEN`` (principals' tokens only), a cookie claiming the
    API token's session is nobody's — even one whose MAC is keyed by the hash of the empty
    token, which anyone can compute: it would read every tenant's plans as admin."""
    creds = credentials(configured, auth="tokens")
    expires = int(time.time()) + 3600
    message = session.message(API_TOKEN_ID, expires)
    for key in ("", " \n", " "):
        cookie = session.encode(API_TOKEN_ID, expires, session_mac(token_hash(key), message))
        assert refused(creds, cookie), (configured, key)
