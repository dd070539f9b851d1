"""The plan page over HTTP, against a real ``conclave api`` subprocess with authentication
on: signing in sets a session cookie that is not the token, works only for safe requests,
dies with its token and at its expiry; another tenant's plan is the same 404 page as a
plan that does not exist; bad input is a page that says what is wrong, never a 500; what
a plan says is escaped. The browser itself is ``test_plan_page_browser.py``."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from orchestrator.api import session
from storage import connect, principals
from storage.identity import session_mac, token_hash
from tests.e2e.test_api import api, board  # noqa: F401  (api: the API server fixture)

GHOST = "00000000-0000-4000-8000-000000000000"
EVIL_TITLE = '<script>alert("owned")</script> & <b onmouseover=x>co</b>'


def make_tokens(database_url: str, *specs: tuple[str, str, list[str]]) -> dict[str, tuple[str, str]]:
    """name -> (principal id, token), made as ``conclave tokens create`` makes them."""
    db = connect(database_url)
    try:
        made = {}
        for name, tenant, scopes in specs:
            record, token = principals.create(db, tenant=tenant, scopes=scopes, name=name)
            made[name] = (record.id, token)
        return made
    finally:
        db.dispose()


def sign_in(url: str, token: str, next_path: str = "/ui/") -> httpx.Response:
    return httpx.post(f"{url}/ui/login", data={"token": token, "next": next_path})


def cookie_of(r: httpx.Response) -> str:
    header = r.headers["set-cookie"]
    m = re.match(rf"{session.COOKIE}=([^;]*)", header)
    assert m, header
    return m.group(1)


def with_session(value: str) -> dict[str, str]:
    return {"Cookie": f"{session.COOKIE}={value}"}


def test_sign_in_sessions_tenants_and_bad_input(api: Any, settings: Any, tmp_path: Path) -> None:  # noqa: F811
    tokens = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]),
                         ("acme-wo", "acme", ["plans:write"]), ("globex-ro", "globex", ["plans:read"]))
    acme_id, acme = tokens["acme-rw"]
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    url = server.url
    r = httpx.post(f"{url}/v1/plans", json=board(title=EVIL_TITLE, task_id="ui-1"),
                   headers={"Authorization": f"Bearer {acme}"})
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    page_path = f"/ui/plans/{plan_id}"

    # without a session: pages send the browser to the sign-in form, coming back afterwards
    r = httpx.get(url + page_path)
    assert r.status_code == 303 and r.headers["location"] == f"/ui/login?next={quote(page_path, safe='')}"
    r = httpx.get(f"{url}/ui/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=%2Fui%2F"
    assert httpx.get(f"{url}{page_path}/live").status_code == 401  # the script's refresh: no redirect
    form = httpx.get(f"{url}/ui/login", params={"next": page_path})
    assert form.status_code == 200 and form.headers["content-type"].startswith("text/html")
    assert f'name="next" value="{page_path}"' in form.text and 'type="password"' in form.text
    for elsewhere in ("https://evil.example/", "//evil.example/ui/", "/v1/plans", "/ui/../v1"):
        assert 'name="next" value="/ui/"' in httpx.get(f"{url}/ui/login", params={"next": elsewhere}).text

    # refused sign-ins say why and set no cookie
    for data, status, says in (({"token": "conclave_0123456789abcdef_" + "x" * 43}, 401, "unknown or revoked"),
                               ({"token": "not a token at all"}, 401, "unknown or revoked"),
                               ({"token": tokens["acme-wo"][1]}, 403, "plans:read"),
                               ({"token": "  "}, 400, "Paste a token")):
        r = httpx.post(f"{url}/ui/login", data=data)
        assert r.status_code == status and says in r.text, (data, r.status_code, r.text[-500:])
        assert "set-cookie" not in r.headers and (not data["token"].strip() or data["token"] not in r.text)
    assert httpx.post(f"{url}/ui/login", json={"token": acme}).status_code == 415
    for elsewhere in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site", "Origin": url},
                      {"Sec-Fetch-Site": "same-site"}):
        cross = httpx.post(f"{url}/ui/login", data={"token": acme}, headers=elsewhere)
        assert cross.status_code == 403 and "set-cookie" not in cross.headers, elsewhere
    assert httpx.post(f"{url}/ui/login", data={"token": acme, "next": "/ui/"},
                      headers={"Origin": url}).status_code == 303  # this UI's own form

    # signing in: a session cookie (never the token) for the whole site, HttpOnly, SameSite=Strict
    r = sign_in(url, acme, page_path)
    assert r.status_code == 303 and r.headers["location"] == page_path
    header = r.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in header.split(";")[1:]}
    assert attributes == {"path", "max-age", "httponly", "samesite"}, header  # no Secure over plain http
    assert "SameSite=Strict" in header and "Path=/;" in header and "Max-Age=28800" in header
    mine = cookie_of(r)
    assert mine and acme not in mine and acme.split("_")[-1] not in mine and acme not in r.text
    signed_in = with_session(mine)

    page = httpx.get(url + page_path, headers=signed_in)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "same-origin"
    assert '&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt; &amp; &lt;b onmouseover=x&gt;' in page.text
    assert "<script>alert" not in page.text and "<b onmouseover" not in page.text
    assert f'data-plan="{plan_id}"' in page.text and 'id="phase-r1.dana"' in page.text
    assert acme not in page.text and "acme-rw · acme" in page.text  # who is signed in, never the token
    assert httpx.get(f"{url}/ui/plans/ui-1", headers=signed_in).status_code == 200  # by task id
    live = httpx.get(f"{url}{page_path}/live", headers=signed_in)
    assert live.status_code == 200 and 'id="graph"' in live.text and 'id="overview"' in live.text
    listing = httpx.get(f"{url}/ui/", headers=signed_in)
    assert listing.status_code == 200 and f'href="/ui/plans/{plan_id}"' in listing.text
    assert "&lt;script&gt;" in listing.text and "<script>alert" not in listing.text
    static = httpx.get(f"{url}/ui/static/plan.js")
    assert static.status_code == 200 and static.headers["content-type"].startswith("text/javascript")
    assert httpx.get(f"{url}/ui/static/style.css").headers["content-type"].startswith("text/css")

    # the cookie reads the JSON routes the page uses — and nothing else
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=signed_in).json()["id"] == plan_id
    for method, path in (("POST", f"/v1/plans/{plan_id}/cancel"), ("POST", f"/v1/plans/{plan_id}/resume"),
                         ("PATCH", f"/v1/plans/{plan_id}"), ("POST", "/v1/plans")):
        r = httpx.request(method, url + path, headers=signed_in, json={"title": "x"} if method == "PATCH" else None)
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error"]["details"] == [
            {"field": "Authorization", "message": "missing (a session cookie authenticates only GET and HEAD)"}]
    view = httpx.get(f"{url}/v1/plans/{plan_id}", headers=signed_in).json()
    assert view["cancel_requested"] is False and view["title"] == EVIL_TITLE  # nothing was written
    wrong_header = {**signed_in, "Authorization": "Bearer wrong"}
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=wrong_header).status_code == 401  # a header wins

    # a cookie the server did not make, or made for a past moment, is no session
    forged = mine[:-1] + ("0" if mine[-1] != "0" else "1")
    expired_at = int(time.time()) - 5
    expired = session.encode(acme_id, expired_at,
                             session_mac(token_hash(acme), session.message(acme_id, expired_at)))
    later = int(time.time()) + 3600  # a valid-looking MAC keyed with something other than the token's hash
    other_key = session.encode(acme_id, later, session_mac(token_hash("guess"), session.message(acme_id, later)))
    for bad in (forged, expired, other_key, acme, "v1.api-token.99999999999.x", "%%%"):
        assert httpx.get(url + page_path, headers=with_session(bad)).status_code == 303, bad
        err = httpx.get(f"{url}/v1/plans/{plan_id}", headers=with_session(bad)).json()["error"]
        assert err["details"] == [{"field": "Cookie", "message": "session expired or revoked"}], bad

    # another tenant: the very page a plan that does not exist gets
    theirs = with_session(cookie_of(sign_in(url, tokens["globex-ro"][1])))
    other = httpx.get(url + page_path, headers=theirs)
    ghost = httpx.get(f"{url}/ui/plans/{GHOST}", headers=theirs)
    assert other.status_code == ghost.status_code == 404 and other.text == ghost.text
    assert "Plan not found" in other.text and EVIL_TITLE not in other.text and "&lt;script" not in other.text
    assert httpx.get(f"{url}/ui/plans/ui-1", headers=theirs).text == ghost.text
    assert httpx.get(f"{url}{page_path}/live", headers=theirs).status_code == 404
    assert plan_id not in httpx.get(f"{url}/ui/", headers=theirs).text
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=theirs).status_code == 404

    # bad input: a page that names what is wrong
    for path, status, says in ((f"/ui/plans/{quote('not a plan id!')}", 422, "plan_id must be a plan id"),
                               (f"/ui/plans/{'x' * 300}", 422, "plan_id must be a plan id"),
                               ("/ui/?cursor=bogus", 422, "cursor"),
                               (f"/ui/?cursor={'A' * 500}", 422, "cursor"),
                               ("/ui/static/../auth.py", 404, ""),
                               ("/ui/static/nothing.js", 404, "No such file")):
        r = httpx.get(url + path, headers=signed_in)
        assert r.status_code == status and says in r.text, (path, r.status_code, r.text[-400:])
        assert "Traceback" not in r.text

    # revoking the token ends its sessions at once
    db = connect(settings.database_url)
    try:
        principals.revoke(db, acme_id)
    finally:
        db.dispose()
    assert httpx.get(url + page_path, headers=signed_in).status_code == 303
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=signed_in).status_code == 401

    # signing out clears the cookie; a cross-site sign-out is refused
    out = httpx.post(f"{url}/ui/logout", headers=theirs)
    assert out.status_code == 303 and out.headers["location"] == "/ui/login"
    assert out.headers["set-cookie"].startswith(f"{session.COOKIE}=;") and "Max-Age=0" in out.headers["set-cookie"]
    assert httpx.post(f"{url}/ui/logout", headers={**theirs, "Origin": "https://evil.example"}).status_code == 403

    log = server.log()
    assert not any(t in log for _, t in tokens.values()) and mine not in log


def test_without_authentication_the_page_needs_no_sign_in(api: Any) -> None:  # noqa: F811
    server = api()  # CONCLAVE_AUTH=off: every caller is the operator
    plan_id = httpx.post(f"{server.url}/v1/plans", json=board(title="Open house")).json()["plan_id"]
    listing = httpx.get(f"{server.url}/ui/")
    assert listing.status_code == 200 and "Open house" in listing.text and "authentication off" in listing.text
    assert httpx.get(f"{server.url}/ui/plans/{plan_id}").status_code == 200
    r = httpx.get(f"{server.url}/ui/login", params={"next": f"/ui/plans/{plan_id}"})
    assert r.status_code == 303 and r.headers["location"] == f"/ui/plans/{plan_id}"
    assert httpx.get(f"{server.url}/ui").headers["location"] == "/ui/"
