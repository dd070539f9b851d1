"""An eval interrupted by Ctrl-C says how to go on: the same command, its --limit included
(without it, the command would name another eval: --limit makes an eval of its own)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from orchestrator.evaluation import commands
from orchestrator.evaluation.harness import Harness
from tests.conftest import ROOT

SPEC = ROOT / "examples" / "eval" / "arithmetic.yaml"


@pytest.mark.parametrize(("limit", "told"), [(40, f"`conclave eval run {SPEC} --limit 40` again"),
                                             (None, f"`conclave eval run {SPEC}` again")])
def test_an_interrupted_eval_names_the_command_that_goes_on(monkeypatch: pytest.MonkeyPatch, limit: int | None,
                                                            told: str) -> None:
    def interrupted(self: Harness) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(Harness, "run", interrupted)
    err = io.StringIO()
    code = commands.run(object(), SPEC, limit=limit, out=Console(file=io.StringIO()),  # type: ignore[arg-type]
                        err=Console(file=err, width=400))
    assert code == 130
    assert told in err.getvalue() and "goes on where this stopped" in err.getvalue()
