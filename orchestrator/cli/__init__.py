"""``conclave`` — run, submit, list, follow and control plans; run workers; migrate.

One command family per module:

    plan_commands.py   submit, list, status, result, update, cancel
    fork_commands.py   fork, diff: a what-if fork from any phase, and two plans side by side
    running.py         run, watch, resume (and what Ctrl-C does while following a plan)
    people_commands.py answer, approve, send-back, steer (a person's part in a plan)
    info.py            info: which Conclave this shell talks to
    fleet_commands.py  worker, beat, api, flower, health, db
    token_commands.py  tokens create / list / revoke
    webhook_commands.py  webhooks create / list / delete / rotate / deliveries
    common.py          settings, errors and exit codes, the client, --url/--token/--tenant, the banner
    group.py           the command group (loaded by main(), so a Ctrl-C while it loads is handled)
    interrupted.py     a Ctrl-C before anything is followed: one line, exit 130

Exit codes: 0 completed, 1 failed (or any other error), 2 invalid input (the message names
the field), 130 cancelled or interrupted. No command prints a traceback for a user error.

``submit``, ``list``, ``status``, ``watch``, ``result``, ``run``, ``resume``, ``cancel``,
``answer``, ``approve``, ``send-back``, ``steer``, ``fork`` and ``diff`` talk to the HTTP API instead of the
database with ``--url`` (or ``CONCLAVE_URL``); the token comes from ``CONCLAVE_TOKEN`` (``--token`` also
works, but shows in ``ps``). On the database
they act as the operator, or for the tenant of ``--tenant`` / ``CONCLAVE_TENANT``.
"""

from __future__ import annotations

from typing import Any

from orchestrator.cli.interrupted import interrupted_at_start


def main() -> None:
    """``conclave``. The commands are imported here, not when this package is: a Ctrl-C while
    Python loads them (a second or so of a cold start) ends with one line and exit 130, never a
    traceback — like a Ctrl-C in any command before it follows a plan."""
    try:
        from orchestrator.cli.group import cli
    except KeyboardInterrupt:
        interrupted_at_start()
    cli()


def __getattr__(name: str) -> Any:
    """``orchestrator.cli.cli``: the command group, loaded on first use."""
    if name == "cli":
        from orchestrator.cli.group import cli

        return cli
    raise AttributeError(name)
