"""``conclave run | watch | resume``: the commands that follow a plan while it runs.

Ctrl-C never loses a plan. On a cluster the plan belongs to the fleet, not to this
terminal: the first Ctrl-C stops following it, says so, and names the commands that follow
(``conclave watch ID``) or cancel (``conclave cancel ID``) it; a second Ctrl-C within
:data:`GRACE` seconds, or ``--cancel-on-exit``, cancels it. Embedded, this process *is* the
plan's worker: Ctrl-C stops that worker (the phases it was running are given back) and the
plan waits, stored, for ``conclave resume ID --follow`` to carry on from what finished —
or, the same way, a second Ctrl-C or ``--cancel-on-exit`` cancels it.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from orchestrator import tracing
from orchestrator.cli import common
from orchestrator.cli.common import INTERRUPTED, Looking, err, errors, exit_for, remote, tenant
from orchestrator.cli.plan_commands import read_local
from orchestrator.core.errors import NotReady
from orchestrator.logs import configure
from orchestrator.plan.views import PlanView

#: Seconds after the first Ctrl-C in which a second one cancels the plan.
GRACE = 3.0


def summary(view: PlanView, synthesis: str | None, citations: Any = ()) -> dict[str, Any]:
    """What ``run --json`` prints."""
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


def person(console: Console, enabled: bool) -> Any:
    """The person at this terminal, asked for their seat's answers and their decision on a draft
    (:mod:`orchestrator.client.terminal_person`) — when standard input is a terminal and
    ``--no-prompt`` was not given; None otherwise (the view then says how to answer)."""
    if not enabled or not sys.stdin.isatty():
        return None
    from orchestrator.client.terminal_person import TerminalPerson

    return TerminalPerson(console)


prompt_option = click.option("--prompt/--no-prompt", "prompt", default=True,
                             help="At a terminal, ask here for a person's seat's answer and for approval of a "
                                  "draft (default); --no-prompt only says who is awaited.")


@click.command()
@click.argument("plan")
@click.option("--json", "as_json", is_flag=True, help="Print one machine-readable summary instead.")
@click.option("--timeout", type=float, default=None, help="Give up waiting after this many seconds.")
@click.option("--cancel-on-exit", is_flag=True,
              help="Ctrl-C cancels the plan at once (default: the first Ctrl-C stops following it and leaves it "
                   "running, a second one cancels).")
@prompt_option
@remote
@tenant
@errors
def run(plan: str, as_json: bool, timeout: float | None, cancel_on_exit: bool, prompt: bool, url: str | None,
        token: str | None, tenant: str | None) -> None:
    """Run PLAN (a YAML/JSON file) to the end with live progress, then print the result.

    With no CONCLAVE_BROKER_URL it runs embedded: a SQLite file and an in-process worker.
    Ctrl-C stops following (the plan goes on, on a cluster) and says how to follow or cancel
    it; a second Ctrl-C, or --cancel-on-exit, cancels it."""
    settings = common.settings()
    embedded = settings.embedded and not url
    configure(settings, "ERROR" if embedded else "WARNING")
    tracing.setup(settings, service="conclave")  # the embedded worker's phases, when CONCLAVE_OTEL is on
    tenant = common.scope(tenant, url)
    common.banner(settings, url, tenant)
    local = read_local(plan, settings)  # validate (and read briefing paths) before starting anything
    with common.client(settings, url=url, token=token, tenant=tenant) as conclave:
        plan_id = conclave.submit(local.plan)
        try:
            if as_json:
                view = conclave.wait(plan_id, timeout=timeout)
            else:
                from orchestrator.client.console import MeetingView

                console = Console()
                view = MeetingView(console, conclave, plan_id, person=person(console, prompt)).follow()
        except KeyboardInterrupt:
            interrupted(conclave, plan_id, embedded=embedded, cancel_now=cancel_on_exit)
        text = _result_or_none(conclave, plan_id)
        if as_json:
            click.echo(json.dumps(summary(view, text, conclave.citations(plan_id)), indent=2))
        sys.exit(exit_for(view))


def interrupted(conclave: Any, plan_id: str, *, embedded: bool, cancel_now: bool) -> None:
    """After a Ctrl-C: detach (a second Ctrl-C within :data:`GRACE` s cancels) or, with
    ``cancel_now``, cancel; then exit 130. Never a traceback, never a silent exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # nothing interrupts what follows but our own choice
    if not cancel_now:
        what = ("the plan's worker is this process: it stops now and the plan waits, stored"
                if embedded else "the plan keeps running on the cluster")
        err.print(escape(f"\ninterrupted: stopped following plan {plan_id} — {what}. "
                         f"Press Ctrl-C again within {GRACE:g}s to cancel it instead."), highlight=False)
        cancel_now = _second_interrupt(GRACE)
    if cancel_now:
        err.print(escape(f"cancelling plan {plan_id}…"), highlight=False)
        try:
            res = conclave.cancel(plan_id)
            if not embedded:
                conclave.wait(plan_id, timeout=30)
            err.print(escape(f"plan {plan_id}: cancel requested ({len(res.cancelled)} queued phase(s) cancelled"
                             + ("" if embedded else "; running ones stop at their next safe point") + ")"),
                      highlight=False)
        except Exception as exc:  # the plan stays as it is; say what to do
            err.print(escape(f"could not cancel plan {plan_id} ({type(exc).__name__}): "
                             f"run `conclave cancel {plan_id}`"), highlight=False)
    elif embedded:
        err.print(escape(f"carry on:  conclave resume {plan_id} --follow   (finished phases do not run again)\n"
                         f"cancel:    conclave cancel {plan_id}"), highlight=False)
    else:
        err.print(escape(f"follow:    conclave watch {plan_id}\n"
                         f"cancel:    conclave cancel {plan_id}"), highlight=False)
    sys.exit(INTERRUPTED)  # the client closes on the way out (embedded: its worker gives its phases back)


def _second_interrupt(grace: float) -> bool:
    """True if SIGINT arrives again within ``grace`` seconds."""
    hit: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: hit.append(signum))
    deadline = time.monotonic() + grace
    try:
        while not hit and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return bool(hit)


def _result_or_none(conclave: Any, plan_id: str) -> str | None:
    """The plan's result; None when it ended without one (failed, cancelled)."""
    try:
        return str(conclave.result(plan_id))
    except NotReady:
        return None


@click.command()
@click.argument("plan_id")
@prompt_option
@remote
@tenant
@errors
def watch(plan_id: str, prompt: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Follow a running plan live until it ends (Ctrl-C stops following; the plan goes on)."""
    settings = common.settings()
    configure(settings, "ERROR")
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave:
        from orchestrator.client.console import MeetingView

        with Looking(settings, url, tenant):
            found = conclave.get(plan_id).id
        try:
            console = Console()
            view = MeetingView(console, conclave, found, person=person(console, prompt)).follow()
        except KeyboardInterrupt:
            err.print(escape(f"\nstopped following plan {found}; it is unchanged "
                             f"(conclave watch {found} follows it again)"), highlight=False)
            sys.exit(INTERRUPTED)
        sys.exit(exit_for(view))


@click.command()
@click.argument("ref")
@click.option("--retry-failed", is_flag=True, help="Also re-run failed phases (recorded on each).")
@click.option("--follow/--no-follow", default=None,
              help="Follow live until the plan ends, then print its outcome (default in embedded mode).")
@click.option("--json", "as_json", is_flag=True)
@prompt_option
@remote
@tenant
@errors
def resume(ref: str, retry_failed: bool, follow: bool | None, as_json: bool, prompt: bool, url: str | None,
           token: str | None, tenant: str | None) -> None:
    """Resume a plan by its id (or a unique prefix) or external task id: re-enqueue exactly its
    pending phases, or say why there is nothing to enqueue."""
    settings = common.settings()
    embedded = settings.embedded and not url
    configure(settings, "ERROR" if embedded else "WARNING")
    tenant = common.scope(tenant, url)
    common.banner(settings, url, tenant)
    with common.client(settings, url=url, token=token, tenant=tenant) as conclave:
        with Looking(settings, url, tenant):
            res = conclave.resume(ref, retry_failed=retry_failed)
        if as_json:
            click.echo(json.dumps({"plan_id": res.plan_id, "status": res.status, "enqueued": res.enqueued,
                                   "retried": res.retried, "reason": res.reason}))
        elif res.enqueued:
            click.echo(f"{res.plan_id}: enqueued {', '.join(res.enqueued)}"
                       + (f"; retrying {', '.join(res.retried)}" if res.retried else ""))
        else:
            click.echo(f"{res.plan_id}: enqueued nothing — {res.reason or 'nothing is ready'}")
        if not (follow or (follow is None and embedded)):
            return
        view = conclave.get(res.plan_id)
        if not view.final:
            try:
                if as_json:
                    view = conclave.wait(res.plan_id)
                else:
                    from orchestrator.client.console import MeetingView

                    console = Console()
                    view = MeetingView(console, conclave, res.plan_id,
                                       person=person(console, prompt)).follow()  # ends with the outcome
            except KeyboardInterrupt:
                interrupted(conclave, res.plan_id, embedded=embedded, cancel_now=False)
        elif not as_json:
            click.echo(f"plan {view.id}: {view.status} · {view.done}/{len(view.phases)} phases")
        sys.exit(exit_for(view))
