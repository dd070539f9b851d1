"""The mutation catalogue stays anchored to the code (``make mutants`` runs it; this
checks, in every ``make test``, that it could): every DESIGN.md invariant has a
mutation, every ``old`` snippet occurs exactly once, every named test exists; and the
documents stay true to it: docs/invariants.md is generated from the catalogue, and
DESIGN.md's table names code and tests that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.mutants.catalogue import MUTATIONS
from tests.mutants.catalogue_types import Edit, Mutation, mutation
from tests.mutants.invariants_doc import DESIGN, GENERATED, invariant_ids, invariant_rows, render
from tests.mutants.run import missed, problems, recorded_baseline


def test_the_catalogue_covers_every_invariant_and_is_anchored() -> None:
    assert problems(ROOT, MUTATIONS) == []
    ids = invariant_ids((ROOT / DESIGN).read_text())
    assert ids == [f"I{n}" for n in range(1, len(ids) + 1)]  # stable, gapless ids
    assert {m.invariant for m in MUTATIONS} == set(ids)


def test_docs_invariants_is_generated_from_the_catalogue() -> None:
    """docs/invariants.md (each invariant's mutations and the tests named) is the catalogue's, rendered."""
    design = (ROOT / DESIGN).read_text()
    assert (ROOT / GENERATED).read_text() == render(design, MUTATIONS), (
        f"{GENERATED} is out of date: run `python -m tests.mutants.run --table`")


def test_each_invariant_is_one_line_naming_code_and_tests_that_exist() -> None:
    """A row is ``| I<n> | what | kept by | proven by |``; "kept by" names modules (and the
    functions or classes in them) that exist, "proven by" test files under tests/ that exist."""
    wrong = []
    for inv, cells in invariant_rows((ROOT / DESIGN).read_text()).items():
        if len(cells) != 3 or not all(cells):
            wrong.append(f"{inv}: expected what | kept by | proven by, got {cells}")
            continue
        wrong += [f"{inv} kept by `{ref}`: {why}" for ref in re.findall(r"`([\w.]+)`", cells[1])
                  if (why := _unresolved(ref))]
        wrong += [f"{inv} proven by `{path}`: no such file" for path in re.findall(r"`([^`]+)`", cells[2])
                  if not (ROOT / "tests" / path).is_file()]
    assert wrong == []


def _unresolved(ref: str) -> str | None:
    """Why a dotted name does not name code of ours (None when it does): the longest prefix
    that is a module, and each name after it defined in that module's source."""
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            source = module.read_text()
            missing = [name for name in parts[i:]
                       if not re.search(rf"^\s*(?:async def|def|class) {name}\b|^{name}\b.*=", source, re.M)]
            return f"{', '.join(missing)} not defined in {module.relative_to(ROOT)}" if missing else None
    return "no such module"


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "DESIGN.md").write_text("| id | invariant |\n|---|---|\n| I1 | one |\n| I2 | two |\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\ny = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text("def test_x():\n    pass\n")
    return tmp_path


def test_a_stale_catalogue_is_reported_by_name(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    catalogue = (
        mutation("moved", "I1", "pkg/mod.py", "x = 2\n", "x = 3\n", tests=("tests/test_mod.py::test_x",), why="."),
        mutation("ambiguous", "I1", "pkg/mod.py", " = 1\n", " = 0\n", tests=("tests/test_mod.py::test_x",),
                 why="."),
        mutation("unknown-test", "I3", "pkg/mod.py", "x = 1\n", "x = 0\n", tests=("tests/test_mod.py::test_y",),
                 why="."),
        Mutation("no-file", "I1", "pkg/gone.py", (Edit("a", "b"),), ("tests/test_mod.py",), "."),
    )
    found = "\n".join(problems(root, catalogue))
    assert "mutation 'moved' (pkg/mod.py): edit 1: `old` occurs 0 times" in found
    assert "mutation 'ambiguous' (pkg/mod.py): edit 1: `old` occurs 2 times" in found
    assert "invariant 'I3' is not in DESIGN.md's table" in found
    assert "no function 'test_y' in tests/test_mod.py" in found
    assert "mutation 'no-file' (pkg/gone.py): no such file" in found
    assert "invariant I2 of DESIGN.md has no mutation" in found


def test_a_mutation_is_caught_only_when_every_named_test_failed() -> None:
    failed = ["tests/a/test_x.py::test_one[postgresql]", "tests/a/test_y.py::test_two"]
    assert missed(["tests/a/test_x.py::test_one[postgresql]", "tests/a/test_y.py"], failed) == []
    assert missed(["tests/a/test_x.py::test_one[sqlite]"], failed) == ["tests/a/test_x.py::test_one[sqlite]"]
    assert missed(["tests/a/test_x.py::test_on"], failed) == ["tests/a/test_x.py::test_on"]
    assert missed(["tests/a/test_z.py"], failed) == ["tests/a/test_z.py"]


def test_a_test_runs_report_stands_for_the_baseline_only_when_fresh_and_every_named_test_passed(
        tmp_path: Path) -> None:
    """A real pytest run's JUnit report of a small tree: it stands for the baseline of tests that
    passed in it; not of one that failed, was skipped or did not run, nor once a file changed."""
    (tmp_path / "tree").mkdir()
    root = _tree(tmp_path / "tree")
    (root / "tests" / "test_more.py").write_text(
        "import pytest\n\n"
        "def test_fails():\n    assert False\n\n"
        "@pytest.mark.skip(reason='no')\ndef test_skipped():\n    pass\n\n"
        "@pytest.mark.parametrize('v', [1, 2])\ndef test_p(v):\n    pass\n")
    report = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", "tests"],
                   cwd=root, capture_output=True, timeout=120,
                   env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # no plugin needed: ~2 s less CPU

    def named(*tests: str) -> tuple[Mutation, ...]:
        return (mutation("m", "I1", "pkg/mod.py", "x = 1\n", "x = 0\n", tests=tests, why="."),)

    assert recorded_baseline(root, named("tests/test_mod.py::test_x", "tests/test_more.py::test_p"), report) is None
    assert recorded_baseline(root, named("tests/test_mod.py", "tests/test_more.py::test_p[2]"), report) is None
    assert recorded_baseline(root, named("tests/test_more.py::test_fails"), report) == (
        f"tests/test_more.py::test_fails did not pass in {report} (failed)")
    assert recorded_baseline(root, named("tests/test_more.py::test_skipped"), report) == (
        f"tests/test_more.py::test_skipped did not pass in {report} (skipped)")
    assert recorded_baseline(root, named("tests/test_more.py"), report) == (
        f"tests/test_more.py did not pass in {report} (failed, skipped, passed, passed)")
    assert recorded_baseline(root, named("tests/test_mod.py::test_y"), report) == (
        f"tests/test_mod.py::test_y did not pass in {report} (not run)")
    assert recorded_baseline(root, named("tests/test_mod.py::test_x"), tmp_path / "none.xml") == (
        f"no report at {tmp_path / 'none.xml'}")
    (root / ".hypothesis").mkdir()  # caches a run writes into the tree (hypothesis', pytest's) are not the tree
    (root / ".hypothesis" / "examples").write_text("")
    assert recorded_baseline(root, named("tests/test_mod.py::test_x"), report) is None
    later = time.time() + 5
    os.utime(root / "pkg" / "mod.py", (later, later))  # edited after the run began
    assert recorded_baseline(root, named("tests/test_mod.py::test_x"), report) == (
        f"the tree changed after the run that wrote {report} started")
