"""``conclave webhooks create | list | delete | rotate | deliveries``: a tenant's signed
webhook endpoints, and what became of their deliveries.

On the database the caller is the operator (endpoints go to tenant ``default``; every
tenant's are listed) or the tenant of ``--tenant``; over ``--url``, the token's tenant, and
the token needs the ``webhooks`` (or ``admin``) scope. A signing secret is printed once, by
``create`` and by ``rotate``, on stdout; it is stored nowhere.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.common import err, errors, remote, tenant
from orchestrator.logs import configure
from orchestrator.webhooks.endpoints import MAX_ROTATION_GRACE, ROTATION_SECONDS
from storage.status import DeliveryStatus
from storage.webhook_outbox import ALL, EVENTS, MAX_LISTED


@click.group()
def webhooks() -> None:
    """Signed webhooks: endpoints that receive a tenant's plan events (input_requested,
    awaiting_approval, plan_finished), at least once, signed with a secret shown once.

    The operator enables them with CONCLAVE_WEBHOOK_SECRET_KEY and the URLs they may reach
    with CONCLAVE_WEBHOOK_URLS (docs/operations.md)."""


def _client(url: str | None, token: str | None, tenant: str | None) -> Any:
    """The client of ``--url`` (the token's tenant) or of the database (the operator, or ``--tenant``)."""
    settings = common.settings()
    configure(settings, "WARNING")
    return common.client(settings, worker=False, url=url, token=token, tenant=common.scope(tenant, url))


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]).rstrip() for row in rows]


@webhooks.command("create")
@click.argument("endpoint_url", metavar="URL")
@click.option("--event", "events", multiple=True, required=True, type=click.Choice([*EVENTS, ALL]),
              help=f"An event type to receive (repeat for several); {ALL!r}: every type, later ones included.")
@click.option("--description", default=None, help="A note for listings (at most 200 characters).")
@click.option("--json", "as_json", is_flag=True, help="Print the endpoint and its secret as JSON.")
@remote
@tenant
@errors
def create(endpoint_url: str, events: tuple[str, ...], description: str | None, as_json: bool, url: str | None,
           token: str | None, tenant: str | None) -> None:
    """Register URL and print its signing secret (once: store it now)."""
    with _client(url, token, tenant) as conclave:
        made = conclave.create_webhook(endpoint_url, list(events), description=description)
    if as_json:
        click.echo(json.dumps(made.to_dict()))
        return
    click.echo(made.secret)
    err.print(escape(f"webhook {made.endpoint.id} (tenant {made.endpoint.tenant}) receives "
                     f"{', '.join(made.endpoint.events)} at {made.endpoint.url}. The secret is shown only now."),
              highlight=False)


@webhooks.command("list")
@click.option("--json", "as_json", is_flag=True)
@remote
@tenant
@errors
def list_webhooks(as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """List the endpoints in reach (never their secrets)."""
    with _client(url, token, tenant) as conclave:
        found = conclave.list_webhooks()
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in found], indent=2))
        return
    if not found:
        err.print("no webhooks: conclave webhooks create URL --event plan_finished registers one", highlight=False)
        return
    rows = [["ID", "TENANT", "EVENTS", "CREATED", "URL"]]
    rows += [[e.id, e.tenant, ",".join(e.events), f"{e.created_at:%Y-%m-%d %H:%M}", e.url] for e in found]
    for line in _table(rows):
        click.echo(line)


@webhooks.command("delete")
@click.argument("webhook_id")
@remote
@tenant
@errors
def delete(webhook_id: str, url: str | None, token: str | None, tenant: str | None) -> None:
    """Delete an endpoint and its deliveries: nothing more is sent to it."""
    with _client(url, token, tenant) as conclave:
        conclave.delete_webhook(webhook_id)
    click.echo(f"deleted {webhook_id}")


@webhooks.command("rotate")
@click.argument("webhook_id")
@click.option("--keep-previous", type=click.IntRange(0, int(MAX_ROTATION_GRACE.total_seconds())),
              default=int(ROTATION_SECONDS), show_default=True, metavar="SECONDS",
              help="How long the previous secret still signs beside the new one (0: it stops now).")
@click.option("--json", "as_json", is_flag=True, help="Print the endpoint and its new secret as JSON.")
@remote
@tenant
@errors
def rotate(webhook_id: str, keep_previous: int, as_json: bool, url: str | None, token: str | None,
           tenant: str | None) -> None:
    """Give an endpoint a new signing secret and print it (once)."""
    with _client(url, token, tenant) as conclave:
        made = conclave.rotate_webhook_secret(webhook_id, previous_valid_for=keep_previous)
    if as_json:
        click.echo(json.dumps(made.to_dict()))
        return
    click.echo(made.secret)
    until = made.endpoint.previous_valid_until
    err.print(escape(f"webhook {made.endpoint.id}: secret version {made.endpoint.secret_version}; the previous one "
                     + (f"signs too until {until:%Y-%m-%d %H:%M} UTC." if until else "no longer signs.")),
              highlight=False)


@webhooks.command("deliveries")
@click.argument("webhook_id")
@click.option("--status", type=click.Choice([s.value for s in DeliveryStatus]), default=None,
              help="Only deliveries in this status.")
@click.option("--limit", type=click.IntRange(1, MAX_LISTED), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the page as JSON (with next_cursor).")
@remote
@tenant
@errors
def deliveries(webhook_id: str, status: str | None, limit: int, as_json: bool, url: str | None, token: str | None,
               tenant: str | None) -> None:
    """What became of an endpoint's deliveries, newest event first."""
    with _client(url, token, tenant) as conclave:
        page = conclave.webhook_deliveries(webhook_id, status=status, limit=limit)
    if as_json:
        click.echo(json.dumps({"deliveries": [d.to_dict() for d in page.deliveries],
                               "next_cursor": None if page.next_cursor is None else str(page.next_cursor)}, indent=2))
        return
    if not page.deliveries:
        err.print(f"no deliveries{f' {status}' if status else ''} for webhook {webhook_id}", highlight=False)
        return
    rows = [["DELIVERY", "EVENT", "STATUS", "ATTEMPTS", "NEXT", "PLAN", "LAST"]]
    for d in page.deliveries:
        last = (f"HTTP {d.last_status_code}" if d.last_status_code and not d.last_error else d.last_error) or ""
        rows.append([d.id, d.event_type, str(d.status), str(d.attempts),
                     f"{d.next_attempt_at:%Y-%m-%d %H:%M:%S}" if d.next_attempt_at else "-", d.plan_id, last])
    for line in _table(rows):
        click.echo(line)
    if page.next_cursor is not None:
        err.print(f"… more: --limit {min(MAX_LISTED, limit * 2)} shows more (or --json for the cursor)",
                  highlight=False)
