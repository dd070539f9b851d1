"""What-if forks over HTTP, against a real ``conclave api`` subprocess, a real worker and Postgres:
a fork is the caller's tenant's and submitted like any plan — another tenant cannot fork or diff
the plan (404, as a missing one), a read-only token cannot fork (403), a fork counts against the
tenant's active cap (429) and its month (402), and bad input is a 422 naming ``from`` or the
override's field. The CLI forks, shows and compares over ``--url``; the plan page says where a
fork came from and shows its reused phases, and the comparison page sets it beside its source."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from storage import connect, plans, principals, usage
from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_cli import run_cli
from tests.e2e.test_plan_page import cookie_of, sign_in, with_session

ADMIN_TOKEN = "admin-token-for-the-fork-api-0123456789"
PRICE = {"input": 0.0, "output": 1.0, "per_call": 0.001}
BOARD: dict[str, Any] = {
    "kind": "board", "title": "Pricing board", "question": "Should we move to usage-based pricing?", "rounds": 2,
    "moderator": {"name": "Morgan", "role": "Chair of the board", "model": "priced"},
    "experts": [{"name": n, "role": r, "model": "priced"} for n, r in (("Dana", "CFO"), ("Ravi", "CTO"),
                                                                       ("Sofia", "Head of Sales"))],
}
BEFORE = ["opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary"]


def registry(directory: Path) -> Path:
    """Two priced offline models (acme's month is counted in dollars); ``contrarian`` gives Ravi
    another stance and speaks slowly (a fork on it is still running when the next request comes)."""
    path = directory / "fork-models.yaml"
    path.write_text(yaml.safe_dump({"models": {
        "priced": {"provider": "offline", "options": {"words": 30, "latency": 0.0}, "price": PRICE},
        "contrarian": {"provider": "offline", "price": PRICE,
                       "options": {"words": 30, "latency": 0.4, "stances": {"Ravi": "oppose"}}},
    }}))
    return path


def wait_final(url: str, plan_id: str, headers: dict[str, str], timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view: dict[str, Any] = httpx.get(f"{url}/v1/plans/{plan_id}", headers=headers).json()
        if view["status"] != "running":
            return view
        time.sleep(0.2)
    raise AssertionError(f"plan {plan_id} still running after {timeout}s")


def error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    body: dict[str, Any] = r.json()["error"]
    return body


def test_a_fork_is_its_tenants_admitted_like_any_plan_and_shown_beside_its_source(
        api: Any, settings: Any, workers: Any, tmp_path: Path) -> None:  # noqa: F811
    db = connect(settings.database_url)
    try:
        tokens = {name: principals.create(db, tenant=tenant, scopes=scopes, name=name)[1]
                  for name, tenant, scopes in (("acme", "acme", ["plans:read", "plans:write"]),
                                               ("acme-ro", "acme", ["plans:read"]),
                                               ("globex", "globex", ["plans:read", "plans:write"]))}
        priced = settings.model_copy(update={"models": registry(tmp_path)})
        server = api(settings_=priced, env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_API_TOKEN": ADMIN_TOKEN,
                                            "CONCLAVE_TENANT_BUDGETS": "acme=5", "CONCLAVE_MAX_ACTIVE_PLANS": "1"})
        workers(settings=priced)
        url = server.url
        acme, acme_ro, globex = ({"Authorization": f"Bearer {tokens[n]}"} for n in ("acme", "acme-ro", "globex"))

        r = httpx.post(f"{url}/v1/plans", json=BOARD, headers=acme)
        assert r.status_code == 201, r.text
        source = r.json()["plan_id"]
        assert wait_final(url, source, acme)["status"] == "completed"
        fork_url = f"{url}/v1/plans/{source}/fork"
        body = {"from": "r2", "overrides": {"experts": [{}, {"model": "contrarian"}]}}

        # another tenant's plan is a missing one, to fork and to diff; a read-only token may not fork
        assert error(httpx.post(fork_url, json=body, headers=globex), 404)["code"] == "plan.not_found"
        assert error(httpx.get(f"{url}/v1/plans/{source}/diff/{source}", headers=globex), 404)["code"] == \
            "plan.not_found"
        denied = error(httpx.post(fork_url, json=body, headers=acme_ro), 403)
        assert denied["code"] == "auth.forbidden" and "plans:write" in denied["message"]

        # bad input names its field
        for bad, field in (({**body, "from": "r7.dana"}, "from"), ({"overrides": {}}, "from"),
                           ({**body, "colour": 1}, "colour"),
                           ({"from": "r2", "overrides": {"experts": [{}, {"modle": "x"}]}},
                            "overrides.experts[1].modle"),
                           ({"from": "r2", "overrides": {"experts": [{}, {"model": "nope"}]}},
                            "overrides.experts[1].model"),
                           ({"from": "r2", "overrides": {"models": {"own": {"provider": "offline"}},
                                                         "experts": [{}, {"model": "own"}]}},
                            "overrides.experts[1].model")):  # no price, and acme's month is counted in dollars
            problem = error(httpx.post(fork_url, json=bad, headers=acme), 422)
            assert problem["details"][0]["field"] == field, problem
        assert [p["id"] for p in httpx.get(f"{url}/v1/plans", headers=acme).json()["plans"]] == [source]

        # the CLI forks over the API; the fork is acme's one active plan: a second one waits its turn
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
        env.update({"CONCLAVE_URL": url, "CONCLAVE_TOKEN": tokens["acme"]})
        out = run_cli(["fork", source, "--from", "r2", "--set", "experts[1].model=contrarian", "--json"], tmp_path,
                      env=env)
        assert out.returncode == 0, out.stderr
        forked = json.loads(out.stdout)
        fork = forked["plan_id"]
        assert (forked["source"], forked["from_phase"], forked["reused"], forked["rerun"]) == (source, "r2", BEFORE, [])
        busy = error(httpx.post(fork_url, json=body, headers=acme), 429)
        assert busy["code"] == "plan.capacity_exceeded"
        view = wait_final(url, fork, acme)
        assert view["status"] == "completed" and view["forked_from"] == {"plan_id": source, "phase": "r2"}
        copied = [p for p in view["phases"] if p["reused_from"] == source]
        assert [p["key"] for p in copied] == BEFORE and all(p["usage"]["calls"] == 0 for p in copied)
        first = httpx.get(f"{url}/v1/plans/{source}", headers=acme).json()
        assert 0 < view["usage"]["cost_usd"] < first["usage"]["cost_usd"]  # only round 2 onwards was paid for

        # the comparison, over HTTP and in the terminal
        diff = httpx.get(f"{url}/v1/plans/{source}/diff/{fork}", headers=acme).json()
        assert {r["key"] for r in diff["phases"] if r["shared"]} == set(BEFORE)
        assert diff["b"]["reused"] == len(BEFORE) and diff["a"]["decision"] is None
        shown = run_cli(["diff", source, fork], tmp_path, env=env)
        assert shown.returncode == 0, shown.stderr
        assert f"reused from {source[:8]}" in shown.stdout and "one shared" not in shown.stdout
        status = run_cli(["status", fork], tmp_path, env=env)
        assert f"fork of {source} from r2" in status.stdout and f"reused from {source}" in status.stdout
        assert run_cli(["result", fork], tmp_path, env=env).stdout.strip() == \
            httpx.get(f"{url}/v1/plans/{fork}/result", headers=acme).json()["text"].strip()

        # the page: where the fork came from, its reused phases, and the two side by side
        cookie = with_session(cookie_of(sign_in(url, tokens["acme"])))
        page = httpx.get(f"{url}/ui/plans/{fork}", headers=cookie).text
        assert f'href="/ui/plans/{source}/diff/{fork}"' in page and "forked from" in page
        assert page.count(' reused" id="phase-') == len(BEFORE)
        assert f'reused from <a href="/ui/plans/{source}' in page
        compared = httpx.get(f"{url}/ui/plans/{source}/diff/{fork}", headers=cookie)
        assert compared.status_code == 200 and "one shared text" in compared.text
        other = with_session(cookie_of(sign_in(url, tokens["globex"])))
        assert httpx.get(f"{url}/ui/plans/{source}/diff/{fork}", headers=other).status_code == 404

        # acme's month is spent: a fork is refused like any plan, and nothing is stored
        phase = plans.load_state(db, source).phases[0]
        usage.record_usage(db, plan_id=source, phase_id=phase.id, attempt=1, seq=99, purpose="phase",
                           model="offline:priced", input_tokens=1, output_tokens=1, source="provider", method=None,
                           cost_usd=5.0)
        spent = error(httpx.post(fork_url, json=body, headers=acme), 402)
        assert spent["code"] == "tenant.budget_exhausted" and spent["details"]["tenant"] == "acme"
        assert len(httpx.get(f"{url}/v1/plans", headers=acme).json()["plans"]) == 2
    finally:
        db.dispose()
