"""A pytest plugin the mutation runner loads (``-p tests.mutant_preflight``) in each mutant's
test process — outside ``tests/mutants/``, which a scratch copy leaves out. Before any test
runs it imports the mutated module and checks that it comes from the scratch tree and holds
the mutant, so a mutant the tests never import cannot pass for a caught one. Done in the test
process itself, it costs no interpreter of its own.

It reads ``CONCLAVE_MUTANT_TREE``, ``CONCLAVE_MUTANT_MODULE`` and ``CONCLAVE_MUTANT_SNIPPET``;
without them (the baseline) it does nothing. A failed check ends the session with exit code
:data:`EXIT_CODE` and the reason."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

EXIT_CODE = 9  # none of pytest's own (0-5)


def pytest_sessionstart(session: pytest.Session) -> None:
    module = os.environ.get("CONCLAVE_MUTANT_MODULE")
    if not module:
        return
    tree = Path(os.environ["CONCLAVE_MUTANT_TREE"]).resolve()
    try:
        where = Path(importlib.import_module(module).__file__ or "").resolve()
    except Exception as exc:  # the mutant does not even import: say so, not "caught"
        pytest.exit(f"preflight: {module} does not import: {exc!r}", returncode=EXIT_CODE)
    if not where.is_relative_to(tree):
        pytest.exit(f"preflight: {module} imported from {where}, not from the scratch tree {tree}",
                    returncode=EXIT_CODE)
    if os.environ.get("CONCLAVE_MUTANT_SNIPPET", "") not in where.read_text():
        pytest.exit(f"preflight: {where} does not hold the mutant", returncode=EXIT_CODE)
