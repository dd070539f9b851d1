"""The mutation catalogue stays anchored to the code (``make mutants`` runs it; this
checks, in every ``make test``, that it could): every DESIGN.md invariant has a
mutation, every ``old`` snippet occurs exactly once, every named test exists."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT
from tests.mutants.catalogue import MUTATIONS
from tests.mutants.catalogue_types import Edit, Mutation, mutation
from tests.mutants.run import invariant_ids, missed, problems


def test_the_catalogue_covers_every_invariant_and_is_anchored() -> None:
    assert problems(ROOT, MUTATIONS) == []
    ids = invariant_ids((ROOT / "DESIGN.md").read_text())
    assert ids == [f"I{n}" for n in range(1, len(ids) + 1)]  # stable, gapless ids
    assert {m.invariant for m in MUTATIONS} == set(ids)


def test_design_names_each_invariants_mutations() -> None:
    """The table's last column lists exactly the catalogue's mutations of that row."""
    listed: dict[str, set[str]] = {}
    for line in (ROOT / "DESIGN.md").read_text().splitlines():
        if re.match(r"^\| I\d+ \|", line):
            cells = [c.strip() for c in line.strip("|").split("|")]
            listed[cells[0]] = set(re.findall(r"`([a-z0-9-]+)`", cells[-1]))
    expected: dict[str, set[str]] = {}
    for m in MUTATIONS:
        expected.setdefault(m.invariant, set()).add(m.name)
    assert listed == expected


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
