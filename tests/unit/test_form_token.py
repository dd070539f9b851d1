"""The plan page's forms: a post is a person's only with the session cookie AND that session's
form token — the cookie alone, a forged token or another session's authorizes nothing — and a
browser's word that the post came from another origin refuses it whatever it carries."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from starlette.requests import Request

from orchestrator.api import session
from orchestrator.api.ui.actions import same_origin
from orchestrator.core.errors import Forbidden, Unauthorized
from storage.identity import session_mac, token_hash
from tests.unit.test_session_cookie_is_checked import API_TOKEN, credentials, scope


def form_post(creds: Any, cookie: str | None, token: str | None) -> Any:
    return asyncio.run(creds.form_principal(scope(cookie, method="POST"), token))


def test_a_form_post_needs_the_session_s_own_form_token() -> None:
    creds = credentials()
    admin = asyncio.run(creds.token_principal(None, API_TOKEN))
    assert admin is not None
    cookie = creds.open_session(API_TOKEN, admin)
    mine = session.decode(cookie)
    assert mine is not None
    later = mine.expires + 1  # a second session of the same token, opened a second later
    theirs = session.decode(session.encode(admin.id, later, session_mac(token_hash(API_TOKEN),
                                                                          session.message(admin.id, later))))
    assert theirs is not None
    token = session.form_token(mine)
    assert len(token) == 64 and token == session.form_token(session.decode(cookie))  # type: ignore[arg-type]
    assert token != session.form_token(theirs) and token not in cookie and mine.mac not in token

    assert form_post(creds, cookie, token) == admin
    for given in (None, "", "0" * 64, session.form_token(theirs), token[:-1], token.upper()):
        with pytest.raises(Forbidden) as refused:
            form_post(creds, cookie, given)
        assert refused.value.details == [{"field": "csrf",
                                          "message": "missing or not this session's form token"}]
    with pytest.raises(Unauthorized):  # no session at all: sign in
        form_post(creds, None, token)
    stale = session.encode(admin.id, int(time.time()) - 1,
                           session_mac(token_hash(API_TOKEN), session.message(admin.id, int(time.time()) - 1)))
    stale_claim = session.decode(stale)
    assert stale_claim is not None
    with pytest.raises(Unauthorized):  # an expired session's own token is no better
        form_post(creds, stale, session.form_token(stale_claim))
    with pytest.raises(Unauthorized):  # a session of a token the API no longer has
        form_post(credentials("a-different-token"), cookie, token)


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in {"host": "conclave.example:8000", **headers}.items()]
    return Request({"type": "http", "method": "POST", "headers": raw, "path": "/ui/plans/x/approve"})


@pytest.mark.parametrize(("headers", "ours"), [
    ({"sec-fetch-site": "same-origin", "origin": "http://conclave.example:8000"}, True),
    ({"sec-fetch-site": "same-site"}, False),  # another port of the same host: the same site, not our page
    ({"sec-fetch-site": "cross-site"}, False),
    ({"sec-fetch-site": "none"}, False),  # typed into the address bar: no page of ours sent it
    ({"origin": "http://conclave.example:8000"}, True),
    ({"origin": "http://conclave.example:9000"}, False),
    ({"origin": "null"}, False),  # a sandboxed or data: page
    ({}, True),  # no browser says where it comes from: no page made it post (the token is still needed)
])
def test_a_browser_s_word_that_a_post_came_from_elsewhere_refuses_it(headers: dict[str, str], ours: bool) -> None:
    assert same_origin(request(headers)) is ours
