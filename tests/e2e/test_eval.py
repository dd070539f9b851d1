"""``conclave eval`` as a user runs it: subprocesses in embedded mode (a SQLite file, the
in-process worker), real exit codes, the printed tables; the report rebuilt later from the
database says what the run said, and a second run runs nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e.test_cli import run_cli

SPEC = str(ROOT / "examples" / "eval" / "arithmetic.yaml")


def rows(table: str) -> dict[str, list[str]]:
    """The report's first table (one row per arm: kind, items, right, accuracy, interval, …), by arm."""
    found: dict[str, list[str]] = {}
    for line in table.split("\n\n")[0].splitlines():
        cells = line.split()
        if cells and cells[0] in ("panel", "single", "self_consistency"):
            found[cells[0]] = [c for c in cells[1:] if c != "*"]
    return found


def test_an_eval_runs_embedded_prints_its_report_and_the_report_is_rebuilt_from_the_database(tmp_path: Path) -> None:
    out = run_cli(["eval", "run", SPEC, "--limit", "40"], tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    printed = rows(out.stdout)
    assert set(printed) == {"panel", "single", "self_consistency"}, out.stdout
    assert all(cells[1] == "40" for cells in printed.values()), out.stdout  # every item of every arm
    assert all(cells[-1] in ("in", "out") for cells in printed.values()), out.stdout  # theory beside each
    assert "120 plan(s) submitted by this run, 0 found finished" in out.stderr
    assert "self_consistency: 5 samples" in out.stderr

    report = run_cli(["eval", "report", "arithmetic"], tmp_path)
    assert report.returncode == 0, report.stderr
    assert rows(report.stdout) == printed  # the same numbers, from the stored plans alone

    again = run_cli(["eval", "run", SPEC, "--limit", "40", "--json"], tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "0 plan(s) submitted by this run, 120 found finished" in again.stderr
    as_json = json.loads(again.stdout)
    reported = json.loads(run_cli(["eval", "report", "arithmetic", "--json"], tmp_path).stdout)
    assert as_json == reported
    assert {a["name"]: a["items"] for a in as_json["arms"]} == {"panel": 40, "single": 40, "self_consistency": 40}
    theory = {a["name"]: a["theory"]["accuracy"] for a in as_json["arms"]}
    assert theory == {"panel": pytest.approx(0.83692, abs=1e-5), "single": pytest.approx(0.7),
                      "self_consistency": pytest.approx(0.83692, abs=1e-5)}

    compared = run_cli(["eval", "compare", "arithmetic", "arithmetic", "--json"], tmp_path)
    assert compared.returncode == 0 and all(r["difference"] == 0 for r in json.loads(compared.stdout)["arms"])


def test_a_bad_spec_and_a_taken_name_exit_2_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "panel.yaml").write_text((ROOT / "examples" / "eval" / "panel.yaml").read_text())
    spec = (ROOT / "examples" / "eval" / "arithmetic.yaml").read_text()
    (tmp_path / "bad.yaml").write_text(spec.replace("n: 5}", "n: five}"))
    bad = run_cli(["eval", "run", str(tmp_path / "bad.yaml")], tmp_path)
    assert bad.returncode == 2 and "baselines.self_consistency.n" in bad.stderr and "Traceback" not in bad.stderr

    (tmp_path / "small.yaml").write_text(spec.replace("n: 300", "n: 3"))
    assert run_cli(["eval", "run", str(tmp_path / "small.yaml")], tmp_path, timeout=300).returncode == 0
    (tmp_path / "other.yaml").write_text(spec.replace("n: 300", "n: 4"))
    taken = run_cli(["eval", "run", str(tmp_path / "other.yaml")], tmp_path)
    assert taken.returncode == 2 and "eval.conflict" in taken.stderr and "another name" in taken.stderr
    missing = run_cli(["eval", "report", "nothing"], tmp_path)
    assert missing.returncode == 2 and "eval.not_found" in missing.stderr and "Traceback" not in missing.stderr
