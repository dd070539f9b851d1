"""``python -m orchestrator.cli``: the same as ``conclave``."""

from orchestrator.cli import main

main()
