"""What a user reads when their plan, or the environment it runs in, is wrong — where they
read it: ``conclave run``'s stderr and exit code (a subprocess, embedded, no services), and
the API's error bodies (a real ``conclave api`` on Postgres and Redis).

A misspelt field gets the field it was meant to be, in every object of the plan; a YAML
error points at the file, line and column; a plan over the size limit says how large it is
and which setting raises the limit; an embedded run whose model needs a key that is not set
refuses before anything starts, naming the model and the variable, and never prints a key.
"""

from __future__ import annotations

import copy
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conftest import ROOT
from tests.e2e.test_api import api, assert_error, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_cli import run_cli
from tests.llm_server import LLMServer

BOARD: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "board.yaml").read_text())
KEY_VAR = "PLAN_MISTAKES_OPENAI_KEY"
SECRET = "sk-mistakes-7c1e9a0b5d3f4862"

Plan = dict[str, Any]
Slip = tuple[str, str, Callable[[Plan], None]]


def _rename(obj: dict[str, Any], old: str, new: str, default: Any = None) -> None:
    obj[new] = obj.pop(old) if old in obj else default


#: One misspelling in each object of the plan schema: the field as written, the field meant,
#: and how a correct plan is spoilt.
BOARD_SLIPS: list[Slip] = [
    ("rouns", "rounds", lambda p: _rename(p, "rounds", "rouns")),
    ("moderator.rol", "role", lambda p: _rename(p["moderator"], "role", "rol")),
    ("experts[0].skils", "skills", lambda p: _rename(p["experts"][0], "skills", "skils", [])),
    ("experts[3].skills[0].txt", "text", lambda p: _rename(p["experts"][3]["skills"][0], "text", "txt")),
    ("models.fast.max_retires", "max_retries", lambda p: p.update(models={"fast": {"max_retires": 1}})),
    ("answer.optons", "options", lambda p: p.update(answer={"type": "choice", "optons": ["yes", "no"]})),
    ("stop_when.agrement", "agreement", lambda p: p.update(stop_when={"agrement": 0.75})),
    ("budget.max_token", "max_tokens", lambda p: p.update(budget={"max_token": 100_000})),
    ("review.exclude_slef", "exclude_self", lambda p: p.update(review={"exclude_slef": True})),
]
TEAM_SLIPS: list[Slip] = [
    ("phases[0].depend_on", "depends_on", lambda p: _rename(p["phases"][0], "depends_on", "depend_on", [])),
    ("synthesis.promt", "prompt", lambda p: _rename(p["synthesis"], "prompt", "promt", "Bring it together.")),
    ("briefing[0].titel", "title", lambda p: _rename(p["briefing"][0], "title", "titel")),
    ("Divergence", "divergence", lambda p: _rename(p, "divergence", "Divergence", "off")),
]
TEAM: Plan = {
    "kind": "team", "title": "Pricing", "question": "Should we move to usage-based pricing?",
    "experts": [{"name": "Dana", "role": "CFO"}, {"name": "Lead", "role": "Chair"}],
    "phases": [{"id": "cost", "expert": "Dana", "prompt": "Cost it."}],
    "synthesis": {"expert": "Lead"},
    "briefing": [{"title": "Pricing memo", "text": "Invoices per customer: 40 a month."}],
}


def _spoilt(plan: Plan, slips: list[Slip]) -> Plan:
    plan = copy.deepcopy(plan)
    for _, _, spoil in slips:
        spoil(plan)
    return plan


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_") and k != KEY_VAR}
    env.update(extra)
    return env


# ------------------------------------------------------------------ the CLI


def test_a_misspelt_field_is_answered_with_the_field_it_was_meant_to_be(tmp_path: Path) -> None:
    groups = [(BOARD, BOARD_SLIPS[i:i + 3]) for i in range(0, len(BOARD_SLIPS), 3)] + [(TEAM, TEAM_SLIPS)]
    for n, (plan, slips) in enumerate(groups):  # the CLI lists a plan's first six problems
        (tmp_path / f"plan{n}.yaml").write_text(yaml.safe_dump(_spoilt(plan, slips), sort_keys=False))
        out = run_cli(["run", f"plan{n}.yaml"], tmp_path, env=_env())
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith("error [plan.invalid] invalid plan: "), out.stderr
        for field, meant, _ in slips:
            assert f"{field}: unknown field — did you mean {meant!r}?" in out.stderr, (field, out.stderr)
        assert "Traceback" not in out.stderr
    assert not (tmp_path / ".conclave").exists()  # refused before anything was opened or stored


def test_a_field_with_no_near_name_is_unknown_without_a_guess(tmp_path: Path) -> None:
    plan = {**BOARD, "colour": "blue"}
    (tmp_path / "board.yaml").write_text(yaml.safe_dump(plan))
    out = run_cli(["run", "board.yaml"], tmp_path, env=_env())
    assert out.returncode == 2
    assert out.stderr.strip() == "error [plan.invalid] invalid plan: colour: unknown field"


def test_a_yaml_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    lines = (ROOT / "examples" / "board.yaml").read_text().splitlines()
    at = lines.index("  - name: Ravi")
    lines[at + 1] = "    role: Chief Technology Officer: and architect"  # a second ': ' on one line
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "board.yaml").write_text("\n".join(lines) + "\n")
    out = run_cli(["run", "plans/board.yaml"], tmp_path, env=_env())
    assert out.returncode == 2
    column = lines[at + 1].index(": and") + 1
    assert out.stderr.strip() == (f"error [plan.invalid] plans/board.yaml:{at + 2}:{column}: not valid YAML: "
                                  "mapping values are not allowed in this context"), out.stderr
    assert "<unicode string>" not in out.stderr

    (tmp_path / "plan.json").write_text('{"kind": "board",\n  "title": "t",\n  "rounds": two}\n')
    out = run_cli(["run", "plan.json"], tmp_path, env=_env())
    assert out.returncode == 2
    assert out.stderr.strip() == "error [plan.invalid] plan.json:3:13: not valid JSON: Expecting value"


def test_a_plan_over_the_size_limit_names_its_size_and_the_setting_that_raises_it(tmp_path: Path) -> None:
    plan = {**BOARD, "question": "Should we? " + "Consider the detail. " * 250_000}  # ~5 MB
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(plan, width=10**9))
    size = big.stat().st_size
    assert 5_000_000 < size < 6_000_000
    out = run_cli(["run", "big.yaml"], tmp_path, env=_env())
    assert out.returncode == 2
    assert out.stderr.strip() == (f"error [plan.invalid] plan file big.yaml is {size:,} bytes ({size / 1e6:.1f} MB); "
                                  "the limit is 1,000,000 bytes (set CONCLAVE_MAX_PLAN_BYTES to raise it)")
    raised = run_cli(["run", "big.yaml"], tmp_path, env=_env(CONCLAVE_MAX_PLAN_BYTES="6000000"))
    assert raised.returncode == 2  # read now, and refused for what it says
    assert "question:" in raised.stderr and "CONCLAVE_MAX_PLAN_BYTES" not in raised.stderr, raised.stderr


def _keyed_run(tmp_path: Path, url: str) -> tuple[Path, Path]:
    registry = tmp_path / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": {
        "gpt": {"provider": "openai", "model": "normal", "base_url": url, "api_key_env": KEY_VAR,
                "max_retries": 0},
        "default": {"provider": "offline"}}}))
    plan = yaml.safe_load((ROOT / "examples" / "board.yaml").read_text())
    plan["rounds"] = 1
    plan["moderator"]["model"] = "gpt"
    plan["experts"][2]["model"] = "gpt"
    path = tmp_path / "board.yaml"
    path.write_text(yaml.safe_dump(plan))
    return registry, path


def _stored_plans(home: Path) -> int:
    with sqlite3.connect(home / ".conclave" / "conclave.db") as db:
        return int(db.execute("SELECT count(*) FROM plans").fetchone()[0])


def test_an_embedded_run_with_a_model_key_unset_refuses_before_anything_starts(tmp_path: Path) -> None:
    with LLMServer(reply="Usage pricing fits our largest customers.") as llm:
        registry, _ = _keyed_run(tmp_path, llm.url)
        out = run_cli(["run", "board.yaml"], tmp_path, env=_env(CONCLAVE_MODELS=str(registry)))
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.strip() == (
            f"error [config.invalid] moderator.model: model 'gpt' needs {KEY_VAR} (its api_key_env), which is "
            f"not set in this environment; export {KEY_VAR}=… and run again, or give moderator, experts[2] "
            "another model — nothing was started"), out.stderr
        assert out.stdout == ""  # no meeting was drawn
        assert llm.count() == 0  # the model was never called
        assert _stored_plans(tmp_path) == 0  # and no plan was stored

        empty = run_cli(["run", "board.yaml"], tmp_path, env=_env(CONCLAVE_MODELS=str(registry), **{KEY_VAR: ""}))
        assert empty.returncode == 2 and f"needs {KEY_VAR}" in empty.stderr  # an empty key is no key

        ran = run_cli(["run", "board.yaml", "--json"], tmp_path,
                      env=_env(CONCLAVE_MODELS=str(registry), **{KEY_VAR: SECRET}))
        assert ran.returncode == 0, ran.stderr
        assert llm.count("normal") >= 3  # the opening, round 1's summary, the final summary: all by gpt
        assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in llm.requests)
        assert SECRET not in ran.stdout + ran.stderr


def test_every_model_without_its_credentials_is_listed_never_a_value(tmp_path: Path) -> None:
    registry = tmp_path / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": {
        "gpt": {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": KEY_VAR},
        "azure": {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                  "headers": {"api-key": "PLAN_MISTAKES_AZURE_KEY"}},
        "claude": {"provider": "anthropic", "model": "m", "base_url": "http://127.0.0.1:9"},
        "default": {"provider": "offline"}}}))
    plan = {**BOARD, "experts": [{"name": "Dana", "role": "CFO", "model": "gpt"},
                                 {"name": "Ravi", "role": "CTO", "model": "azure"},
                                 {"name": "Sofia", "role": "Sales", "fallback_models": ["claude"]}]}
    (tmp_path / "board.yaml").write_text(yaml.safe_dump(plan))
    out = run_cli(["run", "board.yaml"], tmp_path,
                  env=_env(CONCLAVE_MODELS=str(registry), PLAN_MISTAKES_AZURE_KEY=""))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error [config.invalid] experts[0].model: model 'gpt' needs {KEY_VAR} (its api_key_env), which is not set "
        f"in this environment; export {KEY_VAR}=… and run again, or give experts[0] another model — nothing was "
        "started (2 more below)",
        "  experts[1].model: model 'azure' needs PLAN_MISTAKES_AZURE_KEY (the value of its api-key header), "
        "which is not set in this environment",
        "  experts[2].fallback_models[0]: model 'claude' needs api_key_env, the variable that holds its "
        "anthropic key",
    ], out.stderr
    out = run_cli(["run", "board.yaml"], tmp_path,
                  env=_env(CONCLAVE_MODELS=str(registry), PLAN_MISTAKES_AZURE_KEY=SECRET, **{KEY_VAR: SECRET}))
    assert out.returncode == 2
    assert "model 'claude' needs api_key_env" in out.stderr and "gpt" not in out.stderr
    assert SECRET not in out.stdout + out.stderr


# ------------------------------------------------------------------ the API


def test_the_api_names_each_misspelt_field_with_its_path_and_the_field_meant(api: Any) -> None:  # noqa: F811
    server = api()
    for plan, slips in ((_spoilt(BOARD, BOARD_SLIPS), BOARD_SLIPS), (_spoilt(TEAM, TEAM_SLIPS), TEAM_SLIPS)):
        for body in ({"content": yaml.safe_dump(plan), "headers": {"Content-Type": "application/yaml"}},
                     {"json": {"plan": plan}}):
            r = httpx.post(f"{server.url}/v1/plans", **body)  # type: ignore[arg-type]
            err = assert_error(r, 422)
            assert err["code"] == "plan.invalid"
            named = {d["field"]: d["message"] for d in err["details"]}
            for field, meant, _ in slips:  # every one, each with its path
                assert named.get(field) == f"unknown field — did you mean {meant!r}?", (field, err)
            assert err["message"].startswith("invalid plan: ") and "did you mean" in err["message"], err
    assert httpx.get(f"{server.url}/v1/plans").json()["plans"] == []  # nothing was stored

    created = httpx.post(f"{server.url}/v1/plans", json=board(rounds=1))
    assert created.status_code == 201, created.text
    plan_id = created.json()["plan_id"]
    patched = httpx.patch(f"{server.url}/v1/plans/{plan_id}", json={"titel": "Pricing, revisited"})
    err = assert_error(patched, 422)
    assert err["details"] == [{"field": "titel", "message": "unknown field — did you mean 'title'?"}]
    assert httpx.get(f"{server.url}/v1/plans/{plan_id}").json()["title"] == BOARD["title"]


def test_the_api_says_how_large_a_refused_plan_is_and_what_raises_the_limit(api: Any) -> None:  # noqa: F811
    server = api()
    question = "Should we? " + "Consider the detail. " * 60_000
    body = yaml.safe_dump(board(question=question), width=10**9).encode()
    r = httpx.post(f"{server.url}/v1/plans", content=body, headers={"Content-Type": "application/yaml"})
    err = assert_error(r, 413)
    seen = f"{len(body):,} bytes ({len(body) / 1e6:.1f} MB)"
    assert err["message"] == (f"the plan is {seen}; the limit is 1,000,000 bytes (the server's "
                              "CONCLAVE_MAX_PLAN_BYTES raises it)"), err
    assert err["details"] == [{"field": "body", "message": f"{seen}, over the limit of 1,000,000 bytes"}]
