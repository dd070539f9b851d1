"""Finding plans again from the CLI, as a user runs it (subprocesses, embedded): ``list``
with whole ids at 80 columns piped, a unique prefix accepted, a missing plan reported with
where it was looked for, ``info`` and the banner naming the database, a header on
``tokens list``, a relative registry path refused with the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ROOT
from tests.e2e.test_api import api, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_cli import run_cli
from tests.e2e.test_plan_page import make_tokens


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env.update({"COLUMNS": "80", **extra})
    return env


def test_list_prefixes_and_where_it_looked(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text((ROOT / "examples" / "board.yaml").read_text().replace("rounds: 2", "rounds: 1")
                    .replace("title: Usage-based pricing for Ledgerly",
                             "title: A long title that fills the eighty columns of a terminal all by itself"))
    ran = run_cli(["run", str(plan), "--json"], tmp_path, env=_env(CONCLAVE_TENANT="acme"))
    assert ran.returncode == 0, ran.stderr
    plan_id = json.loads(ran.stdout)["plan_id"]
    assert "conclave: embedded" not in ran.stderr  # piped: no banner for a program to skip
    # at a terminal (FORCE_COLOR: rich treats stderr as one), the banner names the database
    shown = run_cli(["list"], tmp_path, env=_env(CONCLAVE_TENANT="acme", FORCE_COLOR="1"))
    assert f"embedded — database {tmp_path / '.conclave' / 'conclave.db'}" in shown.stderr
    assert "tenant acme" in shown.stderr

    listed = run_cli(["list", "--tenant", "acme"], tmp_path, env=_env())
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "STATUS", "PROGRESS", "CREATED", "TITLE"]
    assert row.startswith(f"{plan_id}  completed") and " 7/7 " in row and row.endswith("all by itself")
    assert run_cli(["list", "--tenant", "globex"], tmp_path, env=_env()).stdout == ""  # another tenant's: none

    status = run_cli(["status", plan_id[:8]], tmp_path, env=_env())
    assert status.returncode == 0, status.stderr
    assert f"plan {plan_id}  [completed]" in status.stdout  # whole, piped at 80 columns
    hidden = run_cli(["status", plan_id[:8], "--tenant", "globex"], tmp_path, env=_env())
    assert hidden.returncode == 2 and "plan.not_found" in hidden.stderr
    assert f"looked in the embedded database {tmp_path / '.conclave' / 'conclave.db'} (tenant globex)" in hidden.stderr
    assert "Traceback" not in ran.stderr + listed.stderr + status.stderr + hidden.stderr


def test_info_hides_passwords_and_tokens_list_has_a_header(tmp_path: Path) -> None:
    env = _env(CONCLAVE_DATABASE_URL="postgresql://postgres:s3cret-pw@127.0.0.1:5432/nowhere",
               CONCLAVE_BROKER_URL="redis://:other-s3cret@127.0.0.1:6379/0")
    info = run_cli(["info"], tmp_path, env=env)
    assert info.returncode == 0, info.stderr
    assert "mode:      cluster" in info.stdout and "postgresql://postgres:***@127.0.0.1:5432/nowhere" in info.stdout
    assert "s3cret" not in info.stdout + info.stderr
    created = run_cli(["tokens", "create", "--tenant", "acme", "--scope", "plans:read"], tmp_path, env=_env())
    assert created.returncode == 0, created.stderr
    listed = run_cli(["tokens", "list"], tmp_path, env=_env())
    assert listed.stdout.splitlines()[0].split() == ["ID", "TENANT", "NAME", "SCOPES", "STATE", "LAST", "USED"]
    assert created.stdout.strip() not in listed.stdout


def test_a_relative_registry_that_is_not_here_is_refused_with_the_fix(tmp_path: Path) -> None:
    out = run_cli(["run", str(ROOT / "examples" / "board.yaml")], tmp_path,
                  env=_env(CONCLAVE_MODELS="examples/models.yaml"))
    assert out.returncode == 2
    assert "CONCLAVE_MODELS (examples/models.yaml)" in out.stderr and "absolute path" in out.stderr
    assert "Traceback" not in out.stderr


def test_list_and_prefixes_over_the_api_are_the_tokens_tenant(api: Any, workers: Any, settings: Any,  # noqa: F811
                                                               tmp_path: Path) -> None:
    """``--url`` with a tenant's token: ``list`` shows that tenant's plans only, a prefix finds
    one of them, and another tenant's plan is not found by its prefix nor its whole id."""
    tokens = make_tokens(settings.database_url, ("acme-rw", "acme", ["plans:read", "plans:write"]),
                         ("globex-rw", "globex", ["plans:read", "plans:write"]))
    acme, globex = tokens["acme-rw"][1], tokens["globex-rw"][1]
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    workers()
    ids = {}
    for name, token in (("acme", acme), ("globex", globex)):
        r = httpx.post(f"{server.url}/v1/plans", json=board(rounds=1), headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 201, r.text
        ids[name] = r.json()["plan_id"]
    remote = ["--url", server.url, "--token", acme]
    waited = run_cli(["status", ids["acme"][:8], "--json", *remote], tmp_path, env=_env())
    assert waited.returncode == 0, waited.stderr
    listed = run_cli(["list", *remote], tmp_path, env=_env())
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()[1:]
    assert [r.split()[0] for r in rows] == [ids["acme"]]
    for ref in (ids["globex"][:8], ids["globex"]):
        hidden = run_cli(["status", ref, *remote], tmp_path, env=_env())
        assert hidden.returncode == 2 and "plan.not_found" in hidden.stderr, hidden.stderr
        assert "Traceback" not in hidden.stderr
