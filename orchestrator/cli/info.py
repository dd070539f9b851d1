"""``conclave info``: which Conclave this shell talks to — embedded or a cluster, which
database, broker and API, which tenant, which model registry — with no secret in it
(passwords in URLs are shown as ``***``; tokens never)."""

from __future__ import annotations

import json

import click

from orchestrator.cli import common
from orchestrator.cli.common import errors, remote, tenant
from orchestrator.core.version import __version__


@click.command()
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def info(as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Say which Conclave the other commands talk to (embedded or a cluster, where)."""
    settings = common.settings()
    tenant = common.scope(tenant, url)
    facts = {
        "version": __version__,
        "mode": "cluster-api" if url else "embedded" if settings.embedded else "cluster",
        "api": common.shown_url(url) if url else None,
        "token": ("set" if token else "not set") if url else None,
        "database": None if url else common.shown_url(settings.effective_database_url),
        "broker": None if url else ("in-process (kombu memory)" if settings.embedded
                                    else common.shown_url(settings.broker_url or "")),
        "tenant": ("the token's" if url else tenant or "operator: every tenant; new plans go to 'default'"),
        "models": None if url else (str(settings.models.resolve()) if settings.models else None),
    }
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    for key, value in facts.items():
        if value is not None:
            click.echo(f"{key + ':':<10} {value}")
