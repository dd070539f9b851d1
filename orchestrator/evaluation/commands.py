"""``conclave eval run | report | compare``: the commands, and what they do given a client.

:func:`eval_group` builds the click group that ``orchestrator.cli`` registers, from the CLI's
own helpers (settings, client, error handling, ``--url``/``--token``: :class:`CliGlue`), which
this layer may not import; :func:`run`, :func:`report` and :func:`compare_evals` do the work.

The report is :func:`orchestrator.evaluation.report.build_report` of the stored eval (as
:func:`~.collect.report_record` reads it) and its outcomes, rebuilt from the database alone.
Progress goes to stderr, the report to stdout (``--json``: the report as one JSON document).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from orchestrator.client.conclave import Conclave
from orchestrator.core.settings import Settings
from orchestrator.evaluation.collect import collect, report_record
from orchestrator.evaluation.comparison import Comparison, compare_reports
from orchestrator.evaluation.harness import IN_FLIGHT, Harness
from orchestrator.evaluation.outcomes import ItemOutcome
from orchestrator.evaluation.progress import LiveProgress
from orchestrator.evaluation.report import Report, build_report
from orchestrator.evaluation.spec import resolve
from orchestrator.plan.registry import load_registry
from storage.evals import EvalRecord

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def build(stored: EvalRecord, outcomes: list[ItemOutcome]) -> Report:
    """The report of a stored eval from its outcomes (:mod:`.report`)."""
    return build_report(report_record(stored, outcomes), outcomes)


def _emit(report: Report | Comparison, as_json: bool, out: Console) -> None:
    out.out(json.dumps(report.as_json(), indent=2) if as_json else report.table(), highlight=False)


def run(conclave: Conclave, spec: str | Path, *, limit: int | None = None, in_flight: int = IN_FLIGHT,
        as_json: bool = False, out: Console | None = None, err: Console | None = None,
        registry: dict[str, dict[str, Any]] | None = None) -> int:
    """Run (or resume) the eval ``spec``, then print its report; the exit code. ``registry``:
    the operator's models, when this process reads them (the judge's family warning)."""
    out = out or Console()
    err = err or Console(stderr=True)
    resolved = resolve(spec, limit=limit, registry=registry)
    for warning in resolved.warnings:
        err.print(f"[yellow]⚠ {escape(warning)}[/yellow]", highlight=False, soft_wrap=True)
    try:
        with LiveProgress(err, resolved.name) as progress:
            result = Harness(conclave, resolved, in_flight=in_flight, progress=progress).run()
    except KeyboardInterrupt:
        again = f"conclave eval run {spec}" + (f" --limit {limit}" if limit is not None else "")  # the same eval
        err.print(f"[yellow]interrupted: the plans submitted so far are stored (and keep running on a cluster); "
                  f"`{escape(again)}` again goes on where this stopped[/yellow]",
                  highlight=False, soft_wrap=True)
        return 130
    _emit(build(result.stored, result.outcomes), as_json, out)
    samples = f"; self_consistency: {result.samples} samples" if result.samples else ""
    err.print(escape(f"eval {result.stored.name}: {result.submitted} plan(s) submitted by this run, "
                     f"{result.reused} found finished{samples}"), highlight=False, soft_wrap=True)
    return 0


def report(conclave: Conclave, name: str, *, as_json: bool = False, out: Console | None = None) -> int:
    """The report of the stored eval ``name``, rebuilt from the database alone."""
    stored = conclave.get_eval(name)
    _emit(build(stored, collect(conclave, stored)), as_json, out or Console())
    return 0


def compare_evals(conclave: Conclave, a: str, b: str, *, as_json: bool = False, out: Console | None = None) -> int:
    """Two stored evals side by side: accuracy per arm with intervals, and the difference."""
    first, second = conclave.get_eval(a), conclave.get_eval(b)
    both = compare_reports(build(first, collect(conclave, first)), build(second, collect(conclave, second)))
    _emit(both, as_json, out or Console())
    return 0


# ------------------------------------------------------------------ the click group


@dataclass(frozen=True)
class CliGlue:
    """What the commands take from ``orchestrator.cli``."""

    settings: Callable[[], Settings]  # from the environment; exits 2 naming a bad variable
    client: Callable[..., Any]  # (settings, worker=…, url=…, token=…) -> Conclave
    errors: Decorator  # a ConclaveError becomes a clean message and exit code
    remote: Decorator  # --url / --token
    configure: Callable[..., None]  # (settings, level): the process's logging


def eval_group(glue: CliGlue) -> click.Group:
    @click.group("eval")
    def group() -> None:
        """Measure a panel against one model and self-consistency, item by item (durable plans).

        An eval spec names a plan template with a {question} slot, the items (a JSONL dataset
        or generated ones), the baselines and the scoring: see examples/eval/README.md."""

    @group.command("run")
    @click.argument("spec")
    @click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
    @click.option("--limit", type=click.IntRange(1), default=None,
                  help="Only the first N items (an eval of its own: the record says so).")
    @click.option("--in-flight", type=click.IntRange(1, 1000), default=IN_FLIGHT, show_default=True,
                  help="Plans running at once.")
    @glue.remote
    @glue.errors
    def run_command(spec: str, as_json: bool, limit: int | None, in_flight: int, url: str | None,
                    token: str | None) -> None:
        """Run the eval SPEC, then print its report. Run it again to resume: nothing that
        finished runs twice."""
        settings = glue.settings()
        glue.configure(settings, "ERROR" if settings.embedded and not url else "WARNING")
        registry = None if settings.models is None else {  # the registry this shell names, if any
            name: model.model_dump(mode="json") for name, model in load_registry(settings.models).items()}
        with glue.client(settings, url=url, token=token) as client:
            code = run(client, spec, limit=limit, in_flight=in_flight, as_json=as_json, registry=registry)
        sys.exit(code)

    @group.command("report")
    @click.argument("name")
    @click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
    @glue.remote
    @glue.errors
    def report_command(name: str, as_json: bool, url: str | None, token: str | None) -> None:
        """The report of the eval NAME, rebuilt from the stored plans."""
        with glue.client(glue.settings(), worker=False, url=url, token=token) as client:
            report(client, name, as_json=as_json)

    @group.command("compare")
    @click.argument("a")
    @click.argument("b")
    @click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
    @glue.remote
    @glue.errors
    def compare_command(a: str, b: str, as_json: bool, url: str | None, token: str | None) -> None:
        """Evals A and B side by side: accuracy per arm with intervals, and the difference."""
        with glue.client(glue.settings(), worker=False, url=url, token=token) as client:
            compare_evals(client, a, b, as_json=as_json)

    return group
