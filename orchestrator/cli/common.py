"""What every ``conclave`` command shares: settings read once at the edge, errors turned
into one line and an exit code, the client (embedded, a cluster's database, or its HTTP
API), the options that choose it (``--url``, ``--token``, ``--tenant``), and the one line
that says which Conclave a command talks to.

Exit codes: 0 completed, 1 failed (or any other error), 2 invalid input (the message names
the field), 130 cancelled or interrupted. No command prints a traceback for a user error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from orchestrator.core.errors import (
    AmbiguousPlan,
    ConclaveError,
    EvalConflict,
    EvalNotFound,
    Forbidden,
    InvalidConfiguration,
    InvalidEval,
    InvalidPlan,
    InvalidRequest,
    InvalidWebhook,
    PlanNotFound,
    Unauthorized,
    WebhookNotFound,
)
from orchestrator.core.settings import Settings, settings_errors
from orchestrator.plan.views import PlanView
from storage.identity import check_tenant
from storage.status import PlanStatus

F = TypeVar("F", bound=Callable[..., Any])
EXIT = {PlanStatus.COMPLETED: 0, PlanStatus.CANCELLED: 130}
INTERRUPTED = 130
err = Console(stderr=True, soft_wrap=True)
#: Errors of what the user gave (a plan, an id, a setting, a token): exit 2.
INPUT_ERRORS = (InvalidPlan, PlanNotFound, AmbiguousPlan, InvalidConfiguration, InvalidRequest, Unauthorized,
                Forbidden, InvalidEval, EvalNotFound, EvalConflict, InvalidWebhook, WebhookNotFound)


def settings() -> Settings:
    """Settings from the environment; a bad value exits 2 naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        for line in settings_errors(exc):
            err.print(escape(f"error [settings.invalid] {line}"), highlight=False)
        sys.exit(2)


def errors(fn: F) -> F:
    """A :class:`ConclaveError` becomes ``error [code] message`` (and the fields it names)
    on stderr, and exit 2 for bad input, 1 otherwise."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConclaveError as exc:
            fail(exc)

    return wrapper  # type: ignore[return-value]


def fail(exc: ConclaveError, *, where: str | None = None) -> None:
    """Print ``exc`` as :func:`errors` does (``where``: the line saying where a plan was
    looked for) and exit."""
    err.print(f"[red]error[/red] {escape(f'[{exc.code}] {exc.message}')}", highlight=False)
    if isinstance(exc.details, list):  # each field named once (a plan's first is in its message)
        for d in exc.details[1:6] if isinstance(exc, InvalidPlan) else exc.details[:5]:
            if not isinstance(d, dict) or str(d.get("message")) in exc.message:
                continue  # said already: a registry's problem is its message, named by the variable
            line = f"{d.get('field') or '(plan)'}: {d.get('message')}"
            if line not in exc.message:
                err.print(escape(f"  {line}"), highlight=False)
    if where is not None:
        err.print(escape(f"  looked in {where}"), highlight=False)
    sys.exit(2 if isinstance(exc, INPUT_ERRORS) else 1)


def client(settings: Settings, *, worker: bool = True, url: str | None = None, token: str | None = None,
           tenant: str | None = None) -> Any:
    """A client: of the HTTP API at ``url`` if given (the token's tenant applies), else of
    the configured database, as the operator or for ``tenant``; in embedded mode ``worker``
    says whether it runs the in-process worker (commands that only read or flag stored
    state do not)."""
    from orchestrator.client.conclave import Conclave

    if url:
        return Conclave.connect(url, token=token, settings=settings)
    return Conclave(settings, worker=worker, tenant=tenant)


def remote(fn: F) -> F:
    """``--url`` / ``CONCLAVE_URL`` and ``--token`` / ``CONCLAVE_TOKEN``: talk to the HTTP API."""
    fn = click.option("--token", envvar="CONCLAVE_TOKEN", default=None, metavar="TOKEN", show_envvar=True,
                      help="Bearer token for --url; prefer the variable (an option shows in ps).")(fn)
    return click.option("--url", envvar="CONCLAVE_URL", default=None, metavar="URL", show_envvar=True,
                        help="Talk to the HTTP API at URL instead of the database.")(fn)


def _tenant_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_tenant(value.strip())
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def tenant(fn: F) -> F:
    """``--tenant`` / ``CONCLAVE_TENANT``: act for one tenant on the database (embedded or a
    cluster's); over ``--url`` the token's tenant applies instead."""
    return click.option("--tenant", envvar="CONCLAVE_TENANT", default=None, metavar="TENANT", show_envvar=True,
                        callback=_tenant_option,
                        help="Submit into TENANT and reach only its plans (default: the operator — plans go "
                             "to tenant 'default', every tenant's are in reach). With --url the token's tenant "
                             "applies.")(fn)


def scope(tenant: str | None, url: str | None) -> str | None:
    """The tenant a database client acts for: ``tenant`` unless the API is used (``--url``),
    where the token decides — an explicit ``--tenant`` with ``--url`` is refused."""
    if url and tenant is not None:
        source = click.get_current_context().get_parameter_source("tenant")
        if source == click.core.ParameterSource.COMMANDLINE:
            raise InvalidConfiguration("--tenant: with --url the token's tenant applies (create a token of that "
                                       "tenant: conclave tokens create --tenant T …)",
                                       details=[{"field": "tenant", "message": "not with --url"}])
    return None if url else tenant


def shown_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (what a banner may print)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unparsable URL)"
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def where(settings: Settings, url: str | None = None, tenant: str | None = None) -> str:
    """Which Conclave a command talks to, in one line, with no secret in it."""
    if url:
        return f"the cluster's API at {shown_url(url)} (the token's tenant)"
    reach = f"tenant {tenant}" if tenant is not None else "the operator: every tenant"
    if settings.embedded:
        db = settings.effective_database_url.removeprefix("sqlite:///")
        return f"the embedded database {db} ({reach})"
    return f"the cluster's database {shown_url(settings.effective_database_url)} ({reach})"


def banner(settings: Settings, url: str | None = None, tenant: str | None = None) -> None:
    """One line on stderr for a person at a terminal: embedded or cluster, which database and
    broker (no secrets). Not when stderr is piped or logs are JSON lines — a program reading
    them gets only what it asked for (``conclave info`` says the same on demand)."""
    if not err.is_terminal or settings.log_format == "json":
        return
    if url:
        line = f"conclave: cluster API {shown_url(url)}"
    elif settings.embedded:
        line = (f"conclave: embedded — database {settings.effective_database_url.removeprefix('sqlite:///')}, "
                f"in-process worker")
    else:
        line = (f"conclave: cluster — database {shown_url(settings.effective_database_url)}, "
                f"broker {shown_url(settings.broker_url or '')}")
    if not url:
        line += f", tenant {tenant}" if tenant is not None else ", operator (new plans: tenant default)"
    err.print(escape(line), style="dim", highlight=False, soft_wrap=True)


def exit_for(view: PlanView) -> int:
    return EXIT.get(view.status, 1)


class Looking:
    """``with Looking(settings, url, tenant):`` — a plan that is not found (or an id prefix
    several share) is reported with where it was looked for: the embedded database, a
    cluster's, or its API."""

    def __init__(self, settings: Settings, url: str | None = None, tenant: str | None = None) -> None:
        self.where = where(settings, url, tenant)

    def __enter__(self) -> Looking:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, PlanNotFound | AmbiguousPlan) and type(exc) in (PlanNotFound, AmbiguousPlan):
            fail(exc, where=self.where)
