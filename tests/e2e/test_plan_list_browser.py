"""The plan list (``/ui/``) in a real headless Chromium, against a real ``conclave api`` with
tokens on and a real worker: each row shows the plan's id, title, status, progress and cost
as the API tells them; rows change live as plans run, a plan submitted after the page was
opened appears without a reload; labels and statuses filter; a bad filter names its field.
Set ``PLAN_LIST_SCREENSHOT=docs/plan-list.png`` to refresh the screenshot in docs/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.e2e.browser import PageLog, browser, sign_in  # noqa: F401  (browser: the fixture)
from tests.e2e.test_api import api, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_plan_page import make_tokens

WAIT_MS = 60_000
ROWS = """rows => rows.map(r => ({id: r.dataset.plan, status: r.dataset.status,
  done: +r.querySelector('.progress').dataset.done, total: +r.querySelector('.progress').dataset.total,
  tokens: +r.querySelector('.cost').dataset.tokens, title: r.querySelector('.title a').textContent,
  shown: r.querySelector('.id code').textContent, href: r.querySelector('.id a').getAttribute('href')}))"""
ALL_COMPLETED = """n => { const rows = document.querySelectorAll('tr[data-plan]');
  return rows.length === n && Array.from(rows).every(r => r.dataset.status === 'completed'); }"""


@pytest.mark.slow
def test_the_plan_list_shows_each_plan_as_the_api_does_and_follows_them_live(
        api: Any, workers: Any, settings: Any, browser: Any, tmp_path: Path) -> None:  # noqa: F811
    tokens = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]))
    token = tokens["acme-rw"][1]
    auth = {"Authorization": f"Bearer {token}"}
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    url = server.url

    def submit(title: str, label: str) -> str:
        r = httpx.post(f"{url}/v1/plans", json={**board(rounds=1), "title": title, "labels": [label]}, headers=auth)
        assert r.status_code == 201, r.text
        return str(r.json()["plan_id"])

    first, second = submit("Pricing review", "q3"), submit("Pricing review", "q4")  # the same title twice
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    seen = PageLog(page)
    sign_in(page, url, "/ui/", token)
    rows = page.eval_on_selector_all("tr[data-plan]", ROWS)
    assert [r["id"] for r in rows] == [second, first]  # newest first
    assert all(r["status"] == "running" and r["done"] == 0 and r["total"] > 0 for r in rows)
    assert all(r["href"] == f"/ui/plans/{r['id']}" and r["id"].startswith(r["shown"]) for r in rows)
    assert {r["title"] for r in rows} == {"Pricing review"}  # told apart by their ids

    workers(settings=settings)
    page.wait_for_function(ALL_COMPLETED, arg=2, timeout=WAIT_MS)  # without a reload
    third = submit("Hiring plan", "q3")  # after the page was opened
    page.wait_for_function(ALL_COMPLETED, arg=3, timeout=WAIT_MS)
    rows = {r["id"]: r for r in page.eval_on_selector_all("tr[data-plan]", ROWS)}
    assert list(rows) == [third, second, first]
    for plan_id, row in rows.items():
        view = httpx.get(f"{url}/v1/plans/{plan_id}", headers=auth).json()
        assert (row["done"], row["total"]) == (len(view["phases"]), len(view["phases"]))
        assert row["tokens"] == view["usage"]["total_tokens"] > 0
    shot = tmp_path / "plan-list.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("PLAN_LIST_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / os.environ["PLAN_LIST_SCREENSHOT"])

    page.goto(f"{url}/ui/?label=q3")
    assert [r["id"] for r in page.eval_on_selector_all("tr[data-plan]", ROWS)] == [third, first]
    page.goto(f"{url}/ui/?status=failed")
    assert page.eval_on_selector_all("tr[data-plan]", ROWS) == []
    assert seen.errors == []
    response = page.goto(f"{url}/ui/?status=finished")
    assert response is not None and response.status == 422
    assert "status" in page.text_content("body") and "finished" in page.text_content("body")
