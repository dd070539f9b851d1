"""Documentation that users rely on stays in step with the code."""

from __future__ import annotations

import re

from orchestrator.core.settings import Settings
from tests.conftest import ROOT


def test_every_setting_is_in_the_readme_table_and_nothing_else() -> None:
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `CONCLAVE_([A-Z_]+)` \|", readme, re.MULTILINE))
    assert documented == {name.upper() for name in Settings.model_fields}


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and "make test" in readme and "make demo" in readme
