"""``conclave fork | diff``: try another model, prompt or question from any phase of a plan that
ran, reusing what it already paid for, and compare the two.

``conclave fork ID --from PHASE`` makes a new plan from ID's spec with the changes given —
``--plan override.yaml`` (a partial plan) and/or ``--set PATH=VALUE`` (one field each, applied
after the file) — and prints its id; the phases before PHASE whose inputs and configuration are
unchanged are copied from ID (their texts shared, no cost) and the rest run on the fleet.
``conclave diff A B`` sets two plans side by side: decisions, the final texts' line diff, which
phases each reused or ran, and cost.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from orchestrator.cli import common
from orchestrator.cli.common import Looking, err, errors, remote, tenant
from orchestrator.core.errors import InvalidRequest
from orchestrator.logs import configure
from orchestrator.plan.overrides import assignments
from orchestrator.plan.plan_diff import Comparison, Side
from orchestrator.plan.plan_text import parse_plan_text, read_plan_file
from orchestrator.plan.spending import dollars


def read_overrides(path: str | None, pairs: tuple[str, ...], max_bytes: int) -> dict[str, Any] | None:
    """The partial plan ``--plan`` names, with ``--set``'s assignments over it (None: no change)."""
    base: dict[str, Any] | None = None
    if path is not None:
        data = parse_plan_text(read_plan_file(Path(path), max_bytes), path)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidRequest(f"--plan {path}: a partial plan is a mapping of the fields to change",
                                 details=[{"field": "--plan", "message": "not a mapping"}])
        base = data
    return assignments(pairs, base) if pairs else base


@click.command()
@click.argument("plan_id")
@click.option("--from", "from_phase", required=True, metavar="PHASE",
              help="Run anew from this phase (a key, e.g. r2.dana or synthesis; for a board also a round: r2).")
@click.option("--set", "pairs", multiple=True, metavar="PATH=VALUE",
              help="Change one field of the plan, e.g. experts[1].model=gpt or question='…' (repeatable).")
@click.option("--plan", "override_file", metavar="FILE", help="A partial plan (YAML/JSON) merged over the source's.")
@click.option("--json", "as_json", is_flag=True, help="Print what was forked as JSON.")
@remote
@tenant
@errors
def fork(plan_id: str, from_phase: str, pairs: tuple[str, ...], override_file: str | None, as_json: bool,
         url: str | None, token: str | None, tenant: str | None) -> None:
    """Fork PLAN_ID from a phase with some changes: prints the new plan's id. Phases before it whose
    inputs and configuration are unchanged are reused (no cost); the rest run."""
    settings = common.settings()
    configure(settings, "WARNING")
    tenant = common.scope(tenant, url)
    common.banner(settings, url, tenant)
    overrides = read_overrides(override_file, pairs, settings.max_plan_bytes)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        res = conclave.fork(plan_id, from_phase, overrides)
    if as_json:
        click.echo(json.dumps(asdict(res)))  # what the API answers
        return
    click.echo(res.plan_id)
    err.print(escape(f"forked from {res.source} at {res.from_phase}: {len(res.reused)} phase(s) reused"
                     + (f" ({', '.join(res.reused)})" if res.reused else "")
                     + (f"; {len(res.rerun)} before it run anyway, their inputs changed ({', '.join(res.rerun)})"
                        if res.rerun else "")), highlight=False)
    if settings.embedded and not url:
        err.print("[yellow]embedded mode: no worker outlives this command; `conclave resume ID --follow` runs "
                  "it[/yellow]")


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@remote
@tenant
@errors
def diff(a: str, b: str, as_json: bool, url: str | None, token: str | None, tenant: str | None) -> None:
    """Compare plans A and B: decisions, the final texts (a line diff), reused vs re-run phases, cost."""
    settings = common.settings()
    configure(settings, "ERROR")
    tenant = common.scope(tenant, url)
    with common.client(settings, worker=False, url=url, token=token, tenant=tenant) as conclave, \
            Looking(settings, url, tenant):
        found = conclave.diff(a, b)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2))
        return
    for line in comparison_lines(found):
        Console(soft_wrap=True, highlight=False).print(line)


def comparison_lines(c: Comparison) -> list[str]:
    """The comparison as terminal lines (rich markup; every value escaped)."""
    out = [_side_line("A", c.a), _side_line("B", c.b), ""]
    agree = ("" if c.same_answer is None else "  (the same winner)" if c.same_answer
             else "  [yellow](they differ)[/yellow]")
    out.append("[bold]decision[/bold]" + agree)
    for name, side in (("A", c.a), ("B", c.b)):
        d = side.decision
        if d is None:
            out.append(f"  {name}: none")
            continue
        margin = "" if d.margin is None else f", margin {d.margin:g}"
        votes = "; ".join(f"{v['expert']}: {v['answer'] if not v.get('abstained') else 'abstained'}"
                          for v in d.votes)
        out.append(escape(f"  {name}: {d.key} ({d.protocol}{margin})" + (f" — {votes}" if votes else "")))
    out += ["", "[bold]phases[/bold]  (A | B)"]
    for row in c.phases:
        same = " shared" if row.shared else " same text" if row.same_text else " differs" if row.same_text is False \
            else ""
        out.append(escape(f"  {row.key:<24} {_phase(row.a):<28} | {_phase(row.b):<28}{same}"))
    out += ["", "[bold]final text[/bold] (A → B)"]
    if not c.text_diff:
        out.append("  the same" if c.a.result is not None else "  neither has one yet")
    for line in c.text_diff:
        style = "green" if line.startswith("+") and not line.startswith("+++") else \
            "red" if line.startswith("-") and not line.startswith("---") else "dim"
        out.append(f"[{style}]{escape(line)}[/{style}]")
    return out


def _side_line(name: str, s: Side) -> str:
    cost = "" if s.cost_usd is None else f", {dollars(s.cost_usd)}"
    fork = f"  fork of {s.forked_from['plan_id']} from {s.forked_from['phase']}" if s.forked_from else ""
    return escape(f"{name}: {s.id}  [{s.status}]  {s.title}  — {s.total_tokens:,} tokens{cost}, {s.calls} call(s), "
                  f"{s.ran} phase(s) run, {s.reused} reused{fork}")


def _phase(p: Any) -> str:
    if p is None:
        return "—"
    if p.reused_from:
        return f"reused from {p.reused_from[:8]}"
    return f"{p.status} (attempt {p.attempt}, {p.total_tokens:,} tok)"
