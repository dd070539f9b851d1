"""The plan page (``/ui/plans/{id}``) and its live fragment (``/ui/plans/{id}/live``).

The server renders the page as the database has it, the answer first
(:mod:`~orchestrator.api.ui.answer`: the decision, the result rendered from Markdown),
then the meeting: the overview (status, usage, timings) and the phase graph — one row
per depth of the dependency graph, a card per phase with its expert, status, attempt,
tokens and time, the start of its text (Markdown, rendered) and, once written, "Read the
full text". A divergence check's card shows its verdict, not its JSON. A row of four or
more phases is drawn as one group, so the lines of a large panel meet the group and not
each card; each card's lines come from the inputs it does not also have through another
(:attr:`~orchestrator.api.ui.snapshot.PlanSnapshot.drawn`).

``static/plan.js`` makes it live from the plan's event stream: text chunks go into their
phase's card as they are spoken; a stored event updates a card's status at once and has
the fragment (overview and graph, rendered by the same functions as the page) fetched
again, so debates appear when they are inserted and usage stays exact. A card's text is
the script's: a refresh keeps it. A completed phase's text, and the answer, are fetched
rendered by the server (:func:`phase_text_fragment`, ``/answer``): the script inserts no
markup but the server's.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from markupsafe import Markup

from orchestrator.api.ui.answer import answer_section, waiting_line
from orchestrator.api.ui.html import badge, count, join, moment, page, seconds
from orchestrator.api.ui.markdown import render
from orchestrator.api.ui.people_panel import awaits_a_person
from orchestrator.api.ui.snapshot import PlanSnapshot, Text, Timing
from orchestrator.plan.spending import BudgetView, dollars
from orchestrator.plan.views import PhaseView, PlanView, UsageView
from storage.identity import Principal
from storage.status import PhaseStatus


def plan_page(snap: PlanSnapshot, result: Text | None, *, viewer: Principal | None, auth: bool,
              people: Markup | None = None, notice: str | None = None) -> str:
    view = snap.view
    body = Markup(
        '<section id="plan" class="plan" data-plan="{id}" data-after="{after}" data-final="{final}" '
        'data-terminal="{terminal}">'
        '<div class="plan-head"><h1>{title}</h1>{status}'
        '<span id="live" class="live" hidden>live</span></div>'
        '<p class="plan-id">plan <code>{id}</code></p>'
        '<p id="notice" class="notice{done}" role="status"{hidden}>{notice}</p>'
        '{first}{answer}{then}'
        '<section class="meeting"><h2>The meeting</h2>{overview}{graph}</section>'
        '<aside id="document" class="document" hidden aria-label="Briefing document"><header>'
        '<h2 class="doc-title"></h2>'
        '<button type="button" class="close" aria-label="Close the document">&times;</button></header>'
        '<p class="doc-path"></p><div class="doc-text"></div></aside>'
        '</section>'
    ).format(id=view.id, after=snap.last_event_id, final=str(view.final).lower(), terminal=snap.terminal or "",
             title=view.title, status=plan_status(view), answer=answer_section(snap, result),
             first=people if people is not None and awaits_a_person(view) else Markup(""),
             then=people if people is not None and not awaits_a_person(view) else Markup(""), notice=notice or "",
             hidden=Markup("") if notice else Markup(" hidden"), done=" done" if notice else "",
             overview=overview(snap), graph=graph(snap))
    return page(view.title, body, viewer=viewer, auth=auth, script="plan.js")


def live_fragment(snap: PlanSnapshot) -> str:
    """What a refresh replaces: the plan's status, the overview, the graph, and the answer's
    waiting line (the answer itself is fetched once it is written)."""
    return str(join([plan_status(snap.view), overview(snap), waiting_line(snap), graph(snap)]))


def phase_text_fragment(text: Text) -> str:
    """A completed phase's full text, rendered, for its card (``…/phases/{key}/text``)."""
    if text.kind == "divergence":
        return str(Markup('<p class="check-raw">{}</p>').format(text.text))
    return str(render(text.text, phases=text.phases, citations=text.citations))


def plan_status(view: PlanView) -> Markup:
    return Markup('<span id="plan-status" data-status="{s}">{badge}</span>').format(s=view.status,
                                                                                    badge=badge(view.status))


def overview(snap: PlanSnapshot) -> Markup:
    view = snap.view
    facts: list[tuple[str, Markup | str]] = [("kind", view.kind)]
    if view.task_id:
        facts.append(("task id", Markup("<code>{}</code>").format(view.task_id)))
    if view.labels:
        facts.append(("labels", join((Markup('<span class="label">{}</span>').format(x) for x in view.labels), " ")))
    if view.priority:  # only what differs from the default: higher first among its tenant's held phases
        facts.append(("priority", f"{view.priority:+d}"))
    if view.forked_from:
        source, at = view.forked_from["plan_id"], view.forked_from["phase"]
        reused = sum(1 for p in view.phases if p.reused_from)
        facts.append(("forked from", Markup(
            '<a class="fork-source" href="/ui/plans/{s}"><code>{short}</code></a> at <code>{at}</code> · '
            '{n} phase(s) reused · <a class="fork-diff" href="/ui/plans/{s}/diff/{me}">compare</a>').format(
            s=source, short=source[:8], at=at, n=reused, me=view.id)))
    facts.append(("phases", f"{view.done} of {len(view.phases)} done"))
    facts.append(("created", moment(view.created_at)))
    if view.finished_at:
        facts.append(("finished", moment(view.finished_at)))
        took = (datetime.fromisoformat(view.finished_at) - datetime.fromisoformat(view.created_at)).total_seconds()
        facts.append(("took", seconds(max(0.0, took))))
    else:
        facts.append(("running for", Markup('<span class="took" data-started="{}"></span>').format(view.created_at)))
    facts.append(("tokens", usage_text(view.usage)))
    facts.append(("model calls", count(view.usage.calls)))
    if view.usage.cost_usd is not None and view.usage.calls:
        facts.append(("cost", dollars(view.usage.cost_usd)))
    if view.budget is not None:
        facts.append(("budget", budget_text(view.budget)))
    if view.usage.wasted_tokens:
        facts.append(("wasted", f"{count(view.usage.wasted_tokens)} tokens (attempts that died or were fenced)"))
    if view.cancel_requested and not view.final:
        facts.append(("cancel", "requested"))
    rows = join(Markup("<div><dt>{}</dt><dd>{}</dd></div>").format(k, v) for k, v in facts)
    error = Markup('<p class="error"><code>{code}</code> {message}</p>').format(
        code=view.error_code, message=view.error or "") if view.error_code else Markup("")
    warnings = join(Markup('<p class="warning">{}</p>').format(w) for w in view.warnings)
    return Markup('<div id="overview" class="overview"><dl class="facts">{rows}</dl>{error}{warnings}'
                  '</div>').format(rows=rows, error=error, warnings=warnings)


def verdict_line(phase: PhaseView) -> Markup:
    """An expert's verdict on its card (the decision's card shows the winner)."""
    v = phase.verdict
    if phase.stand_in:
        return Markup('<p class="warning stand-in" data-role="stand-in">Written by code, not by a model: every '
                      'model failed (<code>{}</code>); these are the experts\' own words, gathered.</p>').format(
            phase.stand_in.get("code"))
    if not v:
        return Markup("")
    if phase.kind == "decision":
        return Markup('<p class="verdict" data-answer="{a}">decided: <b>{a}</b></p>').format(
            a=v.get("key") if v.get("key") is not None else "no answer")
    if v.get("answer") is None:
        return Markup('<p class="verdict abstained">abstained: {}</p>').format(v.get("abstained") or "")
    return Markup('<p class="verdict" data-answer="{a}">verdict: <b>{a}</b> · {c} — {r}</p>').format(
        a=v.get("answer"), c=f"{v.get('confidence', 0):.2f}", r=v.get("reason") or "")


def budget_text(b: BudgetView) -> str:
    """What the plan spent of its budget (waste included, as the budget counts) and what is left."""
    parts = []
    if b.usd is not None:
        spent = "unpriced calls" if b.spent_usd is None else dollars(b.spent_usd)
        left = "" if b.remaining_usd is None else f", {dollars(b.remaining_usd)} left"
        parts.append(f"{spent} of {dollars(b.usd)}{left}")
    if b.max_tokens is not None:
        parts.append(f"{count(b.spent_tokens)} of {count(b.max_tokens)} tokens, {count(b.remaining_tokens or 0)} left")
    return "; ".join(parts)


def usage_text(u: UsageView) -> str:
    text = f"{count(u.total_tokens)} ({count(u.input_tokens)} in, {count(u.output_tokens)} out)"
    if u.estimated:
        text += ", estimated" if u.provider_tokens == 0 else f", {count(u.estimated_tokens)} estimated"
    return text


#: A row of this many phases or more is drawn as one group: lines meet the group, not each card.
GROUPED = 4


def graph(snap: PlanSnapshot) -> Markup:
    levels = snap.levels
    drawn = snap.drawn
    rows: dict[int, list[PhaseView]] = {}
    for phase in snap.view.phases:
        rows.setdefault(levels.get(phase.key, 0), []).append(phase)
    body = join(_level(n, phases, snap, drawn) for n, phases in sorted(rows.items()))
    return Markup('<div id="graph" class="graph"><svg class="edges" aria-hidden="true"></svg>{}</div>').format(body)


def _level(n: int, phases: list[PhaseView], snap: PlanSnapshot, drawn: dict[str, list[str]]) -> Markup:
    cards = join(card(p, snap.timings.get(p.key, Timing(None, None)), terminal=p.key == snap.terminal,
                      drawn=drawn.get(p.key, []), view=snap.view) for p in phases)
    if len(phases) < GROUPED:
        return Markup('<div class="level" data-level="{n}">{cards}</div>').format(n=n, cards=cards)
    done = sum(1 for p in phases if p.status == PhaseStatus.COMPLETED)
    kinds = {p.kind for p in phases}
    rounds = {p.round for p in phases}
    what = "phases" if len(kinds) > 1 else phases[0].kind.replace("_", " ") + "s"
    if len(rounds) == 1 and phases[0].round is not None:  # a review round is named so, beside its round's turns
        what = f"round {phases[0].round}" if kinds == {"turn"} else f"{what} · round {phases[0].round}"
    return Markup('<div class="level grouped" data-level="{n}"><p class="group-head">{what} · {count} in parallel · '
                  '{done} done</p><div class="group-cards">{cards}</div></div>').format(
        n=n, what=what, count=len(phases), done=done, cards=cards)


def card(phase: PhaseView, timing: Timing, *, terminal: bool = False, drawn: list[str] | None = None,
         view: PlanView | None = None) -> Markup:
    kind = phase.kind.replace("_", " ") + (f" · round {phase.round}" if phase.round is not None else "")
    took = _took(phase, timing)
    error = Markup('<p class="error"><code>{code}</code> {message}</p>').format(
        code=phase.error_code, message=phase.error or "") if phase.error_code else Markup("")
    check = phase.kind == "divergence"
    if check:
        body = check_verdict(phase, view)
        more = Markup("")
    else:
        body = render(phase.summary) if phase.summary else Markup("")
        more = Markup('<button type="button" class="more" aria-expanded="false">Read the full text</button>') \
            if phase.status == PhaseStatus.COMPLETED else Markup("")
    title = phase.expert or phase.kind.replace("_", " ")  # its round is in the facts line below
    if phase.human:  # a person's seat: who answered it, or that it waits for them
        by = (phase.answered_by or {}).get("name")
        kind += f" · a person{f' ({by})' if by else ''}"
    if phase.reused_from:  # copied from a fork's source: never run here, no cost here
        ran = Markup('<span class="reused">reused from <a href="/ui/plans/{s}#phase-{key}"><code>{short}</code></a>'
                     '</span> · no cost').format(s=phase.reused_from, short=phase.reused_from[:8], key=phase.key)
    else:
        ran = Markup('<span class="attempt">attempt {attempt}</span> · <span class="tokens">{tokens} tokens</span> · '
                     '{took}').format(attempt=phase.attempt, tokens=count(phase.usage.total_tokens), took=took)
    if phase.model:  # the model that wrote it; a fallback is named as such, with what failed first
        ran += Markup(' · <span class="model{fb}" data-role="model">{m}{why}</span>').format(
            fb=" fallback" if phase.fell_back_from else "", m=phase.model,
            why=Markup(" (fallback: {} failed)").format(", ".join(phase.fell_back_from)) if phase.fell_back_from
            else "")
    return Markup(
        '<article class="phase status-{status}{terminal}{human}{reused}" id="phase-{key}" data-key="{key}" '
        'data-kind="{kindname}" data-status="{status}" data-attempt="{attempt}" data-deps="{deps}" '
        'data-drawn="{drawn}">'
        '<header><span class="who">{title}</span>{badge}</header>'
        '<p class="facts"><a class="key" href="#phase-{key}">{key}</a> · {kind} · {ran}'
        '{truncated}</p>{error}{verdict}{check}'
        '<div class="text markdown" data-state="summary">{body}</div>{more}</article>'
    ).format(status=phase.status, terminal=" terminal" if terminal else "", human=" human" if phase.human else "",
             reused=" reused" if phase.reused_from else "", key=phase.key, kindname=phase.kind,
             attempt=phase.attempt, deps=" ".join(phase.depends_on), drawn=" ".join(drawn or []), title=title,
             badge=badge(phase.status, data_role="status"), kind=kind,
             ran=ran, truncated=Markup(' · <span class="truncated">truncated</span>') if phase.truncated else "",
             error=error, verdict=verdict_line(phase), check=body if check else Markup(""),
             body=Markup("") if check else body, more=more)


def check_verdict(phase: PhaseView, view: PlanView | None) -> Markup:
    """What a divergence check decided, in words, and what the plan did about it (the
    check's text is a JSON verdict; :func:`orchestrator.plan.debates.parse_verdict` reads it)."""
    if phase.status != PhaseStatus.COMPLETED:
        return Markup("")
    verdict = _json_object(phase.summary or "")
    if verdict is None:
        return Markup('<div class="check" data-diverged="unknown"><p>No usable verdict: no debate.</p></div>')
    method = " (compared Position lines)" if verdict.get("method") == "lexical" else ""
    if not verdict.get("diverged"):
        return Markup('<div class="check" data-diverged="false"><p><b>No material disagreement</b>{m}: the plan '
                      'goes on.</p></div>').format(m=method)
    who = " and ".join(str(x) for x in verdict.get("participants") or []) or "the experts"
    debaters = [p for p in (view.phases if view else []) if p.kind == "debate"
                and p.key.startswith(f"debate-{phase.key}.")]
    if debaters:
        then = Markup("A debate was inserted: {}.").format(join(
            (Markup('<a href="#phase-{k}">{e}</a>').format(k=d.key, e=d.expert or d.key) for d in debaters), " ↔ "))
    else:
        then = Markup("No debate: the plan's <code>max_debates</code> is reached.")
    return Markup('<div class="check" data-diverged="true"><p><b>{who} disagree</b>{m} on {topic}.</p>'
                  '<p>{then}</p></div>').format(who=who, m=method, topic=str(verdict.get("topic") or "a point"),
                                                then=then)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        found = json.loads(text[text.index("{"): text.rindex("}") + 1])
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _took(phase: PhaseView, timing: Timing) -> Markup:
    """The phase's time: its duration once final, the time it has been running (the
    script keeps counting), or nothing yet."""
    started = timing.started_at.isoformat() if timing.started_at else ""
    finished = timing.finished_at.isoformat() if timing.finished_at else ""
    if timing.started_at and timing.finished_at and phase.status in (PhaseStatus.COMPLETED, PhaseStatus.FAILED,
                                                                      PhaseStatus.CANCELLED):
        shown = seconds(max(0.0, (timing.finished_at - timing.started_at).total_seconds()))
    elif timing.started_at and phase.status == PhaseStatus.RUNNING:
        shown, finished = "running", ""
    elif timing.started_at and phase.status == PhaseStatus.AWAITING_INPUT:  # counted while the person thinks
        shown, finished = "waiting", ""
    else:
        shown, started, finished = "not started", "", ""
    return Markup('<span class="took" data-started="{s}" data-finished="{f}">{shown}</span>').format(
        s=started, f=finished, shown=shown)
