"""The plan page is where a person acts, in a real headless Chromium: a real ``conclave api``
with authentication on, a real worker, a board with a person's seat whose final needs approval.
The person signs in, sees that the plan waits for them and since when, answers their seat in the
page's form, watches the meeting go on, and approves the draft.

A form post carries the session's form token: another origin's page that posts to the same form
with the browser's cookie (sent: the two origins are the same site, so even ``SameSite=Strict``
does not hold it back) is refused, and so is a post with the cookie alone, or with another
session's token. Set ``PEOPLE_SCREENSHOTS=docs`` to refresh docs/plan-page-human-seat.png and
docs/plan-page-approval.png."""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import Markup

from orchestrator.api import session
from tests.conftest import ROOT
from tests.e2e.browser import PageLog, browser, sign_in  # noqa: F401  (browser: the fixture)
from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_people import seated_board, status_of
from tests.e2e.test_plan_page import cookie_of, make_tokens
from tests.e2e.test_plan_page import sign_in as http_sign_in

WAIT_MS = 60_000
SEAT = '.seat[data-key="r1.you"]'


class OtherSite:
    """A page on another origin (another port of the same host: the same site) whose form posts
    to ``action`` on its own, as a malicious page would."""

    def __init__(self, action: str, fields: dict[str, str]) -> None:
        inputs = "".join(str(Markup('<input type="hidden" name="{}" value="{}">').format(k, v))
                         for k, v in fields.items())
        html = (f'<!doctype html><html><body><form method="post" action="{action}">{inputs}</form>'
                "<script>document.forms[0].submit()</script></body></html>").encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.end_headers()
                self.wfile.write(html)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def other_site() -> Iterator[Any]:
    made: list[OtherSite] = []

    def make(action: str, fields: dict[str, str]) -> OtherSite:
        made.append(OtherSite(action, fields))
        return made[-1]

    yield make
    for site in made:
        site.close()


def keep(shot: Path, name: str) -> None:
    assert shot.stat().st_size > 20_000
    if os.environ.get("PEOPLE_SCREENSHOTS"):
        shutil.copyfile(shot, ROOT / os.environ["PEOPLE_SCREENSHOTS"] / name)


@pytest.mark.slow
def test_a_person_answers_their_seat_and_approves_the_draft_in_the_page(
        api: Any, workers: Any, settings: Any, browser: Any, other_site: Any, tmp_path: Path) -> None:  # noqa: F811
    tokens = make_tokens(settings.database_url, ("Ada", "acme", ["plans:read", "plans:write"]),
                         ("Reader", "acme", ["plans:read"]))
    ada, reader = tokens["Ada"][1], tokens["Reader"][1]
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    url = server.url
    workers(settings=settings.model_copy(update={"offline_latency": 0.01}))
    r = httpx.post(f"{url}/v1/plans", json=seated_board(approve=True), headers={"Authorization": f"Bearer {ada}"})
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    path = f"/ui/plans/{plan_id}"

    page = browser.new_context(viewport={"width": 1440, "height": 1200}).new_page()
    seen = PageLog(page)
    sign_in(page, url, path, ada)
    # who is awaited, and since when: the seat with what it is asked, its deadline, what to read first
    page.wait_for_selector(SEAT, timeout=WAIT_MS)
    page.wait_for_selector('#phase-r1\\.dana[data-status="completed"]', timeout=WAIT_MS)
    seat = page.locator(SEAT)
    assert "Waiting for You (r1.you) since" in page.text_content("#people .awaiting")
    assert seat.locator(".asked").text_content().startswith("Round 1 of 1. The question: Should Ledgerly move")
    assert re.search(r"asked \d{4}-\d\d-\d\d .* UTC · answer by \d{4}-\d\d-\d\d", seat.locator(".when").text_content())
    assert seat.locator(".read a").all_text_contents() == ["opening"]
    assert page.get_attribute('#phase-r1\\.you', "data-status") == "awaiting_input"
    shot = tmp_path / "seat.png"
    page.screenshot(path=str(shot), full_page=True)
    keep(shot, "plan-page-human-seat.png")

    page.fill(f"{SEAT} textarea[name=text]", "We pilot usage-based pricing with two segments first.\n"
              "Position: CONDITIONAL — only if the pilot keeps churn flat.")
    page.click(f"{SEAT} button[type=submit]")
    page.wait_for_url(re.compile(rf".*{re.escape(path)}\?done=answered#people$"))
    assert page.text_content("#notice") == "Your answer is stored: the meeting goes on."
    # the meeting goes on without a reload: the draft arrives and waits for approval
    page.wait_for_selector('#approval[data-state="awaiting"] .approve-form button', timeout=WAIT_MS)
    page.wait_for_selector("#synthesis[data-ready=true]", timeout=WAIT_MS)
    assert "draft, awaiting approval" in page.text_content("#answer .from")
    assert page.text_content("#plan-status") == "awaiting approval"
    assert "round 1 · a person (Ada)" in page.text_content('#phase-r1\\.you')
    shot = tmp_path / "approval.png"
    page.screenshot(path=str(shot), full_page=True)
    keep(shot, "plan-page-approval.png")

    # another origin's page posts the approval with the browser's cookie: refused, nothing changes
    attack = page.context.new_page()
    forged = other_site(f"{url}{path}/approve", {"csrf": "0" * 64})
    attack.goto(forged.url)
    attack.wait_for_url(f"{url}{path}/approve")
    assert "Not allowed" in attack.text_content("main") and "another site" in attack.text_content("main")
    assert status_of(url, ada, plan_id)["status"] == "awaiting_approval"
    # a program with the cookie alone, or with another session's token: refused too
    cookie = next(c["value"] for c in page.context.cookies() if c["name"] == session.COOKIE)
    jar = {session.COOKIE: cookie}
    bare = httpx.post(f"{url}{path}/approve", cookies=jar, data={"approve": "yes"})  # a form, with no token
    assert bare.status_code == 403 and "auth.forbidden" in bare.text
    theirs = cookie_of(http_sign_in(url, ada))
    claim = session.decode(theirs)
    assert claim is not None
    wrong = httpx.post(f"{url}{path}/approve", cookies=jar, data={"csrf": session.form_token(claim)})
    assert wrong.status_code == 403
    assert httpx.post(f"{url}/v1/plans/{plan_id}/approve", cookies=jar).status_code == 401  # the API: tokens only
    # a reader (plans:read) sees the state but no form, and a post of theirs is refused
    viewer = browser.new_context().new_page()
    sign_in(viewer, url, path, reader)
    viewer.wait_for_selector('#approval[data-state="awaiting"]', timeout=WAIT_MS)
    assert viewer.locator("#people form").count() == 0
    reader_cookie = next(c["value"] for c in viewer.context.cookies() if c["name"] == session.COOKIE)
    reader_claim = session.decode(reader_cookie)
    assert reader_claim is not None
    denied = httpx.post(f"{url}{path}/approve", cookies={session.COOKIE: reader_cookie},
                        data={"csrf": session.form_token(reader_claim)})
    assert denied.status_code == 403 and "plans:write" in denied.text
    assert status_of(url, ada, plan_id)["status"] == "awaiting_approval"

    page.click("#approval .approve-form button")
    page.wait_for_url(re.compile(rf".*{re.escape(path)}\?done=approved#people$"))
    assert "Approved by Ada" in page.text_content("#approval")
    assert page.text_content("#plan-status") == "completed"
    assert status_of(url, ada, plan_id)["status"] == "completed"
    assert seen.errors == []
    assert ada not in server.log() and cookie not in server.log()
