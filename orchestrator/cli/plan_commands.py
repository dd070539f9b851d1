"""``conclave submit | list | status | result | update | cancel``: put a plan in, find it again, read
it, stop it.

Each takes a plan by its id, a unique prefix of it (``conclave status 138bbc26``) or its
task id; a prefix several plans share is refused, naming them. Ids are printed whole, at
any width, piped or not. On the database the caller is the operator (every tenant) or the
tenant of ``--tenant`` / ``CONCLAVE_TENANT``; over ``--url``, the token's tenant.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.common import Looking, err, errors, remote, tenant
from orchestrator.client.backend import PlanSource
from orchestrator.logs import configure
from orchestrator.plan.spending import spent_text
from orchestrator.plan.views import PlanView
from storage.status import PlanStatus

#: The statuses ``conclave list --status`` accepts.
STATUSES = [s.value for s in PlanStatus]


def read_local(plan: str, settings: Any) -> Any:
    """The plan with its briefing paths read here, on the user's side (relative to the
    plan file); every file left out is listed on stderr with the reason."""
    from orchestrator.client.local_briefing import load_local_plan

    local = load_local_plan(plan, settings)
    if local.skipped:
        err.print(f"[yellow]briefing: {len(local.skipped)} file(s) left out[/yellow]", highlight=False)
        for s in local.skipped[:20]:
            err.print(escape(f"  {s.path}: {s.reason}"), highlight=False)
        if len(local.skipped) > 20:
            err.print(f"  … and {len(local.skipped) - 20} more", highlight=False)
    return local


@click.command()
@click.argument("plan")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def submit(plan: str, as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Submit PLAN to the cluster and print its id (idempotent per task_id)."""
    settings = common.settings()
    configure(settings, "WARNING")
    tenant = common.scope(tenant, url)
    common.banner(settings, url, tenant)
    local = read_local(plan, settings)  # briefing paths are read here, also for --url
    source: PlanSource = local.plan
    with common.client(settings, url=url, token=token, tenant=tenant) as conclave:
        result = conclave.submit_result(source)
        if as_json:
            click.echo(json.dumps({"plan_id": result.plan_id, "created": result.created,
                                   "enqueued": result.enqueued}))
        else:
            click.echo(result.plan_id)
        if settings.embedded and not url:
            err.print("[yellow]embedded mode: no worker outlives this command; "
                      "`conclave resume ID --follow` runs it[/yellow]")


@click.command("list")
@click.option("--status", "statuses", multiple=True, type=click.Choice(STATUSES),
              help="Only plans in this status (repeat for several).")
@click.option("--label", "labels", multiple=True, help="Only plans carrying this label (repeat: every one).")
@click.option("--limit", type=click.IntRange(1, 200), default=50, show_default=True, help="At most this many.")
@click.option("--json", "as_json", is_flag=True, help="Print the page as JSON (with next_cursor).")
@remote
@tenant
@errors
def list_plans(statuses: tuple[str, ...], labels: tuple[str, ...], limit: int, as_json: bool, url: str | None,
               token: str | None, tenant: str | None) -> None:
    """List the plans in reach, newest first: id, title, status, progress, created."""
    settings = common.settings()
    configure(settings, "ERROR")
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave:
        page = conclave.list_plans(status=list(statuses), label=list(labels), limit=limit)
    if as_json:
        click.echo(json.dumps(page, indent=2))
        return
    common.banner(settings, url, tenant)
    rows = page["plans"]
    if not rows:
        err.print(escape(f"no plans{_filtered(statuses, labels)} in {common.where(settings, url, tenant)}"),
                  highlight=False)
        return
    many_tenants = len({r["tenant"] for r in rows}) > 1
    for line in table(rows, with_tenant=many_tenants):
        click.echo(line)
    if page.get("next_cursor"):
        err.print(f"… more: --limit {min(200, limit * 2)} shows more (or --json for the cursor)", highlight=False)


def _filtered(statuses: tuple[str, ...], labels: tuple[str, ...]) -> str:
    parts = [f"status {' or '.join(statuses)}"] if statuses else []
    parts += [f"label {label}" for label in labels]
    return f" with {' and '.join(parts)}" if parts else ""


def table(rows: list[dict[str, Any]], *, with_tenant: bool = False) -> list[str]:
    """The listing as aligned text lines: the id is whole and first, the title last (it is
    the one column that may be long), so nothing a user needs is cut at any width."""
    head = ["ID", *(["TENANT"] if with_tenant else []), "STATUS", "PROGRESS", "CREATED", "TITLE"]
    body = []
    for r in rows:
        progress = f"{r.get('phases_done', 0)}/{r.get('phases_total', 0)}"
        if r.get("cancel_requested") and r["status"] == PlanStatus.RUNNING:
            progress += " cancelling"
        body.append([r["id"], *([r["tenant"]] if with_tenant else []), r["status"], progress,
                     _when(r["created_at"]), r["title"]])
    widths = [max(len(str(row[i])) for row in [head, *body]) for i in range(len(head) - 1)]
    return ["  ".join([*(str(c).ljust(w) for c, w in zip(row, widths, strict=False)), str(row[-1])]).rstrip()
            for row in [head, *body]]


def _when(stamp: str) -> str:
    try:
        return f"{datetime.fromisoformat(stamp):%Y-%m-%d %H:%M}"
    except ValueError:
        return stamp


def spent_line(view: PlanView) -> str:
    """What the plan spent in dollars and, under a budget, what is left of it."""
    return spent_text(view.usage.cost_usd, view.budget)


@click.command()
@click.argument("plan_id")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def status(plan_id: str, as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Show a plan's status, phases and usage (PLAN_ID: an id, a unique prefix of one, a task id)."""
    settings = common.settings()
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        view = conclave.get(plan_id)
        if as_json:
            click.echo(json.dumps(view.to_dict(), indent=2))
            return
        c = Console()
        c.print(f"[bold]{escape(view.title)}[/bold]", highlight=False)
        c.print(f"plan {view.id}  {escape(f'[{view.status}]')}  "
                + (f"priority {view.priority}  " if view.priority else "")
                + f"{view.done}/{len(view.phases)} done  {view.usage.total_tokens:,} tokens"
                + (" (est.)" if view.usage.estimated else "") + spent_line(view), highlight=False, soft_wrap=True)
        if view.forked_from:
            reused = sum(1 for p in view.phases if p.reused_from)
            c.print(escape(f"fork of {view.forked_from['plan_id']} from {view.forked_from['phase']}: {reused} "
                           "phase(s) reused from it at no cost (their usage is the source's)"), highlight=False,
                    soft_wrap=True)
        for p in view.phases:
            said = "" if not p.verdict or p.kind == "decision" or "answer" not in p.verdict else (
                f"  verdict: {p.verdict.get('answer')} ({p.verdict.get('confidence', 0):.2f})"
                if p.verdict.get("answer") is not None else "  verdict: abstained")
            run = f"reused from {p.reused_from}" if p.reused_from else f"attempt {p.attempt}"
            if p.stand_in:  # no model wrote it: which failed, and why the last one did
                tried = ", ".join(p.fell_back_from) or "every model"
                said += f"  written by code: {tried} failed ({p.stand_in.get('code')})"
            elif p.fell_back_from:  # the model that wrote it was a fallback: say which, and what failed first
                said += f"  answered by {p.model} (fallback: {', '.join(p.fell_back_from)} failed)"
            c.print(f"  {'held' if p.held else p.status:<10} {p.key:<28} {p.expert or '':<12} {run}"
                    + (f"  {p.error_code}" if p.error_code else "") + escape(said), highlight=False, soft_wrap=True)
        from orchestrator.client.console import decision_lines, early_stop_line

        stopped = early_stop_line(view)
        for line in ([stopped] if stopped else []) + decision_lines(view):
            c.print(line)
        for said_line in people_lines(view):
            c.print(said_line, highlight=False, soft_wrap=True)


def people_lines(view: PlanView) -> list[str]:
    """Who the plan waits for (each seat since when, until when, how to answer), its approval,
    and the notes that steer it."""
    lines = [f"waiting for {w['expert']} ({w['phase']}) since {w['since']}, until {w['due_at']}: "
             f"conclave answer {view.id} {w['phase']} TEXT" for w in view.awaiting]
    a = view.approval
    if a is not None:
        sent = a.get("sent_back")
        if sent:
            lines.append(f"sent back by {(sent.get('by') or {}).get('name') or 'the operator'}: {sent.get('note')}")
        failed = a.get("revision_failed")
        if failed:
            lines.append(f"the revision {failed.get('phase')} failed ({failed.get('error_code')}: "
                         f"{failed.get('error')}): the first draft {a['phase']} is the answer again")
        if a["state"] == "awaiting":
            lines.append(f"approval: the draft {a['phase']} waits since {a['since']}: conclave approve {view.id}"
                         + ("" if sent else f", or conclave send-back {view.id} NOTE (once)"))
        else:
            lines.append(f"approval: {a['state']} ({a['phase']})")
    lines += [f"note {n['n']} from {(n.get('by') or {}).get('name') or 'the operator'}: {n['note']}"
              for n in view.notes]
    return lines


@click.command()
@click.argument("plan_id")
@remote
@tenant
@errors
def result(plan_id: str, url: str | None, token: str | None, tenant: str | None) -> None:
    """Print the full text of a plan's final phase."""
    settings = common.settings()
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        click.echo(conclave.result(plan_id))


@click.command()
@click.argument("ref")
@click.option("--priority", type=int, default=None, help="-2..2: higher first among the tenant's held phases.")
@click.option("--title", default=None, help="A new title.")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def update(ref: str, priority: int | None, title: str | None, as_json: bool, url: str | None, token: str | None,
           tenant: str | None) -> None:
    """Change a plan while it runs: its priority (and title); a wrong value names the field."""
    changes = {k: v for k, v in {"priority": priority, "title": title}.items() if v is not None}
    if not changes:
        raise click.UsageError("nothing to change: give --priority or --title")
    settings = common.settings()
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        view = conclave.update(ref, **changes)
    if as_json:
        click.echo(json.dumps({"plan_id": view.id, "title": view.title, "priority": view.priority,
                               "status": view.status}))
    else:
        click.echo(f"{view.id}: priority {view.priority}, title {view.title!r} [{view.status}]")


@click.command()
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def cancel(ref: str, as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Cancel a plan: queued phases end cancelled; running ones at their next safe point."""
    settings = common.settings()
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        res = conclave.cancel(ref)
        if as_json:
            click.echo(json.dumps({"plan_id": res.plan_id, "status": res.status, "cancelled": res.cancelled}))
        elif res.status != PlanStatus.RUNNING and not res.cancelled:
            click.echo(f"{res.plan_id}: already {res.status}; nothing to cancel")
        else:
            click.echo(f"{res.plan_id}: cancel requested; {len(res.cancelled)} queued phase(s) cancelled")
