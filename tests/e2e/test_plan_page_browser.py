"""The plan page in a real headless Chromium: a real ``conclave api`` with authentication
on, a real worker subprocess running a slow offline model, a user who signs in with a
token and watches a board: words appear in a phase while it is still being written,
statuses change, the synthesis links the phases it cites. Another tenant's user gets the
not-found page. Set ``PLAN_PAGE_SCREENSHOT=docs/plan-page.png`` and
``PLAN_PAGE_CITATION_SCREENSHOT=docs/plan-page-citation.png`` to refresh the screenshots in docs/."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.api import session
from tests.conftest import ROOT
from tests.e2e.browser import PageLog, browser, sign_in  # noqa: F401  (browser: the fixture)
from tests.e2e.test_api import api, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_plan_page import make_tokens

WAIT_MS = 60_000

STREAMING = """key => {
  const card = document.getElementById('phase-' + key);
  return card.dataset.status === 'running' && card.querySelector('.text').textContent.length > 30;
}"""

# what a user sees of the card a citation points at: an outline, on that card
TARGET_OUTLINED = """id => location.hash === '#' + id
  && getComputedStyle(document.getElementById(id)).outlineStyle === 'solid'"""
OUTLINED = "cards => cards.filter(c => getComputedStyle(c).outlineStyle === 'solid').map(c => c.id)"

FRAGMENT = "**/ui/plans/*/live"

# the first element is wholly above the second
ABOVE = "([a, b]) => document.querySelector(a).getBoundingClientRect().bottom <= " \
        "document.querySelector(b).getBoundingClientRect().top"
# the box shows all it holds
WHOLE = "sel => { const b = document.querySelector(sel); return b.scrollHeight <= b.clientHeight + 1; }"
# the cards whose text is cut with no visible way to read the rest
OFFERED = """cards => cards.filter(c => {
  const box = c.querySelector('.text'), more = c.querySelector('.more');
  const cut = box.scrollHeight > box.clientHeight + 1;
  return c.dataset.status === 'completed' && cut && (!more || more.hidden || more.offsetParent === null);
}).map(c => c.id)"""


def plain_lines(markdown: str) -> list[str]:
    """A Markdown text's lines as a reader sees them: no heading marks, list bullets or emphasis."""
    lines = []
    for line in markdown.splitlines():
        line = re.sub(r"^\s*(#+\s+|[-*]\s+|>\s*)", "", line).replace("**", "").replace("__", "")
        line = " ".join(line.split())
        if line:
            lines.append(line)
    return lines


def assert_rendered(page: Any, selector: str, markdown: str) -> None:
    """The element shows ``markdown`` rendered: every line's words, in order, and no Markdown marks."""
    shown = " ".join(page.text_content(selector).split())
    at = 0
    for line in plain_lines(markdown):
        found = shown.find(line, at)
        assert found >= 0, (line, shown[at:at + 300])
        at = found + len(line)
    if "**" in markdown:
        assert "**" not in shown and page.locator(f"{selector} strong").count() > 0

ROUND_ONE_SPEAKING = """() => Array.from(document.querySelectorAll('.level[data-level="1"] .phase'))
  .filter(c => c.dataset.status === 'running' && c.querySelector('.text').textContent.length > 60).length >= 2"""


@pytest.mark.slow
def test_a_user_watches_a_running_board_live(api: Any, workers: Any, settings: Any, browser: Any,  # noqa: F811
                                             tmp_path: Path) -> None:
    tokens = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]),
                         ("globex-ro", "globex", ["plans:read"]))
    acme, globex = tokens["acme-rw"][1], tokens["globex-ro"][1]
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    url = server.url
    r = httpx.post(f"{url}/v1/plans", json=board(rounds=1), headers={"Authorization": f"Bearer {acme}"})
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    path = f"/ui/plans/{plan_id}"

    context = browser.new_context(viewport={"width": 1440, "height": 1100})
    page = context.new_page()
    seen = PageLog(page)
    sign_in(page, url, path, acme)
    cookie = next(c for c in context.cookies() if c["name"] == session.COOKIE)
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["secure"], cookie["path"]) == (True, "Strict", False, "/")
    assert cookie["value"] != acme and acme not in page.content()
    assert page.evaluate("document.cookie") == ""  # no script reads the session
    phases = page.eval_on_selector_all(".phase", "cards => cards.map(c => [c.dataset.key, c.dataset.status])")
    assert len(phases) == 7 and {status for _, status in phases} == {"pending"}  # no worker yet
    page.wait_for_selector("#live:not([hidden])", timeout=WAIT_MS)  # the event stream is open, on the cookie

    workers(settings=settings.model_copy(update={"offline_latency": 0.06}))
    # the chair's words appear while the opening is still being written
    page.wait_for_function(STREAMING, arg="opening", timeout=WAIT_MS)
    assert page.text_content("#phase-opening [data-role=status]") == "running"
    # then it completes; two of round one's experts speak at once (the screenshot)
    page.wait_for_function(ROUND_ONE_SPEAKING, timeout=WAIT_MS)
    assert page.get_attribute("#phase-opening", "data-status") == "completed"
    assert page.text_content("#phase-opening [data-role=status]") == "completed"
    # the answer's waiting line keeps count with the meeting, as refreshes arrive
    page.wait_for_function("() => document.getElementById('answer-waiting').textContent.includes('1 of 7 phases') "
                           "&& document.getElementById('overview').textContent.includes('1 of 7 done')",
                           timeout=WAIT_MS)
    shot = tmp_path / "plan-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    if os.environ.get("PLAN_PAGE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / os.environ["PLAN_PAGE_SCREENSHOT"])
    # from here the server's fragment (the overview and the graph, refreshed after events) is
    # held back, as a slow network would, until a citation has been followed
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    page.route(FRAGMENT, hold)

    # the plan ends: every card completed, the synthesis shown with its phase citations linked
    page.wait_for_function("() => document.getElementById('plan-status').dataset.status === 'completed'",
                           timeout=WAIT_MS)
    page.wait_for_selector("#synthesis[data-ready=true]", timeout=WAIT_MS)
    page.wait_for_function("() => Array.from(document.querySelectorAll('.phase')).every(c => c.dataset.status === "
                           "'completed')", timeout=WAIT_MS)
    page.wait_for_selector("#live", state="hidden")  # the stream was closed at plan_finished
    auth = {"Authorization": f"Bearer {acme}"}
    result = httpx.get(f"{url}/v1/plans/{plan_id}/result", headers=auth).json()["text"]
    assert_rendered(page, "#synthesis", result)  # the answer arrived live, rendered, above the meeting
    assert page.evaluate(ABOVE, ["#answer", ".meeting"])
    opening = httpx.get(f"{url}/v1/plans/{plan_id}/phases/opening/content", headers=auth).json()["text"]
    # streamed, then the stored text, rendered; watched to the end, every card offers its full text
    page.wait_for_selector("#phase-opening .text[data-state=full]", timeout=WAIT_MS)
    assert_rendered(page, "#phase-opening .text", opening)
    assert page.eval_on_selector_all(".phase", OFFERED) == [], "a card that cuts its text offers no full text"
    page.click("#phase-opening .more")
    page.wait_for_selector("#phase-opening .text.open", timeout=WAIT_MS)
    assert page.evaluate(WHOLE, "#phase-opening .text") and page.text_content("#phase-opening .more") == "Show less"
    links = page.eval_on_selector_all("#synthesis a.cite-phase", "as => as.map(a => a.getAttribute('href'))")
    assert links and all(h.startswith("#phase-") for h in links), links
    page.click("#synthesis a.cite-phase >> nth=0")
    page.wait_for_function(TARGET_OUTLINED, arg=links[0][1:], timeout=WAIT_MS)  # the cited card is outlined
    # the refreshes held since round one now arrive: the server's fragment replaces the cards,
    # the overview catches up with them, and the cited card is still the one outlined
    assert held  # at least one refresh was held back
    for route in held:  # a refresh that arrives meanwhile is held and released here too
        route.continue_()
    page.unroute(FRAGMENT)
    page.wait_for_function("() => document.getElementById('overview').textContent.includes('7 of 7 done')",
                           timeout=WAIT_MS)
    assert page.evaluate(TARGET_OUTLINED, links[0][1:])
    assert page.eval_on_selector_all(".phase", OUTLINED) == [links[0][1:]]

    assert seen.errors == []
    # the session reads but never writes, even from the page itself
    status = page.evaluate("id => fetch(`/v1/plans/${id}/cancel`, {method: 'POST'}).then(r => r.status)", plan_id)
    assert status == 401

    # another tenant's user: the not-found page, and no event stream either
    theirs = browser.new_context().new_page()
    sign_in(theirs, url, "/ui/", globex)
    response = theirs.goto(url + path)
    assert response is not None and response.status == 404
    assert "Plan not found" in theirs.text_content("main") and plan_id not in theirs.content()
    assert theirs.evaluate("id => fetch(`/v1/plans/${id}/events`).then(r => r.status)", plan_id) == 404
    assert plan_id not in theirs.text_content("main")
    theirs.click("form.logout button")
    theirs.wait_for_url(f"{url}/ui/login")
    assert theirs.context.cookies() == []
    assert not any(t in server.log() for t in (acme, globex, cookie["value"]))


EXAMPLE = ROOT / "examples" / "board-briefing.yaml"

CITED = """() => Array.from(document.querySelectorAll('#synthesis .cite-doc'),
  b => [b.dataset.doc, Number(b.dataset.chunk)])"""

# where the i-th citation of the synthesis is on screen: (top, left, right), and the scroll
PLACE = """i => { const r = document.querySelectorAll('#synthesis .cite-doc')[i].getBoundingClientRect();
  return [Math.round(r.top), Math.round(r.left), Math.round(r.right), window.scrollY]; }"""
PANEL_LEFT = "() => document.getElementById('document').getBoundingClientRect().left"

SHOWN = """() => {
  const panel = document.getElementById('document');
  const mark = panel.querySelector('mark#passage');
  return panel.hidden ? null : [panel.dataset.doc, Number(panel.dataset.chunk), mark ? mark.textContent : null,
                                panel.querySelector('.doc-title').textContent];
}"""


@pytest.mark.slow
def test_a_briefing_citation_opens_its_passage_highlighted_in_its_document(
        api: Any, workers: Any, settings: Any, browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from orchestrator.briefing.utf16 import utf16_slice
    from orchestrator.client.local_briefing import load_local_plan
    from orchestrator.plan.schema import dump_plan

    tokens = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]))
    acme = tokens["acme-rw"][1]
    auth = {"Authorization": f"Bearer {acme}"}
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    url = server.url
    # the example's pack, read on this side as the CLI reads it, with emoji and CJK in every
    # document's title line: each passage after it sits where UTF-16 indices say, not code points
    plan = dump_plan(load_local_plan(EXAMPLE, settings).plan)
    for document in plan["briefing"]:
        document["text"] = document["text"].replace("\n", " 📈 東京 🤝\n", 1)
    r = httpx.post(f"{url}/v1/plans", json=plan, headers=auth)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    workers(settings=settings.model_copy(update={"offline_latency": 0.0}))
    base = f"{url}/v1/plans/{plan_id}"
    deadline = time.monotonic() + 120
    while httpx.get(base, headers=auth).json()["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.3)
    result = httpx.get(f"{base}/result", headers=auth).json()
    briefing = [c for c in result["citations"] if not c["unresolved"]]
    assert briefing, "the synthesis cites no passage"
    documents = {d["id"]: httpx.get(f"{base}/documents/{d['id']}", headers=auth).json()
                 for d in httpx.get(f"{base}/documents", headers=auth).json()["documents"]}

    page = browser.new_context(viewport={"width": 1440, "height": 1100}).new_page()
    seen = PageLog(page)
    sign_in(page, url, f"/ui/plans/{plan_id}", acme)  # a finished plan: no stream, the synthesis at once
    page.wait_for_selector("#synthesis[data-ready=true]", timeout=WAIT_MS)
    assert_rendered(page, "#synthesis", result["text"])
    cited = [tuple(c) for c in page.evaluate(CITED)]
    assert cited == [(c["doc"], c["chunk"]) for c in briefing]  # each, where it is written
    buttons = page.locator("#synthesis .cite-doc")
    for i, (doc_id, chunk) in enumerate(cited):
        if (doc_id, chunk) in cited[:i]:
            continue
        buttons.nth(i).scroll_into_view_if_needed()
        before = page.evaluate(PLACE, i)
        buttons.nth(i).click()
        page.wait_for_function("([doc, chunk]) => { const p = document.getElementById('document'); "
                               "return !p.hidden && p.dataset.doc === doc && p.dataset.chunk === String(chunk); }",
                               arg=[doc_id, chunk], timeout=WAIT_MS)
        doc = documents[doc_id]
        span = next(s for s in doc["chunks"] if s["chunk"] == chunk)
        passage = utf16_slice(doc["text"], span["start"], span["end"])
        assert passage != doc["text"][span["start"]:span["end"]]  # code-point offsets would be off
        assert page.evaluate(SHOWN) == [doc_id, chunk, passage, doc["title"]]
        assert buttons.nth(i).get_attribute("aria-pressed") == "true"
        # the reader's place is kept: the citation clicked has not moved, and the panel is beside it
        after = page.evaluate(PLACE, i)
        assert after[:2] == before[:2] and after[2] <= page.evaluate(PANEL_LEFT), (before, after)
    assert len(set(cited)) >= 2
    assert seen.errors == []
    buttons.nth(0).click()  # the first citation's passage, highlighted, as docs/ shows it
    page.wait_for_function("() => !document.getElementById('document').hidden", timeout=WAIT_MS)
    shot = tmp_path / "plan-page-citation.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("PLAN_PAGE_CITATION_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / os.environ["PLAN_PAGE_CITATION_SCREENSHOT"])


VOTE_EXAMPLE = ROOT / "examples" / "board-vote.yaml"


@pytest.mark.slow
def test_a_board_decided_by_vote_shows_each_verdict_and_the_decision_record(
        api: Any, workers: Any, settings: Any, browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """Set ``PLAN_PAGE_DECISION_SCREENSHOT=docs/plan-page-decision.png`` to refresh its screenshot."""
    import yaml

    tokens = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]))
    acme = tokens["acme-rw"][1]
    auth = {"Authorization": f"Bearer {acme}"}
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    plan = yaml.safe_load(VOTE_EXAMPLE.read_text())
    plan |= {"rounds": 1, "review": {"anonymize": True, "exclude_self": True}}  # decide: vote, as the example
    assert plan["decide"] == "vote"
    r = httpx.post(f"{server.url}/v1/plans", json=plan, headers=auth)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    workers(settings=settings.model_copy(update={"offline_latency": 0.0}))
    base = f"{server.url}/v1/plans/{plan_id}"
    deadline = time.monotonic() + 120
    while (view := httpx.get(base, headers=auth).json())["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert view["status"] == "completed"
    decision = view["decision"]
    assert decision["protocol"] == "vote" and decision["key"] in plan["answer"]["options"]

    page = browser.new_context(viewport={"width": 1440, "height": 1400}).new_page()
    seen = PageLog(page)
    sign_in(page, server.url, f"/ui/plans/{plan_id}", acme)
    # the decision record, as stored: the winner, and one row per vote with the stored answer
    assert page.get_attribute("#decision", "data-protocol") == "vote"
    assert page.get_attribute("#decision", "data-answer") == decision["key"]
    rows = page.eval_on_selector_all("#decision .votes tbody tr",
                                     "rs => rs.map(r => [r.dataset.expert, r.querySelector('.answer').textContent])")
    assert rows == [[v["expert"], "abstained" if v.get("abstained") else v["answer"]] for v in decision["votes"]]
    scores = page.eval_on_selector_all("#decision .score", "ss => ss.map(s => [s.dataset.key, s.querySelector('b')"
                                                             ".textContent])")
    assert scores == [[c["key"], f"{c['score']:g}"] for c in decision["candidates"]]
    chair = "agrees" if decision["chair"]["matches"] else "error"
    assert page.locator(f"#decision [data-role=chair].{chair}").count() == 1
    # every expert's card shows its verdict; the reviews' cards too; the decision's card its winner
    for phase in view["phases"]:
        if phase["kind"] in ("turn", "review") and phase["verdict"].get("answer") is not None:
            shown = page.get_attribute(f"[id='phase-{phase['key']}'] .verdict", "data-answer")
            assert shown == phase["verdict"]["answer"], phase["key"]
    assert page.get_attribute("[id='phase-decision'] .verdict", "data-answer") == decision["key"]
    assert "same model" in page.text_content("#overview .warning")
    # the chair's closing verdict line reads as a sentence in the answer, not as JSON
    final = next(p for p in view["phases"] if p["key"] == "final")["verdict"]
    said = " ".join(page.text_content("#synthesis .verdict-line").split())
    assert said.startswith(f"Verdict {final['answer']} · confidence {final['confidence']:.2f}"), said
    assert '"answer"' not in page.text_content("#synthesis")
    # the review round is named as one, not as a second round one
    heads = page.eval_on_selector_all(".group-head", "hs => hs.map(h => h.textContent)")
    assert heads == ["round 1 · 4 in parallel · 4 done", "reviews · round 1 · 4 in parallel · 4 done"], heads
    shot = tmp_path / "plan-page-decision.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("PLAN_PAGE_DECISION_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / os.environ["PLAN_PAGE_DECISION_SCREENSHOT"])
    assert seen.errors == []
