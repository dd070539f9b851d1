"""``conclave`` — run, submit, follow and control plans; run workers; migrate.

Exit codes: 0 completed, 1 failed (or any other error), 2 invalid input (the
message names the field), 130 cancelled. No command prints a traceback for a
user error.

``submit``, ``status``, ``watch``, ``result``, ``resume`` and ``cancel`` talk to the
HTTP API instead of the database with ``--url`` (or ``CONCLAVE_URL``); the token comes
from ``CONCLAVE_TOKEN`` (``--token`` also works, but shows in ``ps``).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from orchestrator import tracing
from orchestrator.briefing.documents import CitationView
from orchestrator.core.errors import (
    ConclaveError,
    EvalConflict,
    EvalNotFound,
    Forbidden,
    InvalidConfiguration,
    InvalidEval,
    InvalidPlan,
    InvalidRequest,
    NotReady,
    PlanNotFound,
    Unauthorized,
)
from orchestrator.core.settings import Settings, settings_errors
from orchestrator.core.version import __version__
from orchestrator.fleet import startup
from orchestrator.fleet.celery_app import build_app
from orchestrator.logs import configure, quiet_beat
from orchestrator.plan.views import PlanView
from storage.status import PlanStatus

F = TypeVar("F", bound=Callable[..., Any])
EXIT = {PlanStatus.COMPLETED: 0, PlanStatus.CANCELLED: 130}
err = Console(stderr=True, soft_wrap=True)
#: Errors of what the user gave (a plan, an id, a setting, a token): exit 2.
INPUT_ERRORS = (InvalidPlan, PlanNotFound, InvalidConfiguration, InvalidRequest, Unauthorized, Forbidden, InvalidEval,
                EvalNotFound, EvalConflict)


def _settings() -> Settings:
    """Settings from the environment; a bad value exits 2 naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        for line in settings_errors(exc):
            err.print(escape(f"error [settings.invalid] {line}"), highlight=False)
        sys.exit(2)


def _errors(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConclaveError as exc:
            err.print(f"[red]error[/red] {escape(f'[{exc.code}] {exc.message}')}", highlight=False)
            if isinstance(exc.details, list):  # each field named once (a plan's first is in its message)
                for d in exc.details[1:6] if isinstance(exc, InvalidPlan) else exc.details[:5]:
                    line = f"{d.get('field') or '(plan)'}: {d.get('message')}" if isinstance(d, dict) else ""
                    if line and line not in exc.message:
                        err.print(escape(f"  {line}"), highlight=False)
            sys.exit(2 if isinstance(exc, INPUT_ERRORS) else 1)

    return wrapper  # type: ignore[return-value]


def _client(settings: Settings, *, worker: bool = True, url: str | None = None, token: str | None = None) -> Any:
    """A client: of the HTTP API at ``url`` if given, else of the configured database; in
    embedded mode ``worker`` says whether it runs the in-process worker (commands that only
    read or flag stored state do not)."""
    from orchestrator.client.conclave import Conclave

    if url:
        return Conclave.connect(url, token=token, settings=settings)
    return Conclave(settings, worker=worker)


def _remote(fn: F) -> F:
    """``--url`` / ``CONCLAVE_URL`` and ``--token`` / ``CONCLAVE_TOKEN``: talk to the HTTP API."""
    fn = click.option("--token", envvar="CONCLAVE_TOKEN", default=None, metavar="TOKEN", show_envvar=True,
                      help="Bearer token for --url; prefer the variable (an option shows in ps).")(fn)
    return click.option("--url", envvar="CONCLAVE_URL", default=None, metavar="URL", show_envvar=True,
                        help="Talk to the HTTP API at URL instead of the database.")(fn)


def summary(view: PlanView, synthesis: str | None, citations: Sequence[CitationView] = ()) -> dict[str, Any]:
    return {
        "plan_id": view.id, "task_id": view.task_id, "title": view.title, "kind": view.kind,
        "status": view.status, "error_code": view.error_code, "error": view.error,
        "usage": view.usage.__dict__,
        "phases": [{"id": p.key, "kind": p.kind, "expert": p.expert, "status": p.status, "attempt": p.attempt,
                    "truncated": p.truncated, "error_code": p.error_code, "usage": p.usage.__dict__,
                    "verdict": p.verdict}
                   for p in view.phases],
        "decision": view.decision,
        "warnings": view.warnings,
        "synthesis": synthesis,
        "citations": [c.to_dict() for c in citations],  # the synthesis's briefing citations, resolved
    }


def _exit_for(view: PlanView) -> int:
    return EXIT.get(view.status, 1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="conclave")
def cli() -> None:
    """Durable multi-expert LLM plans on a Celery worker fleet."""


@cli.command()
@click.argument("plan")
@click.option("--json", "as_json", is_flag=True, help="Print one machine-readable summary instead.")
@click.option("--timeout", type=float, default=None, help="Give up waiting after this many seconds.")
@_errors
def run(plan: str, as_json: bool, timeout: float | None) -> None:
    """Run PLAN (a YAML/JSON file) to the end with live progress, then print the result.

    With no CONCLAVE_BROKER_URL it runs embedded: a SQLite file and an in-process worker."""
    settings = _settings()
    configure(settings, "ERROR" if settings.embedded else "WARNING")
    tracing.setup(settings, service="conclave")  # the embedded worker's phases, when CONCLAVE_OTEL is on
    local = _read_local(plan, settings)  # validate (and read briefing paths) before starting anything
    with _client(settings) as client:
        plan_id = client.submit(local.plan)
        _cancel_on_interrupt(client, plan_id)
        if as_json:
            view = client.wait(plan_id, timeout=timeout)
        else:
            from orchestrator.client.console import MeetingView

            view = MeetingView(Console(), client, plan_id).follow()
        text = _result_or_none(client, plan_id)
        if as_json:
            click.echo(json.dumps(summary(view, text, client.citations(plan_id)), indent=2))
        sys.exit(_exit_for(view))


def _result_or_none(client: Any, plan_id: str) -> str | None:
    """The plan's result; None when it ended without one (failed, cancelled)."""
    try:
        return str(client.result(plan_id))
    except NotReady:
        return None


def _read_local(plan: str, settings: Settings) -> Any:
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


def _cancel_on_interrupt(client: Any, plan_id: str) -> None:
    def handler(signum: int, frame: Any) -> None:
        err.print("\n[yellow]interrupted: cancelling the plan…[/yellow]")
        try:
            client.cancel(plan_id)
            client.wait(plan_id, timeout=30)
        finally:
            client.close()
            sys.exit(130)

    signal.signal(signal.SIGINT, handler)


@cli.command()
@click.argument("plan")
@click.option("--json", "as_json", is_flag=True)
@_remote
@_errors
def submit(plan: str, as_json: bool, url: str | None, token: str | None) -> None:
    """Submit PLAN to the cluster and print its id (idempotent per task_id)."""
    settings = _settings()
    configure(settings, "WARNING")
    local = _read_local(plan, settings)  # briefing paths are read here, also for --url
    with _client(settings, url=url, token=token) as client:
        result = client.submit_result(local.plan)
        if as_json:
            click.echo(json.dumps({"plan_id": result.plan_id, "created": result.created,
                                   "enqueued": result.enqueued}))
        else:
            click.echo(result.plan_id)
        if settings.embedded and not url:
            err.print("[yellow]embedded mode: no worker outlives this command; "
                      "`conclave resume ID --follow` runs it[/yellow]")


@cli.command()
@click.argument("plan_id")
@click.option("--json", "as_json", is_flag=True)
@_remote
@_errors
def status(plan_id: str, as_json: bool, url: str | None, token: str | None) -> None:
    """Show a plan's status, phases and usage."""
    with _client(_settings(), worker=False, url=url, token=token) as client:
        view = client.get(plan_id)
        if as_json:
            click.echo(json.dumps(view.to_dict(), indent=2))
            return
        c = Console()
        c.print(f"[bold]{escape(view.title)}[/bold]  {view.id}  {escape(f'[{view.status}]')}  "
                f"{view.done}/{len(view.phases)} done  {view.usage.total_tokens:,} tokens"
                + (" (est.)" if view.usage.estimated else ""), highlight=False)
        for p in view.phases:
            said = "" if not p.verdict or p.kind == "decision" else (
                f"  verdict: {p.verdict.get('answer')} ({p.verdict.get('confidence', 0):.2f})"
                if p.verdict.get("answer") is not None else "  verdict: abstained")
            c.print(f"  {p.status:<10} {p.key:<28} {p.expert or '':<12} attempt {p.attempt}"
                    + (f"  {p.error_code}" if p.error_code else "") + said, highlight=False)
        from orchestrator.client.console import decision_lines

        for line in decision_lines(view):
            c.print(line)


@cli.command()
@click.argument("plan_id")
@_remote
@_errors
def watch(plan_id: str, url: str | None, token: str | None) -> None:
    """Follow a running plan live until it ends."""
    settings = _settings()
    configure(settings, "ERROR")
    with _client(settings, worker=False, url=url, token=token) as client:
        from orchestrator.client.console import MeetingView

        view = MeetingView(Console(), client, client.get(plan_id).id).follow()
        sys.exit(_exit_for(view))


@cli.command()
@click.argument("plan_id")
@_remote
@_errors
def result(plan_id: str, url: str | None, token: str | None) -> None:
    """Print the full text of a plan's final phase."""
    with _client(_settings(), worker=False, url=url, token=token) as client:
        click.echo(client.result(plan_id))


@cli.command()
@click.argument("ref")
@click.option("--retry-failed", is_flag=True, help="Also re-run failed phases (recorded on each).")
@click.option("--follow/--no-follow", default=None, help="Follow until the plan ends (default in embedded mode).")
@click.option("--json", "as_json", is_flag=True)
@_remote
@_errors
def resume(ref: str, retry_failed: bool, follow: bool | None, as_json: bool, url: str | None,
           token: str | None) -> None:
    """Resume a plan by its id or external task id: re-enqueue exactly its pending phases."""
    settings = _settings()
    embedded = settings.embedded and not url
    configure(settings, "ERROR" if embedded else "WARNING")
    with _client(settings, url=url, token=token) as client:
        res = client.resume(ref, retry_failed=retry_failed)
        if as_json:
            click.echo(json.dumps({"plan_id": res.plan_id, "status": res.status, "enqueued": res.enqueued,
                                   "retried": res.retried}))
        else:
            click.echo(f"{res.plan_id}: enqueued {', '.join(res.enqueued) or 'nothing'}"
                       + (f"; retrying {', '.join(res.retried)}" if res.retried else ""))
        if follow or (follow is None and embedded):
            view = client.wait(res.plan_id)
            sys.exit(_exit_for(view))


@cli.command()
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True)
@_remote
@_errors
def cancel(ref: str, as_json: bool, url: str | None, token: str | None) -> None:
    """Cancel a plan: queued phases end cancelled; running ones at their next safe point."""
    settings = _settings()
    with _client(settings, worker=False, url=url, token=token) as client:
        res = client.cancel(ref)
        if as_json:
            click.echo(json.dumps({"plan_id": res.plan_id, "status": res.status, "cancelled": res.cancelled}))
        else:
            click.echo(f"{res.plan_id}: cancel requested; {len(res.cancelled)} queued phase(s) cancelled")


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--beat", is_flag=True, help="Also run the reconciler schedule (celery beat) in this worker.")
@click.pass_context
def worker(ctx: click.Context, beat: bool) -> None:
    """Run a Celery worker for the configured cluster (extra args go to celery)."""
    fleet = startup.start("worker")  # its app names the task modules: Celery imports them
    settings = fleet.settings
    argv = ["worker", "--pool", settings.pool, "--concurrency", str(settings.concurrency), "-Q", "conclave",
            "-E", "--loglevel", settings.log_level, *(["-B", *_schedule(settings)] if beat else []), *ctx.args]
    startup.run(fleet.app, argv)


@cli.command()
def beat() -> None:
    """Run the reconciler schedule (celery beat). Optional: every worker reconciles on its own."""
    fleet = startup.start("beat")
    startup.run(fleet.app, [*quiet_beat(fleet.settings), "beat", "--loglevel", fleet.settings.log_level,
                            *_schedule(fleet.settings)])


def _schedule(settings: Settings) -> list[str]:
    """Beat's schedule file, under ``CONCLAVE_STATE_DIR`` (never the working directory)."""
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"CONCLAVE_STATE_DIR ({settings.state_dir}) cannot be created: "
                                   f"{exc.strerror}") from None
    return ["--schedule", str(settings.state_dir / "celerybeat-schedule")]


@cli.command()
@click.option("--host", envvar="CONCLAVE_API_HOST", default="127.0.0.1", show_default=True, show_envvar=True,
              help="Interface to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to bind.")
@_errors
def api(host: str, port: int) -> None:
    """Serve the HTTP API (docs/api.md): in a cluster every /v1 route needs a bearer token."""
    import uvicorn

    from orchestrator.api import create_app
    from orchestrator.api.uvicorn_protocol import JsonErrorsProtocol
    from orchestrator.plan.registry import ModelResolver

    settings = _settings()
    ModelResolver.from_settings(settings)  # a bad model registry refuses to start, naming the field
    configure(settings)
    tracing.setup(settings, service="conclave-api")
    uvicorn.run(create_app(settings), host=host, port=port, log_config=None, timeout_graceful_shutdown=5,
                server_header=False, http=JsonErrorsProtocol)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--address", envvar="CONCLAVE_FLOWER_ADDRESS", default="127.0.0.1", show_default=True,
              show_envvar=True, help="Interface to bind.")
@click.option("--port", envvar="CONCLAVE_FLOWER_PORT", default=5555, show_default=True, show_envvar=True,
              type=click.IntRange(0, 65535), help="Port to bind.")
@click.pass_context
@_errors
def flower(ctx: click.Context, address: str, port: int) -> None:
    """Run Flower on the cluster's broker, behind basic auth (extra args go to flower).

    The credentials are CONCLAVE_FLOWER_USER and CONCLAVE_FLOWER_PASSWORD, handed to Flower
    in its environment, never on a command line; without them it refuses to start unless
    CONCLAVE_FLOWER_AUTH=off."""
    import os

    from orchestrator.fleet.flower import BASIC_AUTH, basic_auth

    settings = _settings()
    credentials = basic_auth(settings)
    os.environ.pop(BASIC_AUTH, None)  # the settings are the one source of Flower's credentials
    if credentials is not None:
        os.environ[BASIC_AUTH] = credentials  # Flower reads it from here: never on a command line
    build_app(settings).start(["flower", f"--address={address}", f"--port={port}", *ctx.args])


@cli.command()
@click.argument("role", type=click.Choice(["worker", "beat"]))
@click.option("-n", "--hostname", default=None, metavar="NODE",
              help="The node name the process runs as (its -n; %h expands). Default: celery@<this host> for "
                   "a worker, celerybeat@<this host> for beat.")
@click.option("--timeout", type=click.FloatRange(0.1, 60), default=3.0, show_default=True,
              help="Seconds to wait for the answer.")
def health(role: str, hostname: str | None, timeout: float) -> None:
    """Exit 0 if the worker or beat of this host answers a ping over the broker, 1 if not
    (a container's health check: a dead, stopped or wedged process does not answer)."""
    from kombu.exceptions import OperationalError

    from orchestrator.fleet.health import answers, node_name

    settings = _settings()
    if settings.broker_url is None:
        raise click.ClickException("CONCLAVE_BROKER_URL is not set: a health check asks over the cluster's broker")
    node = node_name("beat" if role == "beat" else "worker", hostname)
    try:
        alive = answers(build_app(settings), node, timeout)
    except (OperationalError, OSError) as exc:
        err.print(escape(f"unhealthy: the broker cannot be reached ({type(exc).__name__})"), highlight=False)
        sys.exit(1)
    if not alive:
        err.print(escape(f"unhealthy: {node} did not answer within {timeout:g}s"), highlight=False)
        sys.exit(1)
    click.echo(f"{node}: alive")


@cli.group()
def db() -> None:
    """Database migrations."""


@db.command("upgrade")
@click.option("--revision", default="head")
@_errors
def db_upgrade(revision: str) -> None:
    """Migrate the configured database to the latest schema."""
    from orchestrator.core.errors import storage_boundary
    from storage import upgrade

    settings = _settings()
    with storage_boundary():
        upgrade(settings.effective_database_url, revision)
    click.echo(f"database at {revision}")


@cli.group()
def tokens() -> None:
    """API tokens: principals with a tenant and scopes (plans:read, plans:write, admin).

    A token is printed once, when it is created; only its hash is stored. Create a new
    token before revoking the old one to rotate without downtime."""


def _principals_db(settings: Settings) -> Any:
    from storage import connect, upgrade

    if settings.database_url is None:  # embedded: the SQLite file is ours to migrate
        upgrade(settings.effective_database_url)
    return connect(settings.effective_database_url, pool_size=1)


def _refuse(option: str, message: str) -> None:
    err.print(escape(f"error [tokens.invalid] {option}: {message}"), highlight=False)
    sys.exit(2)


@tokens.command("create")
@click.option("--tenant", required=True, help="The tenant whose plans the token reads and writes.")
@click.option("--scope", "scopes", multiple=True, required=True,
              help="plans:read, plans:write or admin; repeat for several.")
@click.option("--name", default=None, help="A label for listings and audit events (default: '<tenant> token').")
@click.option("--json", "as_json", is_flag=True, help="Print the principal and its token as JSON.")
@_errors
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
@_errors
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
    for r in records:
        state = f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "active"
        used = f"{r.last_used_at:%Y-%m-%d %H:%M}" if r.last_used_at else "never"
        click.echo(f"{r.id}  {r.tenant:<16} {r.name:<24} {' '.join(r.scopes):<24} {state:<24} used {used}")


@tokens.command("revoke")
@click.argument("principal_id")
@_errors
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


def _eval_commands() -> click.Group:
    """``conclave eval``: its commands live with the evaluation (the glue is this module's)."""
    from orchestrator.evaluation.commands import CliGlue, eval_group

    return eval_group(CliGlue(settings=_settings, client=_client, errors=_errors, remote=_remote,
                              configure=configure))


cli.add_command(_eval_commands())


def main() -> None:
    cli()
if __name__ == "__main__":
    main()
