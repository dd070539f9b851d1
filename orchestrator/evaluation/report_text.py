"""The report as ``conclave eval`` prints it: one plain-text table per section, one row per arm
(per arm and round transition for flips), each at most 100 columns. Shares are percentages
with one decimal; a theoretical figure sits in the column after the measured one, and
``in``/``OUT`` says whether it lies in the measured 95 % interval.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.evaluation.figures import ArmFigures, PairFigures
from orchestrator.evaluation.tables import amount, decimal, dollars, grid, p_value, percent, span


def report_table(name: str, arms: Sequence[ArmFigures], pairs: Sequence[PairFigures]) -> str:
    sections = [_arms(name, arms)]
    if any(a.cost_usd is not None for a in arms):  # the registry prices the models
        sections.append(_dollars(arms))
    if pairs:
        sections.append(_pairs(pairs))
    panels = [a for a in arms if a.panel is not None]
    if panels:
        sections.append(_panels(panels))
        sections.append(_votes(panels))
    if any(a.panel.flips for a in panels if a.panel):
        sections.append(_flips(panels))
    if any(a.panel.reviews for a in panels if a.panel):
        sections.append(_reviews(panels))
    return "\n\n".join(sections) + "\n"


def within(flag: bool) -> str:
    return "in" if flag else "OUT"


def _arms(name: str, arms: Sequence[ArmFigures]) -> str:
    rows = []
    for a in arms:
        theory = "-" if a.theory is None else (
            f"{'' if a.theory.exact else '~'}{percent(a.theory.accuracy)} {within(a.theory.within)}")
        rows.append([a.name + (" *" if a.spec.baseline else ""), a.spec.kind.replace("self_consistency", "self-cons"),
                     str(a.items), str(a.correct), percent(a.accuracy), span(a.interval), amount(a.tokens_per_item),
                     amount(a.tokens_per_correct), str(a.failed), theory])
    return grid(f"eval {name} (* baseline; accuracy, 95 % interval in %; ~ plurality's theory, for reference)",
                ["arm", "kind", "items", "right", "acc", "95% CI", "tok/item", "tok/right", "failed", "theory"], rows)


def _dollars(arms: Sequence[ArmFigures]) -> str:
    rows = [[a.name, amount(a.tokens), dollars(a.cost_usd), dollars(a.cost_per_item), dollars(a.cost_per_correct)]
            for a in arms]
    return grid("cost (US dollars at the registry's prices when each call was made; - where a call had no price)",
                ["arm", "tokens", "dollars", "$/item", "$/right"], rows)


def _pairs(pairs: Sequence[PairFigures]) -> str:
    rows = [[p.arm, p.baseline, str(p.table.n), str(p.table.both_right), str(p.table.a_only), str(p.table.b_only),
             str(p.table.both_wrong), f"{100 * p.table.difference:+.1f}", p_value(p.table.p_value)] for p in pairs]
    return grid("paired against each baseline (difference in points; exact McNemar p)",
                ["arm", "baseline", "items", "both", "arm only", "base only", "neither", "diff", "p"], rows)


def _panels(arms: Sequence[ArmFigures]) -> str:
    rows = []
    for a in arms:
        p = a.panel
        assert p is not None
        rows.append([a.name, f"{p.lost}/{p.present}", percent(p.lost_rate), percent(p.agreement),
                     f"{p.rounds_used:.2f}/{p.rounds_planned:.2f}", percent(p.early_stop_share),
                     amount(p.tokens_saved)])
    return grid("panels (lost: right answer present, arm's answer wrong; agreement of the last round)",
                ["arm", "lost/present", "lost", "agree", "rounds/planned", "early", "tok saved"], rows)


def _votes(arms: Sequence[ArmFigures]) -> str:
    rows = []
    for a in arms:
        p = a.panel
        assert p is not None
        t = a.theory
        theory = "-" if t is None or t.effective_votes is None else (
            decimal(t.effective_votes) + ("" if t.effective_votes_within is None
                                          else f" {within(t.effective_votes_within)}"))
        interval = p.effective_votes_interval
        rows.append([a.name, str(p.effective_votes_experts), str(p.effective_votes_items), decimal(p.effective_votes),
                     "-" if interval is None else f"{decimal(interval[0])}-{decimal(interval[1])}", theory])
    return grid("effective independent votes (from round-1 correctness; 95 % interval: a jackknife over items)",
                ["arm", "experts", "items", "eff votes", "95% CI", "theory"], rows)


def _flips(arms: Sequence[ArmFigures]) -> str:
    rows = []
    for a in arms:
        assert a.panel is not None
        expected = a.theory.flips if a.theory else None
        for f in a.panel.flips:
            t = expected if expected is not None and f.from_round == 1 else None
            rows.append([a.name, f"{f.from_round}->{f.from_round + 1}",
                         f"{f.pooled.right_to_wrong}/{f.pooled.right_before}", percent(f.pooled.right_to_wrong_rate),
                         span(f.right_to_wrong_interval),
                         "-" if t is None else f"{percent(t.right_to_wrong_rate)} {within(t.right_to_wrong_within)}",
                         f"{f.pooled.wrong_to_right}/{f.pooled.wrong_before}", percent(f.pooled.wrong_to_right_rate),
                         span(f.wrong_to_right_interval),
                         "-" if t is None else f"{percent(t.wrong_to_right_rate)} {within(t.wrong_to_right_within)}"])
    return grid("flips between rounds (each expert's answer; right->wrong of those right before)",
                ["arm", "rounds", "R->W", "%", "95% CI", "theory", "W->R", "%", "95% CI", "theory"], rows)


def _reviews(arms: Sequence[ArmFigures]) -> str:
    rows = []
    for a in arms:
        r = a.panel.reviews if a.panel else None
        if r is None:
            continue
        s = r.self_preference
        t = a.theory.reviews if a.theory else None
        rows.append([a.name, str(r.reviews), percent(r.position.observed), percent(r.position.expected),
                     span(r.position.interval), "-" if t is None else f"{percent(t.first_rate)} {within(t.within)}",
                     decimal(r.estimated_bias), p_value(r.position.p_value),
                     "-" if s is None else f"{s.self_first}/{s.reviews}",
                     "-" if s is None else percent(s.rate), "-" if s is None else percent(s.expected)])
    return grid("reviews (first shown ranked first, vs chance and theory; its bias; own answer first, vs chance)",
                ["arm", "reviews", "first", "chance", "95% CI", "theory", "bias", "p", "self-first", "self", "chance"],
                rows)
