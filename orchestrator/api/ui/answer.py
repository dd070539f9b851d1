"""The top of the plan page, what the person who asked reads first: the panel's decision
(when the plan declares its answer), then the result — the synthesis or the board's final
summary — rendered from its Markdown (:mod:`~orchestrator.api.ui.markdown`) with its
citations as links, and the result's Markdown to copy or download as it is stored.

Until the result is written the section says so and what it waits for; the script fetches
it again (``GET /ui/plans/{id}/answer``) when the result's phase completes or the plan ends.
"""

from __future__ import annotations

from markupsafe import Markup

from orchestrator.api.ui.html import join
from orchestrator.api.ui.markdown import render
from orchestrator.api.ui.snapshot import PlanSnapshot, Text
from orchestrator.plan.views import PlanView
from storage.status import PlanStatus

RESULT_NAMES = {"synthesis": "Synthesis", "final_summary": "Final summary"}


def answer_section(snap: PlanSnapshot, result: Text | None) -> Markup:
    view = snap.view
    if result is not None:
        name = RESULT_NAMES.get(result.kind, "Result")
        if view.status == PlanStatus.AWAITING_APPROVAL:  # written, not yet approved: it has not gone out
            name += " · draft, awaiting approval"
        body = Markup(
            '<div class="answer-head"><h2>Answer</h2><span class="from">{name} · '
            '<a href="#phase-{key}">{key}</a></span>'
            '<div class="actions"><button type="button" id="copy-result" data-state="idle">Copy Markdown</button>'
            '<a id="download-result" class="button" href="/ui/plans/{plan}/result.md" download>Download .md</a>'
            '</div></div>{decision}'
            '<div id="synthesis" class="markdown" data-ready="true">{text}</div>'
            '<p class="hint">Phase citations like <code>[r1.dana]</code> lead to the phase in the meeting below; '
            'briefing citations like <code>[memo:2]</code> open the passage beside the text.</p>'
        ).format(name=name, key=result.key, plan=view.id, decision=decision_record(view),
                 text=render(result.text, phases=result.phases, citations=result.citations, heading_base=1))
        ready = "true"
    else:
        body = Markup('<div class="answer-head"><h2>Answer</h2></div>{decision}{why}').format(
            decision=decision_record(view), why=waiting_line(snap))
        ready = "false"
    return Markup('<section id="answer" class="answer" data-ready="{ready}">{body}</section>').format(
        ready=ready, body=body)


def waiting_line(snap: PlanSnapshot) -> Markup:
    """What the answer section says while there is no answer; a live refresh replaces it, so
    its count of phases done keeps up with the meeting's."""
    return Markup('<p class="waiting" id="answer-waiting">{}</p>').format(_waiting(snap))


def _waiting(snap: PlanSnapshot) -> str:
    view = snap.view
    if not view.final:
        what = f"{snap.terminal} is written" if snap.terminal else "the result is written"
        return f"The answer appears here when {what} — {view.done} of {len(view.phases)} phases done so far."
    return f"This plan ended {view.status.replace('_', ' ')} before its answer was written."


def decision_record(view: PlanView) -> Markup:
    """The panel's decision as the tally stored it: the winner, the margin, how a tie was
    broken, every vote with its weight, and whether the chair states the same answer."""
    d = view.decision
    if d is None:
        return Markup("")
    chair = d.get("chair") or {}
    said = Markup("")
    if chair.get("failed"):
        said = Markup('<p class="warning" data-role="chair">The chair failed on every model (<code>{}</code>): '
                      'the decision record is the result.</p>').format(chair["failed"].get("code"))
    elif chair.get("matches") is False:
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
    table = Markup('<details class="votes-box"{open}><summary>Every vote</summary><table class="votes"><thead><tr>'
                   '<th>expert</th><th>answer</th><th>confidence</th><th>weight</th><th>reason</th></tr></thead>'
                   '<tbody>{votes}</tbody></table></details>').format(
        votes=votes, open=Markup(" open") if len(d.get("votes") or []) <= 5 else "") if d.get("votes") else Markup("")
    scores = join(Markup('<span class="score" data-key="{k}">{k} <b>{s}</b></span>').format(
        k=c.get("key"), s=f"{c.get('score', 0):g}") for c in d.get("candidates") or [])
    scored = Markup('<p class="scores">scores: {}</p>').format(scores) if d.get("candidates") else Markup("")
    answer = d.get("key") if d.get("key") is not None else "no answer"
    return Markup('<section id="decision" class="decision" data-protocol="{p}" data-answer="{a}"><h3>Decision '
                  '<span class="protocol">{p}</span></h3><p class="winner"><b>{a}</b> · {facts}</p>{scored}{said}'
                  '{table}</section>').format(p=d.get("protocol"), a=answer, facts=", ".join(facts), scored=scored,
                                             said=said, table=table)
