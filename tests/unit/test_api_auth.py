"""The API's authentication as a client meets it, in process (the app over an in-process
ASGI transport, its store SQLite): which routes need a token, which credential a request is
judged by, and what each refusal says — the field it names and why (survivors of the
systematic mutation run over ``orchestrator/api/auth.py``, docs/mutation.md; the e2e tier
drives the same paths through a real ``conclave api``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from orchestrator.api import session
from orchestrator.api.app import create_app
from orchestrator.api.auth import Credentials, still_standing
from orchestrator.client.local import LocalBackend
from orchestrator.core.settings import Settings
from storage import principals
from storage.identity import API_TOKEN_ID, READ, WRITE
from tests.unit.test_one_client import InProcessTransport

API_TOKEN = "the-shared-operator-token"
NEEDS = "authentication required: send Authorization: Bearer <token>"


@pytest.fixture()
def api(home: Path) -> Iterator[SimpleNamespace]:
    """An API with tokens on (``CONCLAVE_API_TOKEN`` and a read-only principal of tenant acme)."""
    settings = Settings(home=home, auth="tokens", api_token=SecretStr(API_TOKEN),
                        offline_latency=0.0)
    local = LocalBackend(settings, worker=False)
    _, reader = principals.create(local.db, tenant="acme", scopes=[READ])
    transport = InProcessTransport(create_app(settings, local=local))
    client = httpx.Client(base_url="http://conclave.test", transport=transport)
    try:
        yield SimpleNamespace(client=client, local=local, reader=reader, settings=settings)
    finally:
        client.close()  # and its transport
        local.close()


def _refusal(response: httpx.Response) -> tuple[int, str, str, list[dict[str, Any]]]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"], error["details"]


def _bearer(token: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {token}")]


def _cookie(value: str) -> list[tuple[str, str]]:
    return [("Cookie", f"{session.COOKIE}={value}")]


@pytest.mark.parametrize(("headers", "problem"), [
    ([], "missing"),
    (_bearer(API_TOKEN) * 2, "more than one Authorization header"),
    ([("Authorization", f"Basic {API_TOKEN}")], "not a bearer token"),
    ([("Authorization", "Bearer ")], "not a bearer token"),
    ([("Authorization", f"Bearer {API_TOKEN} {API_TOKEN}")], "unknown or revoked token"),
    (_bearer("conclave_0123456789abcdef_not-a-real-secret"), "unknown or revoked token"),
    ([(b"Authorization", "Bearer t\u00f6ken".encode("latin-1"))], "unknown or revoked token"),
], ids=["none", "two-headers", "basic", "empty", "two-words", "unknown", "not-ascii"])
def test_a_refused_credential_is_a_401_naming_the_header_and_why(api: SimpleNamespace,
                                                                  headers: list[tuple[Any, Any]],
                                                                  problem: str) -> None:
    got = api.client.get("/v1/plans", headers=httpx.Headers(headers))
    assert _refusal(got) == (401, "auth.unauthorized", NEEDS, [{"field": "Authorization", "message": problem}])


def test_a_session_cookie_never_stands_in_for_a_token_on_a_write(api: SimpleNamespace) -> None:
    cookie = _cookie(_session_of(api, API_TOKEN))
    assert api.client.get("/v1/plans", headers=cookie).status_code == 200
    got = api.client.post("/v1/plans", json={}, headers=cookie)
    assert _refusal(got) == (401, "auth.unauthorized", NEEDS, [
        {"field": "Authorization", "message": "missing (a session cookie authenticates only GET and HEAD)"}])


def test_an_authorization_header_is_judged_before_a_session_cookie(api: SimpleNamespace) -> None:
    """A request that carries both is judged by its header: a good token with a stale cookie
    passes; a bad token does not become good by a valid cookie."""
    stale = _cookie(session.encode(API_TOKEN_ID, 1, "0" * 64))
    assert api.client.get("/v1/plans", headers=_bearer(API_TOKEN) + stale).status_code == 200
    valid = _cookie(_session_of(api, API_TOKEN))
    got = api.client.get("/v1/plans", headers=_bearer("conclave_0123456789abcdef_wrong") + valid)
    assert _refusal(got)[3] == [{"field": "Authorization", "message": "unknown or revoked token"}]
    got = api.client.get("/v1/plans", headers=stale)  # the cookie alone: judged, and refused as such
    assert _refusal(got)[2:] == ("the session has expired or its token was revoked: sign in again at /ui/login",
                                 [{"field": "Cookie", "message": "session expired or revoked"}])


def test_only_the_api_and_metrics_need_a_token(api: SimpleNamespace) -> None:
    assert api.client.get("/healthz").status_code == 200
    assert api.client.get("/openapi.json").status_code == 200
    for path in ("/v1", "/v1/plans", "/metrics"):
        assert api.client.get(path).status_code == 401, path
    assert api.client.get("/v1plans").status_code == 404  # a prefix of the name is not the API
    # an unprotected route that reads its body: signing in, which opens a session for the API
    signed_in = api.client.post("/ui/login", content=f"token={API_TOKEN}&next=/ui/",
                                headers={"Content-Type": "application/x-www-form-urlencoded",
                                         "Origin": "http://conclave.test"})
    assert signed_in.status_code == 303, signed_in.text
    cookie = signed_in.headers["set-cookie"].split(";", 1)[0].split("=", 1)[1]
    assert api.client.get("/v1/plans", headers=_cookie(cookie)).status_code == 200


def test_a_missing_scope_is_a_403_naming_it(api: SimpleNamespace) -> None:
    got = api.client.post("/v1/plans", json={"title": "x"}, headers=_bearer(api.reader))
    assert _refusal(got) == (403, "auth.forbidden", f"this token may not do that: it needs the {WRITE} scope",
                             [{"field": "Authorization", "message": f"missing scope {WRITE}"}])


def test_the_api_tokens_principal_is_of_its_configured_tenant() -> None:
    creds = Credentials(Settings(api_token=SecretStr(API_TOKEN), api_token_tenant="acme"))
    principal = asyncio.run(creds.token_principal(None, API_TOKEN))
    assert principal is not None and principal.id == API_TOKEN_ID and principal.tenant == "acme"


def test_without_an_api_token_no_bearer_stands_for_one(home: Path) -> None:
    """Tokens on, no ``CONCLAVE_API_TOKEN``: no value a client may send is taken for it."""
    settings = Settings(home=home, auth="tokens", offline_latency=0.0)
    local = LocalBackend(settings, worker=False)
    transport = InProcessTransport(create_app(settings, local=local))
    try:
        with httpx.Client(base_url="http://conclave.test", transport=transport) as client:
            for token in ("XXXX", "None", "null", "admin", "-", API_TOKEN):
                got = client.get("/v1/plans", headers=_bearer(token))
                assert got.status_code == 401 and _refusal(got)[3][0]["field"] == "Authorization", token
    finally:
        local.close()


def test_a_session_lasts_at_least_a_minute() -> None:
    assert Credentials(Settings(ui_session_hours=0.01)).session_seconds == 60  # 36 s asked
    assert Credentials(Settings(ui_session_hours=2)).session_seconds == 7200


def test_a_stream_re_checks_a_principal_but_not_the_api_token(api: SimpleNamespace) -> None:
    app = SimpleNamespace(state=SimpleNamespace(local=api.local))
    assert still_standing(app, None) is None  # authentication off
    admin = asyncio.run(Credentials(api.settings).token_principal(app, API_TOKEN))
    assert admin is not None and still_standing(app, admin) is None  # revoked only by the operator's config
    reader = asyncio.run(Credentials(api.settings).token_principal(app, api.reader))
    assert reader is not None
    standing = still_standing(app, reader)
    assert standing is not None and standing() is True
    principals.revoke(api.local.db, reader.id)
    assert standing() is False


def _session_of(api: SimpleNamespace, token: str) -> str:
    creds = Credentials(api.settings)
    app = SimpleNamespace(state=SimpleNamespace(local=api.local))
    principal = asyncio.run(creds.token_principal(app, token))
    assert principal is not None
    return creds.open_session(token, principal)
