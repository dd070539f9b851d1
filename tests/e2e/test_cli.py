"""The ``conclave`` CLI as a user runs it: subprocesses, real exit codes, real output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, settings_env

CONCLAVE = [sys.executable, "-m", "orchestrator.cli"]


def run_cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    return subprocess.run([*CONCLAVE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_run_board_embedded_with_no_services_configured(tmp_path: Path) -> None:
    out = run_cli(["run", str(ROOT / "examples" / "board.yaml"), "--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["status"] == "completed"
    assert summary["kind"] == "board"
    assert len(summary["phases"]) == 12 and all(p["status"] == "completed" for p in summary["phases"])
    assert "Recommendation:" in summary["synthesis"]
    assert summary["usage"]["total_tokens"] > 0 and summary["usage"]["estimated"] is True
    assert (tmp_path / ".conclave" / "conclave.db").exists()  # the embedded SQLite file
    assert "Traceback" not in out.stderr


def test_run_shows_a_live_meeting_and_the_final_summary(tmp_path: Path) -> None:
    out = run_cli(["run", str(ROOT / "examples" / "board.yaml")], tmp_path)
    assert out.returncode == 0, out.stderr
    for expected in ("Opening · Morgan", "Round 1 · Dana", "Round 2 summary", "Final summary", "completed"):
        assert expected in out.stdout


def test_invalid_plan_exits_2_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "examples" / "board.yaml").read_text().replace("name: Ravi", "name: Dana"))
    out = run_cli(["run", str(bad), "--json"], tmp_path)
    assert out.returncode == 2
    assert "experts[1].name" in out.stderr and "used twice" in out.stderr
    assert "Traceback" not in out.stderr
    missing = run_cli(["status", "no-such-plan"], tmp_path)
    assert missing.returncode == 2 and "plan.not_found" in missing.stderr


def test_team_plan_on_the_cluster_with_a_separate_worker(settings: Any, workers: Any, tmp_path: Path) -> None:
    env = settings_env(settings)
    worker = subprocess.Popen([*CONCLAVE, "worker", "--without-mingle", "--without-gossip"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        out = run_cli(["run", str(ROOT / "examples" / "team.yaml"), "--json"], tmp_path, env=env)
        assert out.returncode == 0, out.stderr
        summary = json.loads(out.stdout)
        assert summary["status"] == "completed"
        assert {p["kind"] for p in summary["phases"]} >= {"expert", "synthesis"}
        status = run_cli(["status", summary["plan_id"], "--json"], tmp_path, env=env)
        assert json.loads(status.stdout)["status"] == "completed"
        assert not (tmp_path / ".conclave").exists()  # nothing embedded was used
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(timeout=20)


def test_a_bad_setting_exits_2_naming_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env["CONCLAVE_CONCURRENCY"] = "lots"
    out = run_cli(["run", str(ROOT / "examples" / "board.yaml")], tmp_path, env=env)
    assert out.returncode == 2
    assert "CONCLAVE_CONCURRENCY" in out.stderr and "Traceback" not in out.stderr


def test_user_text_is_shown_literally_not_as_markup(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text((ROOT / "examples" / "board.yaml").read_text()
                    .replace("title: Usage-based pricing for Ledgerly", "title: Pricing [red]draft[/red] [v2]")
                    .replace("rounds: 2", "rounds: 1"))
    live = run_cli(["run", str(plan)], tmp_path)
    assert live.returncode == 0, live.stderr
    assert "Pricing [red]draft[/red] [v2]" in live.stdout
    shown = re.search(r"plan ([0-9a-f-]{36})", live.stdout)
    assert shown, live.stdout[:500]  # the live view says which plan it is, for resume/cancel/status
    plan_id = shown.group(1)
    status = run_cli(["status", plan_id], tmp_path)
    assert status.returncode == 0, status.stderr
    assert "Pricing [red]draft[/red] [v2]" in status.stdout and "[completed]" in status.stdout


def test_run_and_status_show_what_a_priced_plan_cost_and_what_its_budget_has_left(tmp_path: Path) -> None:
    (tmp_path / "models.yaml").write_text("models:\n  default:\n    provider: offline\n"
                                          "    price: {input: 3.0, output: 15.0, per_call: 0.001}\n")
    plan = (ROOT / "examples" / "board.yaml").read_text() + "budget: {usd: 5}\n"
    (tmp_path / "board.yaml").write_text(plan)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env["CONCLAVE_MODELS"] = str(tmp_path / "models.yaml")
    out = run_cli(["run", "board.yaml"], tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    footer = re.search(r"completed · 12/12 phases · [\d,]+ tokens \(estimated\) · \$(0\.\d+)", out.stdout)
    assert footer, out.stdout[-600:]
    cost = float(footer.group(1))
    assert 0 < cost < 5
    assert re.search(rf"budget: \${footer.group(1)} spent of \$5\.00, \$[\d.]+ left", out.stdout), out.stdout[-400:]
    plan_id = json.loads(run_cli(["list", "--json"], tmp_path, env=env).stdout)["plans"][0]["id"]
    status = run_cli(["status", plan_id], tmp_path, env=env)
    assert f"${footer.group(1)}  budget: ${footer.group(1)} spent of $5.00" in status.stdout, status.stdout[:400]
