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

Exit codes: 0 completed, 1 failed (or any other error), 2 invalid input (the message names
the field), 130 cancelled or interrupted. No command prints a traceback for a user error.

``submit``, ``list``, ``status``, ``watch``, ``result``, ``run``, ``resume``, ``cancel``,
``answer``, ``approve``, ``send-back``, ``steer``, ``fork`` and ``diff`` talk to the HTTP API instead of the
database with ``--url`` (or ``CONCLAVE_URL``); the token comes from ``CONCLAVE_TOKEN`` (``--token`` also
works, but shows in ``ps``). On the database
they act as the operator, or for the tenant of ``--tenant`` / ``CONCLAVE_TENANT``.
"""

from __future__ import annotations

import click

from orchestrator.cli import common, info, running
from orchestrator.cli import fleet_commands as fleet
from orchestrator.cli import fork_commands as forks
from orchestrator.cli import people_commands as people
from orchestrator.cli import plan_commands as plans
from orchestrator.cli import token_commands as tokens
from orchestrator.cli import webhook_commands as hooks
from orchestrator.core.version import __version__
from orchestrator.logs import configure


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="conclave")
def cli() -> None:
    """Durable multi-expert LLM plans on a Celery worker fleet."""


for command in (running.run, plans.submit, plans.list_plans, plans.status, running.watch, plans.result,
                running.resume, plans.update, plans.cancel, people.answer, people.approve, people.send_back,
                people.steer, forks.fork, forks.diff, info.info, fleet.worker, fleet.beat, fleet.api, fleet.flower,
                fleet.health, fleet.db, tokens.tokens, hooks.webhooks):
    cli.add_command(command)


def _eval_commands() -> click.Group:
    """``conclave eval``: its commands live with the evaluation (the glue is this package's)."""
    from orchestrator.evaluation.commands import CliGlue, eval_group

    return eval_group(CliGlue(settings=common.settings, client=common.client, errors=common.errors,
                              remote=common.remote, configure=configure))


cli.add_command(_eval_commands())


def main() -> None:
    cli()
