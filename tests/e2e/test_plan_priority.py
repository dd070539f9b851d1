"""A plan's priority over HTTP and the CLI, against a real ``conclave api`` subprocess: set at
submit, shown in the plan view, changed by ``PATCH /v1/plans/{id}`` and ``conclave update
--priority`` (plans:write, the caller's tenant only); a wrong value is a 422 naming ``priority``,
a finished plan's a 409."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import httpx

from tests.e2e.test_api import api, assert_error, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_api_principals import ADMIN_TOKEN, _auth, _tokens


def test_priority_is_set_at_submit_patched_while_it_runs_and_refused_naming_the_field(
        api: Any, settings: Any) -> None:  # noqa: F811
    tokens = _tokens(settings.database_url)
    url = api(env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_API_TOKEN": ADMIN_TOKEN}).url
    acme, acme_ro, globex = (_auth(tokens[n][1]) for n in ("acme-rw", "acme-ro", "globex-rw"))
    err = assert_error(httpx.post(f"{url}/v1/plans", json=board(priority=3), headers=acme), 422)
    assert err["details"][0]["field"] == "priority"
    r = httpx.post(f"{url}/v1/plans", json=board(priority=1), headers=acme)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=acme).json()["priority"] == 1

    r = httpx.patch(f"{url}/v1/plans/{plan_id}", json={"priority": -2}, headers=acme)
    assert r.status_code == 200 and r.json()["priority"] == -2, r.text
    for body in ({"priority": 3}, {"priority": -3}, {"priority": "high"}, {"priority": 1.5}, {"priority": None},
                 {"priority": True}):
        err = assert_error(httpx.patch(f"{url}/v1/plans/{plan_id}", json=body, headers=acme), 422)
        assert err["details"][0]["field"] == "priority", (body, err)
    assert_error(httpx.patch(f"{url}/v1/plans/{plan_id}", json={"priority": 2}, headers=acme_ro), 403)
    assert_error(httpx.patch(f"{url}/v1/plans/{plan_id}", json={"priority": 2}, headers=globex), 404)
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=acme).json()["priority"] == -2  # nothing stored

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "update", plan_id, "--priority", "2",
                           "--url", url, "--token", tokens["acme-rw"][1]], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "priority 2" in done.stdout
    assert httpx.get(f"{url}/v1/plans/{plan_id}", headers=acme).json()["priority"] == 2
    bad = subprocess.run([sys.executable, "-m", "orchestrator.cli", "update", plan_id, "--priority", "7",
                          "--url", url, "--token", tokens["acme-rw"][1]], capture_output=True, text=True,
                         env=env, timeout=60)
    assert bad.returncode != 0 and "priority" in bad.stderr, bad.stderr

    httpx.post(f"{url}/v1/plans/{plan_id}/cancel", headers=acme).raise_for_status()
    err = assert_error(httpx.patch(f"{url}/v1/plans/{plan_id}", json={"priority": 0}, headers=acme), 409)
    assert err["details"][0]["field"] == "priority"
