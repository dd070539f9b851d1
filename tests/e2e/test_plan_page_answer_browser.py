"""The plan page as the person who asked reads it, in a real headless Chromium against a
real ``conclave api`` and worker: a finished team shows its answer first, rendered from
Markdown with its citations as links, the check card as its verdict, debate cards with
the expert's whole name, each card's full text a click away, and the result to copy or
download as stored; a model's ``<script>``, ``onerror=`` and ``javascript:`` are text on
the page, never markup; a board and a team of ten and more experts keep a graph whose
lines meet groups and never cross a card.

Set ``PLAN_PAGE_TEAM_SCREENSHOT=docs/plan-page-team.png`` and
``PLAN_PAGE_LARGE_SCREENSHOT=docs/plan-page-large-board.png`` to refresh the screenshots."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from orchestrator.briefing.citations import find_phase_citations
from tests.conftest import ROOT
from tests.e2e.browser import PageLog, browser, sign_in  # noqa: F401  (browser: the fixture)
from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_plan_page import make_tokens
from tests.e2e.test_plan_page_browser import ABOVE, WAIT_MS, assert_rendered

TEAM = ROOT / "examples" / "team.yaml"

# a model that repeats what it was asked: the offline model quotes the question in its texts
HOSTILE = ('Should we ship? <script>window.owned = 1</script> <img src=x onerror="window.owned = 1"> '
           '[read this](javascript:window.owned=1) <a href="javascript:window.owned=1">here</a>')

# every element of the page that a model's text could have made: none may run anything
INJECTED = """() => {
  const out = [];
  for (const el of document.querySelectorAll('#plan *')) {
    if (['SCRIPT', 'IMG', 'IFRAME', 'OBJECT', 'EMBED'].includes(el.tagName)) out.push(el.tagName);
    for (const a of el.attributes) {
      if (a.name.startsWith('on')) out.push(`${el.tagName} ${a.name}`);
      if (['href', 'src', 'action'].includes(a.name) && /^\\s*(javascript|data|vbscript):/i.test(a.value))
        out.push(`${el.tagName} ${a.name}=${a.value}`);
    }
  }
  return out;
}"""

# the names a card's header cuts (the header shows less of the name than it holds)
CUT_NAMES = """() => Array.from(document.querySelectorAll('.phase header .who'))
  .filter(w => w.scrollWidth > w.clientWidth + 1 || w.getBoundingClientRect().width < 40).map(w => w.textContent)"""

LINES = "() => Array.from(document.querySelectorAll('#graph svg.edges path'), p => [p.dataset.from, p.dataset.to])"

# every (line, card) where a line of the graph passes over a card that is neither of its ends
CROSSED = """() => { const bad = [];
  for (const p of document.querySelectorAll('#graph svg.edges path')) {
    const o = p.ownerSVGElement.getBoundingClientRect(), ends = [p.dataset.from, p.dataset.to];
    const isEnd = c => ends.some(e => e.startsWith('level-')
      ? c.closest(`.level[data-level="${e.slice(6)}"]`) : c.dataset.key === e);
    const n = p.getTotalLength();
    for (let i = 1; i < 40; i++) {
      const pt = p.getPointAtLength(n * i / 40), x = o.left + pt.x, y = o.top + pt.y;
      for (const c of document.querySelectorAll('#graph .phase')) {
        if (isEnd(c)) continue;
        const r = c.getBoundingClientRect();
        if (x > r.left && x < r.right && y > r.top && y < r.bottom) bad.push([...ends, c.dataset.key]);
      }
    }
  }
  return bad; }"""

OVERLAPS = """() => {
  const cs = Array.from(document.querySelectorAll('#graph .phase'), c => [c.id, c.getBoundingClientRect()]);
  const out = [];
  for (let i = 0; i < cs.length; i++) for (let j = i + 1; j < cs.length; j++) {
    const [a, r] = cs[i], [b, s] = cs[j];
    if (r.left < s.right && s.left < r.right && r.top < s.bottom && s.top < r.bottom) out.push([a, b]);
  }
  return out; }"""


def finish(url: str, auth: dict[str, str], *plan_ids: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 180
    views = []
    for plan_id in plan_ids:
        while (view := httpx.get(f"{url}/v1/plans/{plan_id}", headers=auth).json())["status"] == "running":
            assert time.monotonic() < deadline, view
            time.sleep(0.3)
        views.append(view)
    return views


def submit(url: str, auth: dict[str, str], plan: dict[str, Any]) -> str:
    r = httpx.post(f"{url}/v1/plans", json=plan, headers=auth)
    assert r.status_code == 201, r.text
    plan_id: str = r.json()["plan_id"]
    return plan_id


@pytest.mark.slow
def test_a_finished_team_reads_answer_first_and_nothing_a_model_writes_runs(
        api: Any, workers: Any, settings: Any, browser: Any, tmp_path: Path) -> None:  # noqa: F811
    acme = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]))["acme-rw"][1]
    auth = {"Authorization": f"Bearer {acme}"}
    registry = ROOT / "examples" / "models.yaml"  # the operator's stances: the team's debate, as documented
    server = api(env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_MODELS": str(registry)})
    url = server.url
    team = yaml.safe_load(TEAM.read_text())
    hostile = {**team, "title": "Hostile question", "question": HOSTILE}
    team_id, hostile_id = submit(url, auth, team), submit(url, auth, hostile)
    workers(settings=settings.model_copy(update={"offline_latency": 0.0, "models": registry}))
    view, _ = finish(url, auth, team_id, hostile_id)
    assert view["status"] == "completed"
    result = httpx.get(f"{url}/v1/plans/{team_id}/result", headers=auth).json()["text"]

    context = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
    page = context.new_page()
    seen = PageLog(page)
    sign_in(page, url, f"/ui/plans/{team_id}", acme)
    # the answer first, on the first screen, rendered: headings, emphasis, lists, no ** or ##
    assert page.evaluate(ABOVE, ["#answer", ".meeting"])
    assert page.evaluate("() => document.getElementById('answer').getBoundingClientRect().top") < 200
    assert_rendered(page, "#synthesis", result)
    assert page.locator("#synthesis h3").count() == 1 and page.locator("#synthesis li").count() >= 3
    cited = [k for k in find_phase_citations(result) if any(p["key"] == k for p in view["phases"])]
    links = page.eval_on_selector_all("#synthesis a.cite-phase", "as => as.map(a => a.getAttribute('href'))")
    assert cited and links == [f"#phase-{k}" for k in cited]
    # the check card states its verdict in words, and links the debate it inserted
    check = page.text_content("#phase-check-1 .check")
    assert "Priya and Marcus disagree" in check and "{" not in page.text_content("#phase-check-1")
    assert page.eval_on_selector_all("#phase-check-1 .check a", "as => as.map(a => a.getAttribute('href'))") == [
        "#phase-debate-check-1.priya", "#phase-debate-check-1.marcus"]
    assert page.text_content("[id='phase-debate-check-1.priya'] .who") == "Priya"
    assert page.evaluate(CUT_NAMES) == []
    assert page.evaluate(CROSSED) == []  # no line of the graph runs over the check card, or any other
    # a card's full text, in paragraphs, a click away
    growth = httpx.get(f"{url}/v1/plans/{team_id}/phases/growth/content", headers=auth).json()["text"]
    page.click("#phase-growth .more")
    page.wait_for_selector("#phase-growth .text.open[data-state=full]", timeout=WAIT_MS)
    assert_rendered(page, "#phase-growth .text", growth)
    assert page.locator("#phase-growth .text p").count() >= 3 and page.locator("#phase-growth .text li").count() >= 2
    # copy and download: the result's Markdown, as stored
    page.click("#copy-result")
    page.wait_for_selector("#copy-result[data-state=copied]", timeout=WAIT_MS)
    assert page.evaluate("() => navigator.clipboard.readText()") == result
    with page.expect_download() as download:
        page.click("#download-result")
    saved = tmp_path / "result.md"
    download.value.save_as(saved)
    assert saved.read_text(encoding="utf-8") == result
    assert download.value.suggested_filename == f"usage-based-pricing-for-ledgerly-team-study-{team_id[:8]}.md"
    page.click("#phase-growth .more")  # closed again, for the screenshot
    page.evaluate("() => window.scrollTo(0, 0)")
    shot = tmp_path / "plan-page-team.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("PLAN_PAGE_TEAM_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / os.environ["PLAN_PAGE_TEAM_SCREENSHOT"])

    # the hostile plan: what the model repeated is on the page as text, and nothing of it runs
    page.goto(f"{url}/ui/plans/{hostile_id}")
    page.wait_for_selector("#synthesis[data-ready=true]", timeout=WAIT_MS)
    for card in page.eval_on_selector_all(".phase .more", "bs => bs.map(b => b.closest('.phase').id)"):
        page.click(f"[id='{card}'] .more")
        page.wait_for_selector(f"[id='{card}'] .text.open", timeout=WAIT_MS)
    assert "<script>window.owned = 1</script>" in page.text_content("#synthesis")
    assert page.evaluate(INJECTED) == []
    assert page.evaluate("() => window.owned") is None
    assert seen.errors == []


@pytest.mark.slow
def test_a_board_and_a_team_of_ten_and_more_keep_a_readable_graph(
        api: Any, workers: Any, settings: Any, browser: Any, tmp_path: Path) -> None:  # noqa: F811
    server = api()
    url, auth = server.url, {}
    names = ["Dana", "Ravi", "Sofia", "Tomas", "Priya", "Marcus", "Lena", "Elena", "Kenji", "Amara", "Noor",
             "Felix"]
    experts = [{"name": n, "role": f"Head of {n}'s desk"} for n in names]
    board = {"kind": "board", "title": "A board of ten", "question": "Should Ledgerly move to usage-based pricing?",
             "rounds": 2, "moderator": {"name": "Morgan", "role": "Chair"}, "experts": experts[:10]}
    team = {"kind": "team", "title": "A team of twelve", "question": "Should Ledgerly move to usage-based pricing?",
            "max_debates": 1, "divergence": "model", "experts": experts,
            "models": {"default": {"provider": "offline", "options": {"stances": {"Priya": "support",
                                                                                  "Marcus": "oppose"}}}},
            "phases": [{"id": n.lower(), "expert": n, "prompt": "Assess the proposal."} for n in names[:11]],
            "synthesis": {"expert": "Felix", "prompt": "One recommendation, citing phases."}}
    board_id, team_id = submit(url, auth, board), submit(url, auth, team)
    workers(settings=settings.model_copy(update={"offline_latency": 0.0}))
    finish(url, auth, board_id, team_id)

    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    seen = PageLog(page)
    page.goto(f"{url}/ui/plans/{board_id}")
    page.wait_for_selector("#synthesis[data-ready=true]", timeout=WAIT_MS)
    page.wait_for_function("() => document.querySelectorAll('#graph svg.edges path').length > 0", timeout=WAIT_MS)
    assert page.evaluate(ABOVE, ["#answer", ".meeting"])
    # each round's ten turns are one group: one line in, one line out, none over a card
    assert page.evaluate(LINES) == [["opening", "level-1"], ["level-1", "r1.summary"], ["r1.summary", "level-3"],
                                    ["level-3", "r2.summary"], ["r2.summary", "final"]]
    assert page.evaluate(CROSSED) == [] and page.evaluate(OVERLAPS) == [] and page.evaluate(CUT_NAMES) == []
    assert page.text_content(".level[data-level='1'] .group-head") == "round 1 · 10 in parallel · 10 done"
    shot = tmp_path / "plan-page-large-board.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("PLAN_PAGE_LARGE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / os.environ["PLAN_PAGE_LARGE_SCREENSHOT"])

    page.goto(f"{url}/ui/plans/{team_id}")
    page.wait_for_selector("#synthesis[data-ready=true]", timeout=WAIT_MS)
    page.wait_for_function("() => document.querySelectorAll('#graph svg.edges path').length > 0", timeout=WAIT_MS)
    # eleven experts, the check, the debate of seven, the synthesis: the synthesis reads every
    # phase, but its line comes from the debate it also has everything else through
    lines = page.evaluate(LINES)
    assert lines == [["level-0", "check-1"], ["check-1", "level-2"], ["level-2", "synthesis"]], lines
    assert page.evaluate(CROSSED) == [] and page.evaluate(OVERLAPS) == [] and page.evaluate(CUT_NAMES) == []
    assert seen.errors == []
