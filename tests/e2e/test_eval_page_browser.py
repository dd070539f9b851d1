"""The eval page in a real headless Chromium: an eval run over HTTP (``Conclave.connect``)
against a real ``conclave api`` and worker subprocess, on the offline model's simulated
solver; the user signs in and reads the report — one row and one interval per arm, the
numbers the JSON report gives, the theory marked beside a simulated arm — and another
tenant's user gets the not-found page. ``EVAL_PAGE_SCREENSHOT=docs/eval-page.png`` refreshes
the screenshot in docs/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Conclave
from orchestrator.evaluation.collect import collect, report_record
from orchestrator.evaluation.harness import Harness
from orchestrator.evaluation.report import build_report
from orchestrator.evaluation.spec import resolve
from tests.conftest import ROOT
from tests.e2e.browser import PageLog, browser, sign_in  # noqa: F401  (browser: the fixture)
from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_plan_page import make_tokens

SPEC = ROOT / "examples" / "eval" / "arithmetic.yaml"
ARMS = ["panel", "single", "self_consistency"]


@pytest.mark.slow
def test_a_user_reads_an_evals_report_with_its_intervals_and_theory(
        api: Any, workers: Any, settings: Any, browser: Any, tmp_path: Path) -> None:  # noqa: F811
    tokens = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]),
                         ("globex-ro", "globex", ["plans:read"]))
    acme, globex = tokens["acme-rw"][1], tokens["globex-ro"][1]
    server = api(env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_ALLOW_PLAN_MODELS": "true"})
    workers(settings=settings.model_copy(update={"offline_latency": 0.0, "allow_plan_models": True}))
    with Conclave.connect(server.url, token=acme) as remote:
        result = Harness(remote, resolve(SPEC, limit=24), in_flight=16, poll=0.1).run()
        assert len(result.outcomes) == 3 * 24
        stored = remote.get_eval("arithmetic")
        report = build_report(report_record(stored, collect(remote, stored)), collect(remote, stored)).as_json()

    page = browser.new_context(viewport={"width": 1280, "height": 1200}).new_page()
    seen = PageLog(page)
    sign_in(page, server.url, "/ui/evals/arithmetic", acme)
    assert page.get_attribute("section.eval", "data-eval") == "arithmetic"
    text = page.text_content("section.eval") or ""
    for arm in report["arms"]:
        assert arm["name"] in text
        assert f"{100 * arm['accuracy']:.1f}" in text  # the measured accuracy, as the JSON report has it
        assert arm["theory"] is not None and f"{100 * arm['theory']['accuracy']:.1f}" in text  # theory beside it
    # the accuracy plot: one interval per arm, where the report puts it, the theory marked on each
    intervals = page.eval_on_selector_all("svg g.interval", "gs => gs.map(g => [g.dataset.label, "
                                          "Number(g.dataset.low), Number(g.dataset.high), g.dataset.theory])")
    assert sorted(i[0] for i in intervals) == sorted(ARMS)
    by_arm = {a["name"]: a for a in report["arms"]}
    for label, low, high, theory in intervals:
        assert (low, high) == pytest.approx(tuple(by_arm[label]["interval"]), abs=1e-3)
        assert theory is not None and float(theory) == pytest.approx(by_arm[label]["theory"]["accuracy"], abs=1e-3)
    # the tables fit the window: a wide one scrolls in its box, the page never sideways
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot = tmp_path / "eval-page.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("EVAL_PAGE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / os.environ["EVAL_PAGE_SCREENSHOT"])
    assert seen.errors == []

    theirs = browser.new_context().new_page()
    sign_in(theirs, server.url, "/ui/", globex)
    response = theirs.goto(server.url + "/ui/evals/arithmetic")
    assert response is not None and response.status == 404
    assert "Eval not found" in (theirs.text_content("main") or "")
