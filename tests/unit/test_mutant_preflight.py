"""The mutation runner's preflight (tests/mutant_preflight.py): a mutant's test process ends
with the preflight's exit code, naming why, unless the mutated module is imported from the
scratch tree and holds the mutant — so a mutant the tests never import is never 'caught'."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.mutant_preflight import EXIT_CODE


def _run(tree: Path, module: str, snippet: str) -> subprocess.CompletedProcess[str]:
    # only the plugin under test: the dev extra's auto-loaded plugins (schemathesis, hypothesis, anyio,
    # xdist, timeout) cost ~2 s of CPU per process here (-c os.devnull leaves out pyproject's -p no:...)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)]), "CONCLAVE_MUTANT_TREE": str(tree),
           "CONCLAVE_MUTANT_MODULE": module, "CONCLAVE_MUTANT_SNIPPET": snippet, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.mutant_preflight"]
    return subprocess.run([*pytest, "--rootdir", str(tree), "-c", os.devnull, str(tree / "test_it.py")],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=60)


def test_a_mutant_runs_only_when_imported_from_the_tree_and_mutated(tmp_path: Path) -> None:
    (tmp_path / "mutme.py").write_text("def answer() -> int:\n    return 41\n")
    (tmp_path / "test_it.py").write_text("import mutme\n\ndef test_it():\n    assert mutme.answer() == 41\n")
    ran = _run(tmp_path, "mutme", "return 41")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    unmutated = _run(tmp_path, "mutme", "return 42")
    assert unmutated.returncode == EXIT_CODE and "does not hold the mutant" in unmutated.stdout + unmutated.stderr
    missing = _run(tmp_path, "mutme_gone", "return 41")
    assert missing.returncode == EXIT_CODE and "mutme_gone does not import" in missing.stdout + missing.stderr
    elsewhere = _run(tmp_path, "tests.conftest", "def worker_index")  # importable, but not from the tree
    assert elsewhere.returncode == EXIT_CODE and "not from the scratch tree" in elsewhere.stdout + elsewhere.stderr
