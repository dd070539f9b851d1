"""The plan page (``/ui/plans/{id}``) and its live fragment (``/ui/plans/{id}/live``).

The server renders the page as the database has it: the overview (status, usage,
timings), the phase graph — one row per depth of the dependency graph, a card per
phase with its status, attempt, tokens and time — and empty places for the synthesis
and for a briefing document. ``static/plan.js`` makes it live from the plan's event
stream: text chunks go into their phase's card as they are spoken; a stored event
updates a card's status at once and has the fragment (overview and graph, rendered by
the same functions as the page) fetched again, so debates appear when they are
inserted and usage stays exact. A card's text is the script's: a refresh keeps it.
"""

from __future__ import annotations

from datetime import datetime

from markupsafe import Markup

from orchestrator.api.ui.html import badge, count, join, moment, page, seconds
from orchestrator.api.ui.snapshot import PlanSnapshot, Timing
from orchestrator.plan.views import PhaseView, PlanView, UsageView
from storage.identity import Principal
from storage.status import PhaseStatus


def plan_page(snap: PlanSnapshot, *, viewer: Principal | None, auth: bool) -> str:
    view = snap.view
    body = Markup(
        '<section id="plan" class="plan" data-plan="{id}" data-after="{after}" data-final="{final}" '
        'data-terminal="{terminal}">'
        '<div class="plan-head"><h1>{title}</h1>{status}'
        '<span id="live" class="live" hidden>live</span></div>'
        '<p id="notice" class="notice" role="status" hidden></p>'
        '{overview}'
        '<div class="columns"><div class="main-col">{graph}'
        '<section id="synthesis" class="synthesis" hidden><h2>Synthesis</h2>'
        '<p class="hint">Phase citations like <code>[r1.dana]</code> lead to the phase they cite; '
        'briefing citations like <code>[memo:2]</code> open the passage in its document.</p>'
        '<div class="text"></div></section></div>'
        '<aside id="document" class="document" hidden><header><h2 class="doc-title"></h2>'
        '<button type="button" class="close" aria-label="Close the document">&times;</button></header>'
        '<p class="doc-path"></p><div class="doc-text"></div></aside>'
        '</div></section>'
    ).format(id=view.id, after=snap.last_event_id, final=str(view.final).lower(), terminal=snap.terminal or "",
             title=view.title, status=plan_status(view), overview=overview(snap), graph=graph(snap))
    return page(view.title, body, viewer=viewer, auth=auth, script=True)


def live_fragment(snap: PlanSnapshot) -> str:
    """What a refresh replaces: the plan's status, the overview and the graph."""
    return str(join([plan_status(snap.view), overview(snap), graph(snap)]))


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
    if view.usage.wasted_tokens:
        facts.append(("wasted", f"{count(view.usage.wasted_tokens)} tokens (attempts that died or were fenced)"))
    if view.cancel_requested and not view.final:
        facts.append(("cancel", "requested"))
    rows = join(Markup("<div><dt>{}</dt><dd>{}</dd></div>").format(k, v) for k, v in facts)
    error = Markup('<p class="error"><code>{code}</code> {message}</p>').format(
        code=view.error_code, message=view.error or "") if view.error_code else Markup("")
    warnings = join(Markup('<p class="warning">{}</p>').format(w) for w in view.warnings)
    return Markup('<div id="overview" class="overview"><dl class="facts">{rows}</dl>{error}{warnings}{decision}'
                  '</div>').format(rows=rows, error=error, warnings=warnings, decision=decision_record(view))


def decision_record(view: PlanView) -> Markup:
    """The panel's decision as the tally stored it: the winner, the margin, how a tie was
    broken, every vote with its weight, and whether the chair states the same answer."""
    d = view.decision
    if d is None:
        return Markup("")
    chair = d.get("chair") or {}
    said = Markup("")
    if chair.get("matches") is False:
        said = Markup('<p class="error" data-role="chair">The chair\'s synthesis states <b>{}</b>, not the '
                      'tally\'s answer: flagged.</p>').format(chair.get("answer"))
    elif chair.get("matches"):
        said = Markup('<p class="agrees" data-role="chair">The chair\'s synthesis states the same answer.</p>')
    facts = [f"margin {d.get('margin', 0):g}", f"{d.get('agreement', 0):.0%} of the panel agree"]
    if d.get("abstentions"):
        facts.append(f"{d['abstentions']} abstained")
    if d.get("tie_break"):
        tb = d["tie_break"]
        facts.append(f"a tie between {', '.join(tb['between'])} broken by {tb['by']}")
    if d.get("consensus"):
        facts.append("consensus reached" if d["consensus"]["reached"] else
                     f"no consensus (threshold {d['consensus']['threshold']:.0%})")
    votes = join(Markup('<tr data-expert="{e}"><td>{e}</td><td class="answer">{a}</td><td>{c}</td><td>{w}</td>'
                        '<td>{r}</td></tr>').format(
        e=v.get("expert"), a="abstained" if v.get("abstained") else v.get("answer"),
        c=f"{v.get('confidence', 0):.2f}", w=f"{v.get('weight', 0):g}", r=v.get("abstained") or v.get("reason"))
        for v in d.get("votes") or [])
    table = Markup('<table class="votes"><thead><tr><th>expert</th><th>answer</th><th>confidence</th>'
                   '<th>weight</th><th>reason</th></tr></thead><tbody>{}</tbody></table>').format(votes) \
        if d.get("votes") else Markup("")
    scores = join(Markup('<span class="score" data-key="{k}">{k} <b>{s}</b></span>').format(
        k=c.get("key"), s=f"{c.get('score', 0):g}") for c in d.get("candidates") or [])
    scored = Markup('<p class="scores">scores: {}</p>').format(scores) if d.get("candidates") else Markup("")
    answer = d.get("key") if d.get("key") is not None else "no answer"
    return Markup('<section id="decision" class="decision" data-protocol="{p}" data-answer="{a}"><h2>Decision '
                  '<span class="protocol">{p}</span></h2><p class="winner"><b>{a}</b> · {facts}</p>{scored}{said}'
                  '{table}</section>').format(p=d.get("protocol"), a=answer, facts=", ".join(facts), scored=scored,
                                             said=said, table=table)


def verdict_line(phase: PhaseView) -> Markup:
    """An expert's verdict on its card (the decision's card shows the winner)."""
    v = phase.verdict
    if not v:
        return Markup("")
    if phase.kind == "decision":
        return Markup('<p class="verdict" data-answer="{a}">decided: <b>{a}</b></p>').format(
            a=v.get("key") if v.get("key") is not None else "no answer")
    if v.get("answer") is None:
        return Markup('<p class="verdict abstained">abstained: {}</p>').format(v.get("abstained") or "")
    return Markup('<p class="verdict" data-answer="{a}">verdict: <b>{a}</b> · {c} — {r}</p>').format(
        a=v.get("answer"), c=f"{v.get('confidence', 0):.2f}", r=v.get("reason") or "")


def usage_text(u: UsageView) -> str:
    text = f"{count(u.total_tokens)} ({count(u.input_tokens)} in, {count(u.output_tokens)} out)"
    if u.estimated:
        text += ", estimated" if u.provider_tokens == 0 else f", {count(u.estimated_tokens)} estimated"
    return text


def graph(snap: PlanSnapshot) -> Markup:
    levels = snap.levels
    rows: dict[int, list[Markup]] = {}
    for phase in snap.view.phases:
        timing = snap.timings.get(phase.key, Timing(None, None))
        rows.setdefault(levels.get(phase.key, 0), []).append(card(phase, timing, terminal=phase.key == snap.terminal))
    body = join(Markup('<div class="level" data-level="{n}">{cards}</div>').format(n=n, cards=join(cards))
                for n, cards in sorted(rows.items()))
    return Markup('<div id="graph" class="graph"><svg class="edges" aria-hidden="true"></svg>{}</div>').format(body)


def card(phase: PhaseView, timing: Timing, *, terminal: bool = False) -> Markup:
    kind = phase.kind.replace("_", " ") + (f" · round {phase.round}" if phase.round is not None else "")
    took = _took(phase, timing)
    error = Markup('<p class="error"><code>{code}</code> {message}</p>').format(
        code=phase.error_code, message=phase.error or "") if phase.error_code else Markup("")
    summary = Markup('<p class="summary">{}</p>').format(phase.summary) if phase.summary else Markup("")
    more = Markup('<button type="button" class="more">Read the full text</button>') \
        if phase.status == PhaseStatus.COMPLETED else Markup("")
    return Markup(
        '<article class="phase status-{status}{terminal}" id="phase-{key}" data-key="{key}" data-status="{status}" '
        'data-attempt="{attempt}" data-deps="{deps}">'
        '<header><a class="key" href="#phase-{key}">{key}</a>{who}{badge}</header>'
        '<p class="facts">{kind} · <span class="attempt">attempt {attempt}</span> · '
        '<span class="tokens">{tokens} tokens</span> · {took}'
        '{truncated}</p>{error}{verdict}{summary}{more}<div class="text"></div></article>'
    ).format(status=phase.status, terminal=" terminal" if terminal else "", key=phase.key, attempt=phase.attempt,
             deps=" ".join(phase.depends_on),
             who=Markup(' <span class="who">{}</span> ').format(phase.expert) if phase.expert else Markup(" "),
             badge=badge(phase.status, data_role="status"), kind=kind, tokens=count(phase.usage.total_tokens),
             took=took, truncated=Markup(' · <span class="truncated">truncated</span>') if phase.truncated else "",
             error=error, verdict=verdict_line(phase), summary=summary, more=more)


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
    else:
        shown, started, finished = "not started", "", ""
    return Markup('<span class="took" data-started="{s}" data-finished="{f}">{shown}</span>').format(
        s=started, f=finished, shown=shown)
