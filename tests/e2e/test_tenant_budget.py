"""A tenant whose monthly budget is spent, against a real ``conclave api`` subprocess on
Postgres: its submit is a 402 naming the budget, what it spent and the month — over HTTP
and through the CLI — and nothing is stored; another tenant submits as before. A plan's
view says what it spent and what is left of its budget, on the API and in ``conclave status``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from storage import connect, plans, principals, usage
from storage.models import utcnow
from tests.budgets import priced_registry, wide_team
from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_cli import run_cli

ADMIN_TOKEN = "admin-token-for-the-budget-api-0123456789"


def test_a_tenant_over_its_month_gets_a_402_and_another_tenant_submits(api: Any, settings: Any,  # noqa: F811
                                                                       tmp_path: Path) -> None:
    db = connect(settings.database_url)
    try:
        tokens = {t: principals.create(db, tenant=t, scopes=["plans:read", "plans:write"], name=t)[1]
                  for t in ("acme", "globex")}
        budgeted = settings.model_copy(update={"models": priced_registry(tmp_path)})
        server = api(settings_=budgeted, env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_API_TOKEN": ADMIN_TOKEN,
                                              "CONCLAVE_TENANT_BUDGETS": "acme=0.05"})
        acme, globex = ({"Authorization": f"Bearer {tokens[t]}"} for t in ("acme", "globex"))
        plan = wide_team(2, budget={"usd": 0.5}, title="Acme pricing")

        r = httpx.post(f"{server.url}/v1/plans", json=plan, headers=acme)
        assert r.status_code == 201, r.text
        first = r.json()["plan_id"]
        view = httpx.get(f"{server.url}/v1/plans/{first}", headers=acme).json()
        assert view["budget"] == {"max_tokens": None, "usd": 0.5, "spent_tokens": 0, "spent_usd": 0.0,
                                  "remaining_tokens": None, "remaining_usd": 0.5}

        # acme's calls this month, as a worker writes them: six cents, past its five
        phase = plans.load_state(db, first).phases[0]
        usage.record_usage(db, plan_id=first, phase_id=phase.id, attempt=1, seq=1, purpose="phase",
                           model="offline:priced", input_tokens=10, output_tokens=20, source="provider", method=None,
                           cost_usd=0.06)
        month = f"{utcnow():%Y-%m}"

        r = httpx.post(f"{server.url}/v1/plans", json={**plan, "title": "Acme again"}, headers=acme)
        assert r.status_code == 402, r.text
        error = r.json()["error"]
        assert error["code"] == "tenant.budget_exhausted"
        assert error["details"] == {"tenant": "acme", "budget_usd": 0.05, "spent_usd": 0.06, "month": month}
        assert "$0.06" in error["message"] and "$0.05" in error["message"] and month in error["message"]
        acme_plans = httpx.get(f"{server.url}/v1/plans", headers=acme).json()["plans"]
        assert [p["id"] for p in acme_plans] == [first]  # the refused plan was not stored

        r = httpx.post(f"{server.url}/v1/plans", json={**plan, "title": "Globex pricing"}, headers=globex)
        assert r.status_code == 201, r.text  # another tenant is unaffected

        view = httpx.get(f"{server.url}/v1/plans/{first}", headers=acme).json()
        assert view["budget"]["spent_usd"] == 0.06 and view["budget"]["remaining_usd"] == pytest.approx(0.44)
        assert view["budget"]["spent_tokens"] == 30

        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
        env.update({"CONCLAVE_URL": server.url, "CONCLAVE_TOKEN": tokens["acme"]})
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump({**plan, "title": "Acme from the CLI"}))
        refused = run_cli(["submit", str(path)], tmp_path, env=env)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert "tenant.budget_exhausted" in refused.stderr and "$0.06" in refused.stderr and month in refused.stderr
        status = run_cli(["status", first], tmp_path, env=env)
        assert status.returncode == 0, status.stderr
        assert "budget: $0.06 spent of $0.50, $0.44 left" in status.stdout, status.stdout
        as_json = json.loads(run_cli(["status", first, "--json"], tmp_path, env=env).stdout)
        assert as_json["budget"]["remaining_usd"] == pytest.approx(0.44)
    finally:
        db.dispose()
