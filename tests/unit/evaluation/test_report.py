"""The report computes every figure from hand-built outcomes with known counts, prints the
theory of a simulated arm beside the measurement (and the theory lies inside the measured
interval when the outcomes are drawn from the model it describes), and keeps its JSON keys
and its 100-column table."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from orchestrator.evaluation.comparison import compare_reports
from orchestrator.evaluation.figures import PanelFigures
from orchestrator.evaluation.outcomes import ItemOutcome
from orchestrator.evaluation.report import InvalidReportInput, Report, build_report
from orchestrator.evaluation.statistics import Z95, position_bias, wilson_interval
from orchestrator.evaluation.tables import WIDTH
from orchestrator.evaluation.theory import plurality_accuracy

EXPERTS = ("ada", "bo", "cy")


def arm(name: str, kind: str = "panel", *, baseline: bool = False, experts: int = 3,
        simulation: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "kind": kind, "baseline": baseline, "experts": experts, "simulation": simulation}


def rounds_of(*rounds: Sequence[bool | None]) -> tuple[list[dict[str, str | float | None]], list[dict[str, bool]]]:
    """Rounds given as each expert's correctness (None: an abstention): "A" is right, "B" wrong."""
    answers = [{e: None if c is None else ("A" if c else "B") for e, c in zip(EXPERTS, r, strict=True)}
               for r in rounds]
    graded = [{e: bool(c) for e, c in zip(EXPERTS, r, strict=True)} for r in rounds]
    return answers, graded


def outcome(arm_name: str, item: int, correct: bool, *, tokens: int = 1000, status: str = "completed",
            rounds: tuple[list[dict[str, Any]], list[dict[str, bool]]] = ([], []), **more: Any) -> ItemOutcome:
    return ItemOutcome(arm=arm_name, item_id=f"q{item}", expected="A", answer="A" if correct else "B",
                       correct=correct, plan_id=f"{arm_name}-{item}", status=status, tokens=tokens,
                       rounds=rounds[0], rounds_correct=rounds[1], **more)


def known() -> Report:
    """Ten items. The panel is right on 0-7 and fails on 9; the single on 0-4 and 8.

    Panel rounds: on 0-7 ada and bo right, cy wrong, then all right in round 2 — except 3,
    which stopped early after round 1; on 8 only ada was right, then ada and bo say B and cy
    abstains (the right answer was present and lost)."""
    outcomes = []
    for i in range(10):
        if i == 9:
            outcomes.append(outcome("panel", i, False, tokens=200, status="failed"))
        elif i == 8:
            outcomes.append(outcome("panel", i, False, rounds=rounds_of([True, False, False], [False, False, None]),
                                    rounds_planned=2))
        elif i == 3:
            outcomes.append(outcome("panel", i, True, rounds=rounds_of([True, True, False]), rounds_planned=2,
                                    early_stopped=True, tokens_saved=300))
        else:
            outcomes.append(outcome("panel", i, True, rounds=rounds_of([True, True, False], [True, True, True]),
                                    rounds_planned=2))
        outcomes.append(outcome("single", i, i < 5 or i == 8, tokens=100))
    record = {"name": "known", "arms": [arm("panel"), arm("single", "single", baseline=True, experts=1)]}
    return build_report(record, outcomes)


def panel_of(report: Report, name: str) -> PanelFigures:
    panel = report.arm(name).panel
    assert panel is not None
    return panel


def test_accuracy_interval_tokens_and_failures_per_arm() -> None:
    report = known()
    panel, single = report.arm("panel"), report.arm("single")
    assert (panel.items, panel.correct, panel.failed, panel.cancelled) == (10, 8, 1, 0)
    assert panel.accuracy == 0.8
    # the Wilson interval of 8/10: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    assert panel.interval == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert panel.tokens == 9 * 1000 + 200
    assert panel.tokens_per_item == 920
    assert panel.tokens_per_correct == 9200 / 8
    assert (single.correct, single.accuracy, single.tokens_per_item) == (6, 0.6, 100)
    assert single.tokens_per_correct == 1000 / 6
    assert single.panel is None and single.theory is None and panel.theory is None


def test_each_arm_is_paired_with_each_baseline_on_the_common_items() -> None:
    (pair,) = known().pairs
    t = pair.table
    assert (pair.arm, pair.baseline) == ("panel", "single")
    assert (t.both_right, t.a_only, t.b_only, t.both_wrong) == (5, 3, 1, 1)
    assert t.difference == pytest.approx(0.2)
    # b = 3, c = 1: 2·P[Bin(4, ½) ≤ 1] = 2·5/16
    assert t.p_value == 0.625


def test_paired_only_on_items_both_arms_have() -> None:
    outcomes = [outcome("a", i, True) for i in range(6)] + [outcome("base", i, False) for i in range(3, 9)]
    report = build_report({"name": "x", "arms": [arm("a"), arm("base", "single", baseline=True)]}, outcomes)
    (pair,) = report.pairs
    assert (pair.table.n, pair.table.a_only, pair.table.b_only) == (3, 3, 0)
    assert pair.table.p_value == 0.25  # 2·P[Bin(3, ½) = 0]
    # two baselines and two other arms: every arm against every baseline, never baseline against baseline
    record = {"name": "x", "arms": [arm("p1"), arm("b1", "single", baseline=True), arm("p2"),
                                    arm("b2", "self_consistency", baseline=True)]}
    assert [(p.arm, p.baseline) for p in build_report(record, []).pairs] == [
        ("p1", "b1"), ("p1", "b2"), ("p2", "b1"), ("p2", "b2")]


def test_panel_figures_lost_flips_agreement_rounds_and_early_stops() -> None:
    p = known().arm("panel").panel
    assert p is not None
    assert (p.items, p.present, p.lost) == (9, 9, 1)
    assert p.lost_rate == pytest.approx(1 / 9)
    (flips,) = p.flips
    assert flips.from_round == 1
    pooled = flips.pooled
    # eight items reach round 2 (3 stopped): 7·2 + 1 right before, 7 + 2 wrong before
    assert (pooled.right_before, pooled.right_to_wrong, pooled.wrong_before, pooled.wrong_to_right) == (15, 1, 9, 7)
    assert pooled.right_to_wrong_rate == pytest.approx(1 / 15)
    assert pooled.wrong_to_right_rate == pytest.approx(7 / 9)
    # items are clusters: 7 items flip 0 of 2 right answers, item 8 flips 1 of 1; the robust
    # variance 8/7·(7·(2/15)² + (14/15)²) over the binomial 15·(1/15)·(14/15) is the design effect
    deff = 8 / 7 * (7 * (2 / 15) ** 2 + (14 / 15) ** 2) / (14 / 15)
    assert flips.right_to_wrong_interval == pytest.approx(wilson_interval(1, 15, Z95 * math.sqrt(deff)))
    per_expert = {name: (f.right_before, f.right_to_wrong, f.wrong_before, f.wrong_to_right)
                  for name, f in flips.experts}
    assert per_expert == {"ada": (8, 1, 0, 0), "bo": (7, 0, 1, 0), "cy": (0, 0, 8, 7)}
    # last rounds: seven unanimous, item 3's round 1 (A, A, B), item 8's round 2 (B, B, abstained)
    assert p.agreement == pytest.approx((7 + 2 / 3 + 2 / 3) / 9)
    assert p.rounds_used == pytest.approx(17 / 9)
    assert p.rounds_planned == 2
    assert (p.early_stopped, p.tokens_saved) == (1, 300)
    assert p.early_stop_share == pytest.approx(1 / 9)
    # ada is always right and cy always wrong in round 1: no variance, counted uncorrelated
    assert (p.effective_votes, p.effective_votes_experts, p.effective_votes_items) == (3.0, 3, 9)
    assert p.reviews is None


def test_effective_votes_is_one_when_the_experts_always_agree_in_correctness() -> None:
    outcomes = [outcome("panel", i, i % 3 != 0, rounds=rounds_of([i % 3 != 0] * 3)) for i in range(30)]
    p = build_report({"name": "x", "arms": [arm("panel")]}, outcomes).arm("panel").panel
    assert p is not None
    assert p.effective_votes == 1.0
    assert p.flips == ()
    # an item where an expert did not answer round 1 is left out of the effective votes
    outcomes.append(outcome("panel", 99, True, rounds=([{"ada": "A"}], [{"ada": True}])))
    p = build_report({"name": "x", "arms": [arm("panel")]}, outcomes).arm("panel").panel
    assert p is not None and (p.effective_votes, p.effective_votes_items) == (1.0, 30)


def review(reviewer: str, authors: list[str], first: int, labels: str = "ABC") -> dict[str, Any]:
    shown = list(labels)
    return {"reviewer": reviewer, "labels": shown, "authors": authors,
            "ranking": [shown[first], *(x for i, x in enumerate(shown) if i != first)]}


def test_reviews_position_bias_and_self_preference() -> None:
    reviews = [
        review("ada", ["ada", "bo", "cy"], 0),   # own answer shown first, ranked first
        review("bo", ["ada", "bo", "cy"], 1),    # own answer ranked first
        review("cy", ["ada", "bo", "cy"], 0),    # shown its own, ranked another first
        review("ada", ["cy", "ada", "bo"], 0),   # shown its own, ranked another first
        review("bo", ["ada", "cy", "dee"], 2),   # exclude_self: its own not shown
        review("cy", ["ada", "bo", "dee"], 0),
        {"reviewer": "ada", "labels": ["A", "B"], "authors": ["bo", "cy"], "ranking": []},  # unreadable
    ]
    outcomes = [outcome("panel", 0, True, rounds=rounds_of([True, True, True]), reviews=reviews[:4]),
                outcome("panel", 1, True, rounds=rounds_of([True, True, True]), reviews=reviews[4:])]
    r = panel_of(build_report({"name": "x", "arms": [arm("panel")]}, outcomes), "panel").reviews
    assert r is not None
    assert (r.reviews, r.unreadable) == (6, 1)
    assert r.position == position_bias([0, 1, 0, 0, 2, 0], [3] * 6)
    assert (r.position.chose_first, r.position.expected) == (4, pytest.approx(1 / 3))
    s = r.self_preference
    assert s is not None
    assert (s.reviews, s.self_first, s.rate, s.expected) == (4, 2, 0.5, pytest.approx(1 / 3))
    # no review ever shows its reviewer's own answer: no self-preference figure
    outcomes = [outcome("panel", 0, True, rounds=rounds_of([True, True, True]), reviews=reviews[4:6])]
    r = panel_of(build_report({"name": "x", "arms": [arm("panel")]}, outcomes), "panel").reviews
    assert r is not None and r.self_preference is None


def one_factor(items: int, experts: int, skill: float, correlation: float, seed: int,
               conformity: float = 0.0) -> list[tuple[list[bool], list[bool] | None]]:
    """Each item's experts' correctness under the one-factor model on two options: a shared
    draw per item, copied by each expert with probability sqrt(correlation), else its own;
    and, with ``conformity``, a second round where each expert takes the first round's
    majority with that probability."""
    rng = random.Random(seed)
    drawn: list[tuple[list[bool], list[bool] | None]] = []
    for _ in range(items):
        shared = rng.random() < skill
        first = [shared if rng.random() < math.sqrt(correlation) else rng.random() < skill for _ in range(experts)]
        second = None
        if conformity:
            majority = sum(first) * 2 > experts
            second = [majority if rng.random() < conformity else own for own in first]
        drawn.append((first, second))
    return drawn


def simulated_panel(name: str, drawn: list[tuple[list[bool], list[bool] | None]]) -> list[ItemOutcome]:
    names = [f"expert-{i}" for i in range(len(drawn[0][0]))]
    outcomes = []
    for i, (first, second) in enumerate(drawn):
        rounds = [first] if second is None else [first, second]
        answers = [{e: "A" if c else "B" for e, c in zip(names, r, strict=True)} for r in rounds]
        graded = [dict(zip(names, r, strict=True)) for r in rounds]
        right = sum(rounds[-1]) * 2 > len(names)
        outcomes.append(ItemOutcome(arm=name, item_id=f"q{i}", expected="A", answer="A" if right else "B",
                                    correct=right, plan_id=f"{name}-{i}", status="completed", tokens=5000,
                                    rounds=answers, rounds_correct=graded, rounds_planned=len(rounds)))
    return outcomes


def test_simulated_independent_experts_reproduce_the_plurality_theory() -> None:
    sim = {"skill": 0.7, "options": 2, "correlation": 0.0, "conformity": 0.5}
    record = {"name": "sim", "arms": [arm("panel", experts=5, simulation=sim),
                                      arm("sc", "self_consistency", baseline=True, experts=5, simulation=sim),
                                      arm("single", "single", baseline=True, experts=1, simulation=sim)]}
    rng = random.Random(11)
    # one seed's draw: each 95 % interval misses its theory for about one seed in twenty
    outcomes = simulated_panel("panel", one_factor(400, 5, 0.7, 0.0, seed=4, conformity=0.5))
    outcomes += simulated_panel("sc", one_factor(400, 5, 0.7, 0.0, seed=5))  # five samples, their majority
    outcomes += [outcome("single", i, rng.random() < 0.7, tokens=1000) for i in range(400)]
    report = build_report(record, outcomes)
    panel = report.arm("panel")
    assert panel.theory is not None and panel.theory.rule == "plurality"
    assert panel.theory.accuracy == pytest.approx(0.83692)  # P[Bin(5, 0.7) >= 3]
    assert panel.theory.within
    assert panel.interval[0] <= 0.837 <= panel.interval[1]
    assert panel.theory.effective_votes == 5.0
    assert panel.panel is not None and panel.panel.effective_votes is not None
    assert panel.panel.effective_votes > 4
    flips = panel.theory.flips
    assert flips is not None
    assert flips.right_to_wrong_rate == pytest.approx(0.5 * (4 * 0.3**3 * 0.7 + 0.3**4))
    assert flips.right_to_wrong_within and flips.wrong_to_right_within
    sc_theory = report.arm("sc").theory
    assert sc_theory is not None and sc_theory.rule == "majority_of_samples"
    assert sc_theory.accuracy == pytest.approx(0.83692) and sc_theory.within
    single = report.arm("single").theory
    assert single is not None and (single.rule, single.accuracy, single.effective_votes) == ("skill", 0.7, None)
    assert single.within
    text = report.table()
    assert "83.7 in" in text and "70.0 in" in text


def test_simulated_perfectly_correlated_experts_are_one_vote() -> None:
    sim = {"skill": 0.7, "options": 2, "correlation": 1.0}
    report = build_report({"name": "sim", "arms": [arm("panel", experts=5, simulation=sim)]},
                          simulated_panel("panel", one_factor(400, 5, 0.7, 1.0, seed=5)))
    panel = report.arm("panel")
    assert panel.panel is not None and panel.theory is not None
    assert panel.panel.effective_votes == pytest.approx(1.0)
    assert panel.theory.effective_votes == 1.0
    assert panel.theory.rule == "correlated_plurality"
    assert panel.theory.accuracy == pytest.approx(0.70)
    assert panel.theory.within and panel.interval[0] < 0.70 < panel.interval[1]
    assert panel.theory.flips is None  # one round, and correlated: no closed form


def test_theory_outside_the_interval_says_so() -> None:
    sim = {"skill": 0.7, "options": 2}
    outcomes = [outcome("panel", i, i < 40) for i in range(100)]  # 40 %: far from 0.837
    theory = build_report({"name": "x", "arms": [arm("panel", experts=5, simulation=sim)]},
                          outcomes).arm("panel").theory
    assert theory is not None and not theory.within
    assert theory.flips is None  # no rounds recorded


ARM_KEYS = {"name", "kind", "baseline", "experts", "items", "correct", "accuracy", "interval", "tokens",
            "tokens_per_item", "tokens_per_correct", "cost_usd", "cost_per_item", "cost_per_correct", "failed",
            "cancelled", "panel", "theory"}
PANEL_KEYS = {"items", "present", "lost", "lost_rate", "flips", "agreement", "rounds_used", "rounds_planned",
              "early_stopped", "early_stop_share", "tokens_saved", "tokens_saved_per_item", "effective_votes",
              "effective_votes_experts", "effective_votes_items", "effective_votes_interval", "reviews"}
FLIP_KEYS = {"right_to_wrong", "wrong_to_right", "right_before", "wrong_before", "right_to_wrong_rate",
             "wrong_to_right_rate"}
THEORY_KEYS = {"simulation", "rule", "exact", "accuracy", "within", "effective_votes", "effective_votes_within",
               "flips", "reviews"}


def test_json_keys_are_the_documented_ones() -> None:
    report = known()
    data = json.loads(json.dumps(report.as_json(), allow_nan=False))
    assert set(data) == {"eval", "arms", "paired"}
    assert data["eval"] == "known"
    assert [set(a) for a in data["arms"]] == [ARM_KEYS, ARM_KEYS]
    panel = data["arms"][0]
    assert panel["interval"] == list(report.arm("panel").interval)
    assert set(panel["panel"]) == PANEL_KEYS
    (flips,) = panel["panel"]["flips"]
    assert set(flips) == FLIP_KEYS | {"from_round", "to_round", "right_to_wrong_interval", "wrong_to_right_interval",
                                      "experts"}
    assert [set(e) for e in flips["experts"]] == [FLIP_KEYS | {"expert"}] * 3
    assert data["paired"] == [{"arm": "panel", "baseline": "single", "items": 10, "both_right": 5, "only_arm": 3,
                               "only_baseline": 1, "both_wrong": 1, "difference": pytest.approx(0.2),
                               "p_value": 0.625}]
    sim = {"skill": 0.7, "options": 2, "conformity": 0.2, "seed": 4, "position_bias": 0.1}
    reviews = [review("ada", ["ada", "bo", "cy"], 0)]
    outcomes = [outcome("p", 0, True, rounds=rounds_of([True, True, False], [True, True, True]), reviews=reviews)]
    data = build_report({"name": "y", "arms": [arm("p", simulation=sim)]}, outcomes).as_json()
    theory, reviewed = data["arms"][0]["theory"], data["arms"][0]["panel"]["reviews"]
    assert set(theory) == THEORY_KEYS
    assert theory["simulation"] == {"skill": 0.7, "correlation": 0.0, "conformity": 0.2, "position_bias": 0.1,
                                    "options": 2}
    assert set(theory["reviews"]) == {"first_rate", "within"}
    assert set(theory["flips"]) == {"from_round", "to_round", "right_to_wrong_rate", "wrong_to_right_rate",
                                    "right_to_wrong_within", "wrong_to_right_within"}
    assert set(reviewed) == {"reviews", "unreadable", "position_bias", "self_preference"}
    assert set(reviewed["position_bias"]) == {"reviews", "chose_first", "observed", "expected", "excess", "interval",
                                              "p_value", "estimated_bias"}
    assert set(reviewed["self_preference"]) == {"reviews", "self_first", "rate", "expected", "interval"}
    json.dumps(data, allow_nan=False)


def test_an_arm_without_items_has_no_accuracy_but_keeps_its_keys() -> None:
    data = build_report({"name": "x", "arms": [arm("empty")]}, []).as_json()
    (empty,) = data["arms"]
    assert set(empty) == ARM_KEYS
    assert (empty["items"], empty["accuracy"], empty["interval"], empty["tokens_per_correct"]) == (0, None, [0.0, 1.0],
                                                                                                   None)


def test_the_table_has_one_row_per_arm_and_fits_in_100_columns() -> None:
    text = known().table()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    head = lines.index(next(line for line in lines if line.startswith("arm ")))
    assert lines[head + 2].split()[:6] == ["panel", "panel", "10", "8", "80.0", "49.0-94.3"]
    assert lines[head + 3].split()[:7] == ["single", "*", "single", "10", "6", "60.0", "31.3-83.2"]
    assert lines[head + 4] == ""  # two arms, two rows
    paired = next(line for line in lines if line.startswith("panel") and "single" in line and "+20.0" in line)
    assert paired.split() == ["panel", "single", "10", "5", "3", "1", "1", "+20.0", "0.625"]
    assert any(line.split()[:3] == ["panel", "1/9", "11.1"] for line in lines)
    votes = panel_of(known(), "panel")
    assert votes.effective_votes_interval is not None
    low, high = votes.effective_votes_interval
    assert any(line.split() == ["panel", "3", str(votes.effective_votes_items), f"{votes.effective_votes:.2f}",
                                f"{low:.2f}-{high:.2f}", "-"] for line in lines)
    r_to_w = "-".join(f"{100 * x:.1f}" for x in panel_of(known(), "panel").flips[0].right_to_wrong_interval)
    assert any(line.split()[:5] == ["panel", "1->2", "1/15", "6.7", r_to_w] for line in lines)
    long = "a" * 150
    text = build_report({"name": "x" * 60, "arms": [arm(long)]}, [outcome(long, 0, True)]).table()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "a" * 20 + "~" in text


def test_bad_input_is_refused_naming_the_field() -> None:
    good = [arm("p")]
    cases: list[tuple[Any, list[ItemOutcome], str]] = [
        ({"arms": good}, [], "name"),
        ({"name": "x", "arms": []}, [], "arms"),
        ({"name": "x", "arms": [arm("p", "committee")]}, [], r"arms\[0\].kind"),
        ({"name": "x", "arms": [{**arm("p"), "baseline": "no"}]}, [], r"arms\[0\].baseline"),
        ({"name": "x", "arms": [arm("p", experts=0)]}, [], r"arms\[0\].experts"),
        ({"name": "x", "arms": [arm("p", simulation={"skill": 0.7})]}, [], r"arms\[0\].simulation.options"),
        ({"name": "x", "arms": [arm("p", simulation={"skill": 1.2, "options": 2})]}, [], "simulation.skill"),
        ({"name": "x", "arms": [arm("p"), arm("p")]}, [], "used twice"),
        ({"name": "x", "arms": good}, [outcome("other", 0, True)], "not one of the eval's arms"),
        ({"name": "x", "arms": good}, [outcome("p", 0, True), outcome("p", 0, False)], "two outcomes"),
    ]
    for record, outcomes, message in cases:
        with pytest.raises(InvalidReportInput, match=message):
            build_report(record, outcomes)


def test_compare_two_runs_arm_by_arm() -> None:
    def run(name: str, correct: int, items: int, extra: str) -> Report:
        outcomes = [outcome("panel", i, i < correct) for i in range(items)]
        return build_report({"name": name, "arms": [arm("panel"), arm(extra)]}, outcomes)

    comparison = compare_reports(run("before", 48, 80, "old"), run("after", 56, 70, "new"))
    (row,) = comparison.arms
    assert row.difference == pytest.approx(0.2)
    # Newcombe (1998), example (a), method 10: 56/70 - 48/80 = 0.2, 95 % CI 0.0524 to 0.3339
    assert row.difference_interval == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert (comparison.only_a, comparison.only_b) == (("old",), ("new",))
    data = comparison.as_json()
    assert set(data) == {"a", "b", "arms", "only_a", "only_b"}
    assert set(data["arms"][0]) == {"name", "a", "b", "difference", "difference_interval"}
    assert data["arms"][0]["a"] == {"items": 80, "correct": 48, "accuracy": 0.6,
                                    "interval": list(row.a.interval)}
    text = comparison.table()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert any(line.split()[:8] == ["panel", "80", "60.0", "49.0-70.0", "70", "80.0", "69.2-87.7", "+20.0"]
               for line in text.splitlines())
    assert "only in A: old" in text and "only in B: new" in text


def biased_reviews(n: int, bias: float, shown: int, seed: int) -> list[ItemOutcome]:
    """Panels of three whose reviewers rank the first answer shown first with probability
    ``bias``, else a position drawn uniformly: the simulated solver's reviewer."""
    import random

    rng = random.Random(seed)
    names = ["ada", "bo", "cy", "di", "ed"][:shown]
    out = []
    for i in range(n):
        reviews = [review(r, names, 0 if rng.random() < bias else rng.randrange(shown)) for r in ("x", "y", "z")]
        out.append(outcome("panel", i, True, rounds=rounds_of([True, True, True]), reviews=reviews))
    return out


@pytest.mark.parametrize("bias", [0.0, 0.3, 0.6])
def test_a_simulated_position_bias_is_predicted_and_estimated(bias: float) -> None:
    sim = {"skill": 0.7, "options": 3, "position_bias": bias}
    report = build_report({"name": "b", "arms": [arm("panel", experts=3, simulation=sim)]},
                          biased_reviews(300, bias, shown=3, seed=int(bias * 10)))
    panel = report.arm("panel")
    assert panel.theory is not None and panel.theory.reviews is not None and panel.panel is not None
    reviews = panel.panel.reviews
    assert reviews is not None and reviews.reviews == 900
    assert panel.theory.reviews.first_rate == pytest.approx(bias + (1 - bias) / 3)
    assert panel.theory.reviews.within  # 900 reviews: the prediction lies in the measured interval
    assert reviews.estimated_bias == pytest.approx(bias, abs=0.08)
    data = report.as_json()["arms"][0]
    assert data["panel"]["reviews"]["position_bias"]["estimated_bias"] == pytest.approx(reviews.estimated_bias)
    text = report.table()
    assert f"{100 * panel.theory.reviews.first_rate:.1f} in" in text  # the theory printed beside the rate
    assert max(len(line) for line in text.splitlines()) <= WIDTH  # every section, its title too


def test_a_panel_deciding_by_another_rule_shows_plurality_for_reference_only() -> None:
    sim = {"skill": 0.7, "options": 2}
    outcomes = [outcome("panel", i, i % 5 != 0) for i in range(100)]
    for decide, exact in (("vote", True), ("consensus", True), ("weighted_vote", False), ("borda", False),
                          ("chair", False)):
        theory = build_report({"name": "x", "arms": [{**arm("panel", experts=5, simulation=sim), "decide": decide}]},
                              outcomes).arm("panel").theory
        assert theory is not None and theory.rule == "plurality" and theory.exact is exact, decide
    with pytest.raises(InvalidReportInput, match=r"arms\[0\]\.decide"):
        build_report({"name": "x", "arms": [{**arm("panel", simulation=sim), "decide": "coin"}]}, outcomes)


def test_the_theory_of_a_panel_that_can_tie_is_the_tallys_rule() -> None:
    # four experts on two options tie two against two a quarter of the time; the tally gives
    # the tie to the surer side, which the simulated solver makes the right one most often
    sim = {"skill": 0.7, "options": 2}
    outcomes = [outcome("panel", i, i % 10 != 0) for i in range(300)] + [
        outcome("sc", i, i % 10 != 0) for i in range(300)]
    report = build_report({"name": "x", "arms": [arm("panel", experts=4, simulation=sim),
                                                 arm("sc", "self_consistency", experts=4, simulation=sim)]}, outcomes)
    for name in ("panel", "sc"):
        theory = report.arm(name).theory
        assert theory is not None and theory.exact
        assert theory.accuracy == pytest.approx(plurality_accuracy(4, 0.7, 2, tie="confidence"))
        assert theory.accuracy > plurality_accuracy(4, 0.7, 2) + 0.1  # a tie is worth far more than one half
        assert theory.within  # 90 % measured


def test_conformity_in_a_panel_that_can_tie_makes_the_theory_a_reference() -> None:
    # a conforming expert takes the round's majority with ties by the answers' order, not by
    # confidence: with four options (or an even panel) the later round's plurality has no
    # closed form; on two options with an odd panel it is round one's, which has one
    two_rounds = rounds_of([True, True, False], [True, True, True])
    outcomes = [outcome("panel", i, True, rounds=two_rounds, rounds_planned=2) for i in range(20)]
    for options, conformity, exact in ((4, 0.5, False), (2, 0.5, True), (4, 0.0, True)):
        sim = {"skill": 0.7, "options": options, "conformity": conformity}
        theory = build_report({"name": "x", "arms": [arm("panel", experts=3, simulation=sim)]},
                              outcomes).arm("panel").theory
        assert theory is not None and theory.exact is exact, (options, conformity)


def test_dollars_per_item_and_per_correct_answer_when_every_call_was_priced() -> None:
    priced = [outcome("panel", i, i < 6, cost_usd=0.002) for i in range(8)]
    single = [outcome("single", i, i < 4, cost_usd=0.0005) for i in range(8)]
    unpriced = [*(outcome("free", i, True, cost_usd=0.01) for i in range(3)), outcome("free", 3, True)]
    record = {"name": "d", "arms": [arm("panel"), arm("single", "single", baseline=True, experts=1), arm("free")]}
    report = build_report(record, priced + single + unpriced)
    panel, one, free = report.arm("panel"), report.arm("single"), report.arm("free")
    assert panel.cost_usd == pytest.approx(0.016) and panel.cost_per_item == pytest.approx(0.002)
    assert panel.cost_per_correct == pytest.approx(0.016 / 6)
    assert one.cost_per_correct == pytest.approx(0.004 / 4)
    assert free.cost_usd is None and free.cost_per_item is None  # one item unpriced: no partial sum
    data = {a["name"]: a for a in report.as_json()["arms"]}
    assert data["panel"]["cost_per_item"] == pytest.approx(0.002) and data["free"]["cost_usd"] is None
    text = report.table()
    assert "$/item" in text and "$0.002 " in text and "$0.00267" in text and "$0.001\n" in text and "$0.016 " in text
    assert "single *" in text  # the dollars take no room from the names
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "$/item" not in build_report({"name": "d", "arms": [arm("free")]}, unpriced).table()
