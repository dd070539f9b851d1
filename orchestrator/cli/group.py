"""The ``conclave`` command group: every command family registered on it (the families are
listed in :mod:`orchestrator.cli`). Imported by :func:`orchestrator.cli.main` once it can
handle a Ctrl-C; a Ctrl-C that reaches the group from a command that does not handle it itself
(``run`` does, once it follows a plan) ends it the same way: one line, exit 130."""

from __future__ import annotations

from typing import Any

import click

from orchestrator.cli import common, info, running
from orchestrator.cli import fleet_commands as fleet
from orchestrator.cli import fork_commands as forks
from orchestrator.cli import people_commands as people
from orchestrator.cli import plan_commands as plans
from orchestrator.cli import token_commands as tokens
from orchestrator.cli import webhook_commands as hooks
from orchestrator.cli.interrupted import interrupted_at_start
from orchestrator.core.version import __version__
from orchestrator.logs import configure


class Group(click.Group):
    """The group whose commands a Ctrl-C ends with one line, not Click's ``Aborted!``."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            interrupted_at_start()


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
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
