"""``conclave tokens create | list | revoke``: API tokens — principals with a tenant and
scopes. A token is printed once, at creation; only its hash is stored."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.markup import escape

from orchestrator.cli.common import err, errors
from orchestrator.cli.common import settings as _settings
from orchestrator.core.errors import PlanNotFound
from orchestrator.core.settings import Settings


@click.group()
def tokens() -> None:
    """API tokens: principals with a tenant and scopes (plans:read, plans:write, webhooks, admin).

    A token is printed once, when it is created; only its hash is stored. Create a new
    token before revoking the old one to rotate without downtime."""


def _principals_db(settings: Settings) -> Any:
    from storage import upgrade

    if settings.database_url is None:  # embedded: the SQLite file is ours to migrate
        upgrade(settings.effective_database_url)
    return settings.open_database(pool_size=1)


def _refuse(option: str, message: str) -> None:
    err.print(escape(f"error [tokens.invalid] {option}: {message}"), highlight=False)
    sys.exit(2)


@tokens.command("create")
@click.option("--tenant", required=True, help="The tenant whose plans the token reads and writes.")
@click.option("--scope", "scopes", multiple=True, required=True,
              help="plans:read, plans:write, webhooks or admin; repeat for several.")
@click.option("--name", default=None, help="A label for listings and audit events (default: '<tenant> token').")
@click.option("--json", "as_json", is_flag=True, help="Print the principal and its token as JSON.")
@errors
def tokens_create(tenant: str, scopes: tuple[str, ...], name: str | None, as_json: bool) -> None:
    """Create a token and print it (once: store it now)."""
    from orchestrator.core.errors import storage_boundary
    from storage import principals

    db = _principals_db(_settings())
    try:
        with storage_boundary():
            record, token = principals.create(db, tenant=tenant, scopes=list(scopes), name=name)
    except ValueError as exc:
        text = str(exc)
        _refuse("--scope" if "scope" in text else "--tenant" if text.startswith("tenant") else "--name", text)
    finally:
        db.dispose()
    if as_json:
        click.echo(json.dumps({**record.to_dict(), "token": token}))
    else:
        click.echo(token)
        err.print(escape(f"principal {record.id} ({record.name}), tenant {record.tenant}, scopes "
                         f"{' '.join(record.scopes)}. The token is shown only now."), highlight=False)


@tokens.command("list")
@click.option("--tenant", default=None, help="Only this tenant's principals.")
@click.option("--json", "as_json", is_flag=True)
@errors
def tokens_list(tenant: str | None, as_json: bool) -> None:
    """List principals (never their tokens)."""
    from orchestrator.core.errors import storage_boundary
    from storage import principals

    db = _principals_db(_settings())
    try:
        with storage_boundary():
            records = principals.list_principals(db, tenant=tenant)
    finally:
        db.dispose()
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in records], indent=2))
        return
    if not records:
        err.print("no principals" + (f" in tenant {tenant}" if tenant else "")
                  + ": conclave tokens create --tenant T --scope S creates one", highlight=False)
        return
    rows = [["ID", "TENANT", "NAME", "SCOPES", "STATE", "LAST USED"]]
    for r in records:
        rows.append([r.id, r.tenant, r.name, " ".join(r.scopes),
                     f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "active",
                     f"{r.last_used_at:%Y-%m-%d %H:%M}" if r.last_used_at else "never"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


@tokens.command("revoke")
@click.argument("principal_id")
@errors
def tokens_revoke(principal_id: str) -> None:
    """Revoke a token at once (its principal stays listed, as revoked)."""
    from orchestrator.core.errors import storage_boundary
    from storage import principals

    db = _principals_db(_settings())
    try:
        with storage_boundary():
            record = principals.revoke(db, principal_id)
    except PlanNotFound:
        err.print(escape(f"error [principal.not_found] no principal {principal_id!r}"), highlight=False)
        sys.exit(2)
    finally:
        db.dispose()
    click.echo(f"revoked {record.id} ({record.name}, tenant {record.tenant})")

