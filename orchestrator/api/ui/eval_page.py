"""An evaluation's page: its report (:func:`orchestrator.evaluation.report.build_report`) as
tables and inline SVG plots, rendered on the server like the plan page and with its shell.

Whatever serves it only reads the stored eval and its outcomes and calls
``eval_page(build_report(record, outcomes), viewer=…, auth=…)``; the page needs no script
and no other request. What it shows, top to bottom: one row per arm (items, accuracy with
its 95 % interval, the theory of a simulated arm beside it and whether it lies inside, cost
per item and per correct answer, failed plans); the plots — accuracy with interval whiskers
(a diamond for the theory), tokens per item against accuracy, flip rates per round
transition; each arm paired against each baseline; the panels' figures; the flips; and the
reviews' position and self-preference bias. Every table cell carries ``data-figure`` (its
JSON key in the report) so a test reads the page as it reads the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup

from orchestrator.api.ui.html import count, join, page
from orchestrator.api.ui.plots import (
    Bar,
    BarGroup,
    IntervalRow,
    Point,
    bar_plot,
    interval_plot,
    pct,
    pct_span,
    scatter_plot,
)
from orchestrator.evaluation.figures import ArmFigures, PairFigures
from orchestrator.evaluation.report import Report
from orchestrator.evaluation.tables import dollars
from storage.identity import Principal

Cell = tuple[str, Markup | str]  # (data-figure, content)


def eval_page(report: Report, *, viewer: Principal | None, auth: bool) -> str:
    body = Markup(
        '<section class="eval" data-eval="{name}"><div class="plan-head"><h1>Eval {name}</h1></div>'
        '<p class="hint">Accuracy with its 95 % Wilson interval; a plan that did not complete counts as a wrong '
        'answer. A simulated arm shows the accuracy its model predicts beside the measured one. '
        '<a href="/ui/">Your plans</a></p>{arms}{plots}{pairs}{panels}{flips}{reviews}</section>'
    ).format(name=report.name, arms=arms_table(report.arms), plots=plots(report.arms), pairs=pairs_table(report.pairs),
             panels=panels_table(report.arms), flips=flips_table(report.arms), reviews=reviews_table(report.arms))
    return page(f"Eval {report.name}", body, viewer=viewer, auth=auth)


def _table(kind: str, title: str, headers: Sequence[str], rows: Sequence[tuple[str, Sequence[Cell]]],
           note: str = "") -> Markup:
    """A titled table; each row is (its arm, its cells)."""
    if not rows:
        return Markup("")
    head = join(Markup("<th>{}</th>").format(h) for h in headers)
    body = join(Markup('<tr data-arm="{arm}">{cells}</tr>').format(
        arm=arm, cells=join(Markup('<td data-figure="{k}">{v}</td>').format(k=k, v=v) for k, v in cells))
        for arm, cells in rows)
    hint = Markup('<p class="hint">{}</p>').format(note) if note else Markup("")
    return Markup('<section class="report-part {kind}"><h2>{title}</h2>{hint}<div class="report-scroll">'
                  '<table class="report"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
                  '</section>').format(
        kind=kind, title=title, hint=hint, head=head, body=body)


def _within(flag: bool) -> Markup:
    return Markup('<span class="within {c}">{t}</span>').format(c="in" if flag else "out",
                                                                t="inside" if flag else "outside")


def _tokens(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _dollars(value: float | None) -> str:
    return "—" if value is None else dollars(value)


def arms_table(arms: Sequence[ArmFigures]) -> Markup:
    priced = any(a.cost_usd is not None for a in arms)  # dollars only where the registry prices a model
    rows = []
    for a in arms:
        name = Markup("{}{}").format(a.name, Markup(' <span class="label">baseline</span>') if a.spec.baseline else "")
        theory: Markup | str = "—"
        if a.theory is not None:
            rule = a.theory.rule.replace("_", " ") + ("" if a.theory.exact else
                                                      ": not how this panel decides, shown for reference")
            theory = Markup('<span title="{rule}">{v}</span> {w}').format(rule=rule,
                                                                          v=("" if a.theory.exact else "~")
                                                                          + pct(a.theory.accuracy),
                                                                          w=_within(a.theory.within))
        rows.append((a.name, [("name", name), ("kind", a.spec.kind.replace("_", " ")), ("experts", str(a.spec.experts)),
                              ("items", count(a.items)), ("correct", count(a.correct)), ("accuracy", pct(a.accuracy)),
                              ("interval", pct_span(*a.interval)), ("theory", theory),
                              ("tokens_per_item", _tokens(a.tokens_per_item)),
                              ("tokens_per_correct", _tokens(a.tokens_per_correct)),
                              *([("cost_per_item", _dollars(a.cost_per_item)),
                                 ("cost_per_correct", _dollars(a.cost_per_correct))] if priced else []),
                              ("failed", count(a.failed))]))
    return _table("arms", "Arms", ["arm", "kind", "experts", "items", "correct", "accuracy", "95 % interval",
                                   "theory", "tokens / item", "tokens / correct",
                                   *(["$ / item", "$ / correct"] if priced else []), "failed"], rows)


def plots(arms: Sequence[ArmFigures]) -> Markup:
    accuracy = interval_plot(
        [IntervalRow(a.name, a.accuracy, *a.interval, theory=a.theory.accuracy if a.theory else None) for a in arms],
        title="Accuracy per arm, with 95 % intervals")
    measured = [a for a in arms if a.accuracy is not None and a.tokens_per_item is not None]
    cost = scatter_plot([Point(a.name, a.tokens_per_item or 0.0, a.accuracy or 0.0) for a in measured],
                        title="Tokens per item against accuracy", x_label="tokens per item",
                        y_label="accuracy (%)") if measured else Markup("")
    groups = [BarGroup(f"{a.name} {f.from_round}→{f.from_round + 1}", (
        Bar("right → wrong", f.pooled.right_to_wrong_rate, *f.right_to_wrong_interval),
        Bar("wrong → right", f.pooled.wrong_to_right_rate, *f.wrong_to_right_interval)))
        for a in arms if a.panel for f in a.panel.flips]
    flips = bar_plot(groups, title="Flip rates between rounds") if groups else Markup("")
    figures = [(accuracy, "Accuracy, 95 % interval whiskers; ◆ the theory of a simulated arm"),
               (cost, "Cost against accuracy: one point per arm"),
               (flips, "Flips per round transition: right → wrong of those right before, wrong → right of those "
                       "wrong before, with 95 % intervals")]
    return Markup('<section class="plots">{}</section>').format(join(
        Markup('<figure class="plot-box">{svg}<figcaption>{caption}</figcaption></figure>').format(svg=svg, caption=c)
        for svg, c in figures if svg))


def pairs_table(pairs: Sequence[PairFigures]) -> Markup:
    rows = [(p.arm, [("arm", p.arm), ("baseline", p.baseline), ("items", count(p.table.n)),
                     ("both_right", count(p.table.both_right)), ("only_arm", count(p.table.a_only)),
                     ("only_baseline", count(p.table.b_only)), ("both_wrong", count(p.table.both_wrong)),
                     ("difference", f"{100 * p.table.difference:+.1f} points"), ("p_value", f"{p.table.p_value:.3g}")])
            for p in pairs]
    return _table("paired", "Against each baseline",
                  ["arm", "baseline", "items", "both right", "only the arm", "only the baseline", "both wrong",
                   "difference", "McNemar p"], rows,
                  "On the items both arms answered; the exact McNemar test uses only the items where one was right.")


def panels_table(arms: Sequence[ArmFigures]) -> Markup:
    rows = []
    for a in arms:
        p = a.panel
        if p is None:
            continue
        t = a.theory
        votes = "—" if p.effective_votes is None else f"{p.effective_votes:.2f}"
        interval = p.effective_votes_interval
        spread = "" if interval is None else f" [{interval[0]:.2f}-{interval[1]:.2f}]"
        theory = Markup("") if t is None or t.effective_votes is None else Markup(" · theory {}{}").format(
            f"{t.effective_votes:.2f}", Markup("") if t.effective_votes_within is None else
            Markup(" {}").format(_within(t.effective_votes_within)))
        rows.append((a.name, [
            ("name", a.name), ("lost", f"{p.lost} of {p.present}"), ("lost_rate", pct(p.lost_rate)),
            ("agreement", pct(p.agreement)),
            ("rounds_used", f"{p.rounds_used:.2f} of {p.rounds_planned:.2f}"),
            ("early_stop_share", pct(p.early_stop_share)), ("tokens_saved", count(p.tokens_saved)),
            ("effective_votes", Markup("{}{}{}").format(votes, spread, theory))]))
    return _table("panels", "Panels", ["arm", "lost / present", "lost", "agreement", "rounds used", "stopped early",
                                       "tokens saved", "effective votes"], rows,
                  "Lost: the right answer was given by some expert in some round, and the arm's answer is wrong. "
                  "Effective votes: from the experts' round-1 correctness, n / (1 + (n - 1)·mean correlation), "
                  "with its 95 % interval (a jackknife over the items).")


def flips_table(arms: Sequence[ArmFigures]) -> Markup:
    rows = []
    for a in arms:
        if a.panel is None:
            continue
        expected = a.theory.flips if a.theory else None
        for f in a.panel.flips:
            t = expected if f.from_round == 1 else None
            rows.append((a.name, [
                ("name", a.name), ("rounds", f"{f.from_round} → {f.from_round + 1}"),
                ("right_to_wrong", f"{f.pooled.right_to_wrong} of {f.pooled.right_before}"),
                ("right_to_wrong_rate", pct(f.pooled.right_to_wrong_rate)),
                ("right_to_wrong_interval", pct_span(*f.right_to_wrong_interval)),
                ("theory_right_to_wrong", "—" if t is None else Markup("{} {}").format(
                    pct(t.right_to_wrong_rate), _within(t.right_to_wrong_within))),
                ("wrong_to_right", f"{f.pooled.wrong_to_right} of {f.pooled.wrong_before}"),
                ("wrong_to_right_rate", pct(f.pooled.wrong_to_right_rate)),
                ("wrong_to_right_interval", pct_span(*f.wrong_to_right_interval)),
                ("theory_wrong_to_right", "—" if t is None else Markup("{} {}").format(
                    pct(t.wrong_to_right_rate), _within(t.wrong_to_right_within)))]))
    return _table("flips", "Flips between rounds",
                  ["arm", "rounds", "right → wrong", "rate", "95 % interval", "theory", "wrong → right", "rate",
                   "95 % interval", "theory"], rows,
                  "Each expert's answer from one round to the next; the intervals count an item's experts as one "
                  "cluster.")


def reviews_table(arms: Sequence[ArmFigures]) -> Markup:
    rows = []
    for a in arms:
        r = a.panel.reviews if a.panel else None
        if r is None:
            continue
        s = r.self_preference
        t = a.theory.reviews if a.theory else None
        rows.append((a.name, [
            ("name", a.name), ("reviews", count(r.reviews)),
            ("observed", pct(r.position.observed)), ("expected", pct(r.position.expected)),
            ("interval", pct_span(*r.position.interval)),
            ("theory", "—" if t is None else Markup("{} {}").format(pct(t.first_rate), _within(t.within))),
            ("estimated_bias", f"{r.estimated_bias:.2f}"), ("p_value", f"{r.position.p_value:.3g}"),
            ("self_first", "—" if s is None else f"{s.self_first} of {s.reviews}"),
            ("rate", "—" if s is None else pct(s.rate)), ("self_expected", "—" if s is None else pct(s.expected))]))
    return _table("reviews", "Reviews",
                  ["arm", "reviews", "first shown ranked first", "by chance", "95 % interval", "theory",
                   "estimated bias", "p", "own ranked first",
                   "rate", "by chance"], rows,
                  "Position bias: how often the answer shown first was ranked first; the estimated bias is the "
                  "share of reviews that ranked it first whatever it said. Self-preference: how often a "
                  "reviewer shown its own answer ranked it first.")
