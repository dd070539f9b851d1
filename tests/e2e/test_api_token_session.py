"""With ``CONCLAVE_API_TOKEN`` set, the browser session of that token is checked like any
other: only a cookie whose MAC is keyed by that token's hash (and covers this principal
and this expiry) opens the plan page, the JSON routes and ``/metrics``. A forged cookie —
the right format with any other MAC, a MAC keyed by another token, a genuine MAC moved to
another expiry or another principal — is no session."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx

from orchestrator.api import session
from storage.identity import API_TOKEN_ID, session_mac, token_hash
from tests.e2e.test_api import api, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_plan_page import cookie_of, sign_in, with_session

ADMIN_TOKEN = "admin-" + secrets.token_hex(12)


def _forgeries(genuine: str) -> dict[str, str]:
    claim = session.decode(genuine)
    assert claim is not None and claim.principal_id == API_TOKEN_ID
    later = int(time.time()) + 3600
    flipped = claim.mac[:-1] + ("0" if claim.mac[-1] != "0" else "1")
    return {
        "random MAC": session.encode(API_TOKEN_ID, later, secrets.token_hex(32)),
        "all-zero MAC": session.encode(API_TOKEN_ID, later, "0" * 64),
        "one digit off": session.encode(API_TOKEN_ID, claim.expires, flipped),
        "another token's key": session.encode(API_TOKEN_ID, later, session_mac(
            token_hash("not-" + ADMIN_TOKEN), session.message(API_TOKEN_ID, later))),
        "the raw token as key": session.encode(API_TOKEN_ID, later, session_mac(
            ADMIN_TOKEN, session.message(API_TOKEN_ID, later))),
        "genuine MAC, later expiry": session.encode(API_TOKEN_ID, claim.expires + 3600, claim.mac),
        "genuine MAC, another principal": session.encode("0123456789abcdef", claim.expires, claim.mac),
    }


def test_a_forged_api_token_session_reads_nothing(api: Any) -> None:  # noqa: F811
    server = api(env={"CONCLAVE_API_TOKEN": ADMIN_TOKEN})
    url = server.url
    bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    created = httpx.post(f"{url}/v1/plans", json=board(title="admin's plan"), headers=bearer)
    assert created.status_code in (200, 201, 202), created.text
    plan_id = created.json()["plan_id"]

    r = sign_in(url, ADMIN_TOKEN)
    assert r.status_code == 303
    genuine = cookie_of(r)
    assert ADMIN_TOKEN not in genuine
    signed_in = with_session(genuine)  # the real session reads the page, the plans and /metrics
    assert httpx.get(f"{url}/ui/plans/{plan_id}", headers=signed_in).status_code == 200
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=signed_in).json()["id"] == plan_id
    metrics = httpx.get(f"{url}/metrics", headers=signed_in)
    assert metrics.status_code == 200 and "conclave_" in metrics.text

    for name, forged in _forgeries(genuine).items():
        assert session.decode(forged) is not None, name  # the right format: only the MAC can refuse it
        cookie = with_session(forged)
        page = httpx.get(f"{url}/ui/plans/{plan_id}", headers=cookie)
        assert page.status_code == 303 and page.headers["location"].startswith("/ui/login"), (name, page.text)
        listing = httpx.get(f"{url}/ui/", headers=cookie)
        assert listing.status_code == 303 and plan_id not in listing.text, name
        assert httpx.get(f"{url}/metrics", headers=cookie).status_code == 401, name
        for path in (f"/v1/plans/{plan_id}", "/v1/plans"):
            r = httpx.get(url + path, headers=cookie)
            assert r.status_code == 401 and plan_id not in r.text, (name, path, r.text)
