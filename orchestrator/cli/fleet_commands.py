"""``conclave worker | beat | api | flower | health | db``: the processes of a cluster and
their upkeep. Each reads its settings from the environment and refuses to start, naming
the variable, when they are wrong."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from orchestrator import tracing
from orchestrator.cli.common import err, errors
from orchestrator.cli.common import settings as _settings
from orchestrator.core.settings import Settings
from orchestrator.fleet import startup
from orchestrator.fleet.celery_app import build_app
from orchestrator.logs import configure, quiet_beat


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--beat", is_flag=True, help="Also run the reconciler schedule (celery beat) in this worker.")
@click.pass_context
def worker(ctx: click.Context, beat: bool) -> None:
    """Run a Celery worker for the configured cluster (extra args go to celery)."""
    fleet = startup.start("worker", _logfile(ctx.args))  # its app names the task modules: Celery imports them
    settings = fleet.settings
    argv = ["worker", "--pool", settings.pool, "--concurrency", str(settings.concurrency), "-Q", "conclave",
            "-E", "--loglevel", settings.log_level, *(["-B", *_schedule(settings)] if beat else []), *ctx.args]
    startup.run(fleet.app, argv)


def _logfile(args: list[str]) -> str | None:
    """The ``--logfile``/``-f`` among Celery's arguments (``--logfile X``, ``--logfile=X``,
    ``-f X``, ``-fX``), or None."""
    for i, arg in enumerate(args):
        if arg in ("--logfile", "-f"):
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith("--logfile="):
            return arg.split("=", 1)[1]
        if arg.startswith("-f") and not arg.startswith("--") and len(arg) > 2:
            return arg[2:]
    return None


@click.command()
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


@click.command()
@click.option("--host", envvar="CONCLAVE_API_HOST", default="127.0.0.1", show_default=True, show_envvar=True,
              help="Interface to bind.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to bind.")
@errors
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


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--address", envvar="CONCLAVE_FLOWER_ADDRESS", default="127.0.0.1", show_default=True,
              show_envvar=True, help="Interface to bind.")
@click.option("--port", envvar="CONCLAVE_FLOWER_PORT", default=5555, show_default=True, show_envvar=True,
              type=click.IntRange(0, 65535), help="Port to bind.")
@click.pass_context
@errors
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


@click.command()
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


@click.group()
def db() -> None:
    """Database migrations."""


@db.command("upgrade")
@click.option("--revision", default="head")
@errors
def db_upgrade(revision: str) -> None:
    """Migrate the configured database to the latest schema."""
    from orchestrator.core.errors import storage_boundary
    from storage import upgrade

    settings = _settings()
    with storage_boundary():
        upgrade(settings.effective_database_url, revision)
    click.echo(f"database at {revision}")


