"""``conclave answer | approve | send-back | steer``: a person's part in a plan.

    conclave answer ID KEY "my answer"        answer your seat (a phase awaiting_input)
    conclave answer ID KEY --file answer.md   … from a file (``-``: standard input)
    conclave approve ID                       approve the draft (awaiting_approval)
    conclave send-back ID "shorter, please"   send it back once, with a note
    conclave steer ID "focus on churn"        a note for the phases still to start

Each takes a plan by its id, a unique prefix of it or its task id, over ``--url`` (the token's
tenant) or the database (the operator, or ``--tenant``); what it records names the caller.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from orchestrator.cli import common
from orchestrator.cli.common import Looking, errors, remote, tenant
from orchestrator.core.errors import InvalidRequest
from orchestrator.logs import configure


def _read_answer(text: str | None, file: str | None) -> str:
    if (text is None) == (file is None):
        raise InvalidRequest("give the answer as TEXT or with --file (one of the two)",
                             details=[{"field": "text", "message": "TEXT or --file"}])
    if file is None:
        return text or ""
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"--file: cannot read {file}: {type(exc).__name__}",
                             details=[{"field": "file", "message": "unreadable"}]) from None


@click.command()
@click.argument("ref")
@click.argument("key")
@click.argument("text", required=False)
@click.option("--file", "file", metavar="FILE", help="Read the answer from FILE (`-`: standard input).")
@click.option("--key", "idempotency_key", metavar="KEY",
              help="An idempotency key: sent again, the stored answer is shown instead of a refusal "
                   "(default: a fresh one per command).")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def answer(ref: str, key: str, text: str | None, file: str | None, idempotency_key: str | None, as_json: bool,
           url: str | None, token: str | None, tenant: str | None) -> None:
    """Answer your seat KEY of plan REF (a phase awaiting_input) with TEXT or --file."""
    settings = common.settings()
    configure(settings, "ERROR")
    tenant = common.scope(tenant, url)
    said = _read_answer(text, file)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        res = conclave.answer(ref, key, said, idempotency_key=idempotency_key or uuid.uuid4().hex)
    if as_json:
        click.echo(json.dumps(asdict(res)))
        return
    again = " (already stored with this key)" if res.replayed else ""
    nxt = f"; next: {', '.join(res.enqueued)}" if res.enqueued else ""
    click.echo(f"{res.plan_id}: {res.phase} answered{again}{nxt}")
    if res.enqueued:
        _embedded_hint(settings, url, res.plan_id)


def _embedded_hint(settings: Any, url: str | None, plan_id: str) -> None:
    """Embedded, no worker outlives this command: say how the plan carries on."""
    if settings.embedded and not url:
        common.err.print(f"[yellow]embedded mode: the `conclave run` following this plan carries on; if none does, "
                         f"`conclave resume {plan_id} --follow`[/yellow]")


@click.command()
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def approve(ref: str, as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Approve plan REF's draft (awaiting_approval): the plan completes with it as its result."""
    settings = common.settings()
    configure(settings, "ERROR")
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        res = conclave.approve(ref)
    if as_json:
        click.echo(json.dumps(asdict(res)))
    else:
        click.echo(f"{res.plan_id}: approved {res.phase}" + (" (the revision)" if res.revision else "")
                   + f"; the plan is {res.status}")


@click.command("send-back")
@click.argument("ref")
@click.argument("note")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def send_back(ref: str, note: str, as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Send plan REF's draft back once with NOTE: it is rewritten, then waits for approval again."""
    settings = common.settings()
    configure(settings, "ERROR")
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        res = conclave.send_back(ref, note)
    if as_json:
        click.echo(json.dumps(asdict(res)))
    else:
        click.echo(f"{res.plan_id}: {res.phase} sent back; {res.revision} rewrites it")
        _embedded_hint(settings, url, res.plan_id)


@click.command()
@click.argument("ref")
@click.argument("note")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def steer(ref: str, note: str, as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Give running plan REF a NOTE: every phase that starts from now on is given it."""
    settings = common.settings()
    configure(settings, "ERROR")
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        res = conclave.steer(ref, note)
    if as_json:
        click.echo(json.dumps(asdict(res)))
    else:
        click.echo(f"{res.plan_id}: note {res.n} given to the phases still to start")
