"""The comparison page (``/ui/plans/{a}/diff/{b}``): two plans side by side — typically a what-if
fork beside its source (its plan page links here) — from :mod:`orchestrator.plan.plan_diff`:

- each plan: title, status, where it was forked from, tokens, dollars, model calls, the phases it
  ran and those it reused at no cost;
- the decision records, side by side: the winner, the protocol and margin, every vote, the chair;
- the final texts (Markdown, as stored), line by line, side by side: lines only A has, lines only
  B has, lines both have;
- every phase: what each plan did with it (ran, on which attempt, with how many tokens; reused
  from which plan) and whether their texts are one shared content, the same, or different.

Everything is escaped (:mod:`markupsafe`); no script runs on it.
"""

from __future__ import annotations

import difflib

from markupsafe import Markup

from orchestrator.api.ui.html import badge, count, join, page
from orchestrator.plan.plan_diff import Comparison, Decision, PhaseSide, Side
from orchestrator.plan.spending import dollars
from storage.identity import Principal

MAX_LINES = 2000  # lines of each text shown side by side


def diff_page(c: Comparison, *, viewer: Principal | None, auth: bool) -> str:
    body = Markup(
        '<section class="diff" data-a="{a}" data-b="{b}"><h1>Two plans side by side</h1>'
        '<div class="sides">{side_a}{side_b}</div>'
        '<h2>Decision</h2>{agree}<div class="sides">{dec_a}{dec_b}</div>'
        '<h2>Final text</h2>{text}'
        '<h2>Phases</h2>{phases}</section>'
    ).format(a=c.a.id, b=c.b.id, side_a=_side("A", c.a), side_b=_side("B", c.b), agree=_agree(c),
             dec_a=_decision("A", c.a.decision), dec_b=_decision("B", c.b.decision), text=_text(c),
             phases=_phases(c))
    return page(f"{c.a.title} vs {c.b.title}", body, viewer=viewer, auth=auth)


def _side(name: str, s: Side) -> Markup:
    cost = dollars(s.cost_usd) if s.cost_usd is not None else "unpriced"
    fork = Markup("")
    if s.forked_from:
        source = str(s.forked_from["plan_id"])
        fork = Markup('<p class="forked">forked from <a href="/ui/plans/{p}"><code>{short}</code></a> at '
                      '<code>{at}</code></p>').format(p=source, short=source[:8], at=s.forked_from["phase"])
    return Markup(
        '<div class="side" data-side="{name}"><h3>{name} · <a href="/ui/plans/{id}">{title}</a> {badge}</h3>'
        '<p class="plan-id"><code>{id}</code></p>{fork}'
        '<dl class="facts"><div><dt>tokens</dt><dd class="tokens">{tokens}</dd></div>'
        '<div><dt>cost</dt><dd class="cost">{cost}</dd></div>'
        '<div><dt>model calls</dt><dd>{calls}</dd></div>'
        '<div><dt>phases run</dt><dd class="ran">{ran}</dd></div>'
        '<div><dt>reused, no cost</dt><dd class="reused-count">{reused}</dd></div></dl></div>'
    ).format(name=name, id=s.id, title=s.title, badge=badge(s.status), fork=fork, tokens=count(s.total_tokens),
             cost=cost, calls=count(s.calls), ran=s.ran, reused=s.reused)


def _agree(c: Comparison) -> Markup:
    if c.same_answer is None:
        return Markup("")
    return Markup('<p class="agree" data-same="{v}">{text}</p>').format(
        v=str(c.same_answer).lower(), text="Both decided the same." if c.same_answer else "They decided differently.")


def _decision(name: str, d: Decision | None) -> Markup:
    if d is None:
        return Markup('<div class="side decision" data-side="{n}"><p class="none">No decision recorded.</p></div>'
                      ).format(n=name)
    votes = join(Markup('<li>{e}: {a}{conf}</li>').format(
        e=v.get("expert"), a="abstained" if v.get("abstained") else v.get("answer"),
        conf="" if v.get("confidence") is None or v.get("abstained") else f" ({float(v['confidence']):.2f})")
        for v in d.votes)
    chair = d.chair or {}
    said = Markup('<p class="chair">the chair: {a}{m}</p>').format(
        a=chair.get("answer"), m="" if chair.get("matches") is None else
        (" (matches)" if chair.get("matches") else " (does not match)")) if chair else Markup("")
    margin = "" if d.margin is None else f", margin {d.margin:g}"
    return Markup('<div class="side decision" data-side="{n}"><p class="winner">decided: <b>{k}</b> '
                  '<span class="how">({p}{m})</span></p><ul class="votes">{votes}</ul>{chair}</div>').format(
        n=name, k="no answer" if d.key is None else d.key, p=d.protocol, m=margin, votes=votes, chair=said)


def _text(c: Comparison) -> Markup:
    a, b = c.a.result, c.b.result
    if a is None and b is None:
        return Markup('<p class="none">Neither plan has written its answer yet.</p>')
    if a == b:
        return Markup('<p class="same-text">The same text.</p>')
    left, right = (a or "").splitlines()[:MAX_LINES], (b or "").splitlines()[:MAX_LINES]
    rows = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, left, right, autojunk=False).get_opcodes():
        if tag == "equal":
            rows += [_row("same", left[i], right[j]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]
            continue
        olds, news = left[i1:i2], right[j1:j2]
        for k in range(max(len(olds), len(news))):
            rows.append(_row("changed" if k < len(olds) and k < len(news) else "only-a" if k < len(olds)
                             else "only-b", olds[k] if k < len(olds) else None, news[k] if k < len(news) else None))
    return Markup('<table class="text-diff"><thead><tr><th>A</th><th>B</th></tr></thead><tbody>{}</tbody></table>'
                  ).format(join(rows))


def _row(kind: str, a: str | None, b: str | None) -> Markup:
    cell = Markup('<td class="{c}">{t}</td>')
    return Markup('<tr class="{k}">{a}{b}</tr>').format(
        k=kind, a=cell.format(c="del" if kind in ("changed", "only-a") else "", t="" if a is None else a),
        b=cell.format(c="add" if kind in ("changed", "only-b") else "", t="" if b is None else b))


def _phases(c: Comparison) -> Markup:
    rows = join(Markup('<tr data-key="{k}"><td><code>{k}</code></td><td>{a}</td><td>{b}</td><td class="{cls}">{s}'
                       '</td></tr>').format(k=r.key, a=_phase(r.a), b=_phase(r.b),
                                            cls="shared" if r.shared else "same" if r.same_text else "",
                                            s="one shared text" if r.shared else "the same text" if r.same_text
                                            else "different texts" if r.same_text is False else "—")
                for r in c.phases)
    return Markup('<table class="phase-diff"><thead><tr><th>phase</th><th>A</th><th>B</th><th>text</th></tr></thead>'
                  '<tbody>{}</tbody></table>').format(rows)


def _phase(p: PhaseSide | None) -> Markup:
    if p is None:
        return Markup('<span class="none">—</span>')
    if p.reused_from:
        return Markup('<span class="reused">reused from <a href="/ui/plans/{s}"><code>{short}</code></a>, no cost'
                      '</span>').format(s=p.reused_from, short=p.reused_from[:8])
    cost = "" if not p.cost_usd else f", {dollars(p.cost_usd)}"
    return Markup('{badge} attempt {n} · {t} tokens{c}').format(badge=badge(p.status), n=p.attempt,
                                                              t=count(p.total_tokens), c=cost)
