"""The evaluation statistics give the textbook numbers, agree with brute force, and stay in
their ranges for any input."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from itertools import product

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.evaluation.statistics import (
    Z95,
    agreement_rate,
    clustered_interval,
    effective_votes,
    effective_votes_interval,
    flip_rates,
    mcnemar_exact,
    paired,
    position_bias,
    wilson_interval,
)
from tests.unit.bounded import bounded

# -- Wilson ------------------------------------------------------------------------------


def test_wilson_gives_the_textbook_interval() -> None:
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=5e-5)
    assert high == pytest.approx(0.9433, abs=5e-5)


def test_wilson_knows_nothing_without_trials_and_reaches_the_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 20)[0] == 0.0
    assert wilson_interval(20, 20)[1] == 1.0


@pytest.mark.parametrize(("args", "named"), [
    ((11, 10), "successes"), ((-1, 10), "successes"), ((1, -2), "n"), ((True, 3), "successes"),
    ((1.0, 3), "successes"), ((1, 3, 0.0), "z"), ((1, 3, math.nan), "z"),
])
def test_wilson_refuses_bad_input_naming_the_argument(args: tuple[float, ...], named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named}: "):
        wilson_interval(*args)


@bounded(200)
@given(st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_lies_in_the_unit_interval_and_holds_the_estimate(case: tuple[int, int]) -> None:
    successes, n = case
    low, high = wilson_interval(successes, n)
    assert 0.0 <= low <= successes / n <= high <= 1.0
    # each bound inside (0, 1) is a root of the score test: (p̂ - p)² = z² p (1 - p) / n
    for bound in (low, high):
        if 0 < bound < 1:
            gap = (successes / n - bound) ** 2
            assert gap == pytest.approx(1.959963984540054**2 * bound * (1 - bound) / n, rel=1e-6, abs=1e-12)


# -- McNemar -----------------------------------------------------------------------------


def test_mcnemar_gives_the_textbook_p_value() -> None:
    assert mcnemar_exact(10, 2) == pytest.approx(0.03857, abs=5e-6)
    assert mcnemar_exact(10, 2) == 2 * (1 + 12 + 66) / 4096


def test_mcnemar_without_discordant_items_or_when_balanced_is_one() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(7, 7) == 1.0


@pytest.mark.parametrize(("b", "c", "named"), [(-1, 2, "b"), (2, -1, "c"), (1.5, 2, "b"), (1, False, "c")])
def test_mcnemar_refuses_bad_counts_naming_them(b: int, c: int, named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named}: "):
        mcnemar_exact(b, c)


@bounded(200)
@given(st.integers(0, 150), st.integers(0, 150))
def test_mcnemar_is_symmetric_and_a_probability(b: int, c: int) -> None:
    p = mcnemar_exact(b, c)
    assert p == mcnemar_exact(c, b)
    assert 0.0 <= p <= 1.0
    trials = b + c
    if trials:
        tail = sum(Fraction(math.comb(trials, i), 2**trials) for i in range(min(b, c) + 1))
        assert p == pytest.approx(float(min(1, 2 * tail)), rel=1e-12)


def test_paired_counts_the_table_and_the_difference() -> None:
    a = [True, True, False, False, True]
    b = [True, False, True, False, False]
    result = paired(a, b)
    assert (result.both_right, result.a_only, result.b_only, result.both_wrong) == (1, 2, 1, 1)
    assert result.n == 5
    assert result.difference == pytest.approx(3 / 5 - 2 / 5)
    assert result.p_value == mcnemar_exact(2, 1)
    assert paired([], []).p_value == 1.0 and paired([], []).difference == 0.0
    with pytest.raises(ValueError, match="same length"):
        paired([True], [])


@bounded(200)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60))
def test_paired_difference_is_the_difference_of_accuracies(pairs: list[tuple[bool, bool]]) -> None:
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    result = paired(a, b)
    assert result.n == len(pairs)
    if pairs:
        assert result.difference == pytest.approx(sum(a) / len(a) - sum(b) / len(b))


# -- effective votes ---------------------------------------------------------------------


def test_identical_experts_are_one_vote() -> None:
    expert = [True, False, True, True, False, False, True]
    assert effective_votes([expert] * 5) == 1.0
    assert effective_votes([expert]) == 1.0


def test_two_experts_by_hand() -> None:
    # n11 = 1, x1 = 2, y1 = 1 over 4 items: phi = (4·1 - 2·1) / sqrt(2·2·1·3) = 1/sqrt(3)
    got = effective_votes([[True, True, False, False], [True, False, False, False]])
    assert got == pytest.approx(2 / (1 + 1 / math.sqrt(3)))


def test_anti_correlated_and_constant_experts_are_clamped_to_the_panel_size() -> None:
    expert = [True, False, True, False]
    assert effective_votes([expert, [not v for v in expert]]) == 2.0
    # constant experts: correlation undefined, taken as 0
    assert effective_votes([[True] * 4, [False] * 4, expert]) == 3.0


def test_independent_experts_on_many_items_are_nearly_all_votes() -> None:
    rng = random.Random(7)
    experts = [[rng.random() < 0.6 for _ in range(4000)] for _ in range(5)]
    # mean phi of 10 pairs has standard error ~ 1 / sqrt(4000 · 10) = 0.005
    assert 5 / (1 + 4 * 0.02) <= effective_votes(experts) <= 5.0


def test_effective_votes_refuses_ragged_or_empty_panels() -> None:
    with pytest.raises(ValueError, match=r"^correct\[1\]: "):
        effective_votes([[True, False], [True]])
    with pytest.raises(ValueError, match=r"^correct: "):
        effective_votes([])


@bounded(200)
@given(st.integers(1, 7).flatmap(
    lambda n: st.integers(0, 12).flatmap(
        lambda items: st.lists(st.lists(st.booleans(), min_size=items, max_size=items), min_size=n, max_size=n))))
def test_effective_votes_lie_between_one_and_the_panel_size(correct: list[list[bool]]) -> None:
    assert 1.0 <= effective_votes(correct) <= len(correct)


@bounded(100)
@given(st.integers(2, 6).flatmap(
    lambda n: st.integers(3, 12).flatmap(
        lambda items: st.lists(st.lists(st.booleans(), min_size=items, max_size=items), min_size=n, max_size=n))))
def test_the_interval_of_effective_votes_holds_the_figure_within_one_and_the_panel(correct: list[list[bool]]) -> None:
    interval = effective_votes_interval(correct)
    assert interval is not None
    low, high = interval
    assert 1.0 <= low <= effective_votes(correct) <= high <= len(correct)


def _one_factor(rng: random.Random, experts: int, items: int, skill: float, correlation: float) -> list[list[bool]]:
    copy = math.sqrt(correlation)
    rows = []
    for _ in range(items):
        shared = rng.random() < skill
        rows.append([shared if rng.random() < copy else rng.random() < skill for _ in range(experts)])
    return [[row[e] for row in rows] for e in range(experts)]


def test_the_interval_of_effective_votes_covers_the_truth_about_as_often_as_it_says() -> None:
    # five experts, correlation 0.3: n_eff = 5 / (1 + 4·0.3) = 2.27; 200 panels of 300 items
    rng = random.Random(20_261_203)
    truth = 5 / (1 + 4 * 0.3)
    covered = 0
    for _ in range(200):
        interval = effective_votes_interval(_one_factor(rng, 5, 300, 0.7, 0.3))
        assert interval is not None
        covered += interval[0] <= truth <= interval[1]
    assert 0.88 <= covered / 200 <= 0.99  # a 95 % interval: 190 expected, binomial sd about 3
    # identical experts are one vote, and the items leave no doubt about it
    same = [[i % 3 == 0 for i in range(50)]] * 4
    assert effective_votes_interval(same) == (1.0, 1.0)
    assert effective_votes_interval([[True, False, True]]) is None  # one expert
    assert effective_votes_interval([[True, False], [False, True]]) is None  # two items


# -- flips and agreement -----------------------------------------------------------------


def test_flip_rates_count_both_directions() -> None:
    before = [True, True, True, False, False]
    after = [True, False, False, True, False]
    flips = flip_rates(before, after)
    assert (flips.right_to_wrong, flips.wrong_to_right) == (2, 1)
    assert (flips.right_before, flips.wrong_before) == (3, 2)
    assert flips.right_to_wrong_rate == pytest.approx(2 / 3)
    assert flips.wrong_to_right_rate == pytest.approx(1 / 2)


def test_flip_rates_are_zero_without_a_denominator() -> None:
    flips = flip_rates([True, True], [True, False])
    assert flips.wrong_to_right_rate == 0.0 and flips.right_to_wrong_rate == 0.5
    assert flip_rates([], []).right_to_wrong_rate == 0.0
    with pytest.raises(ValueError, match="same length"):
        flip_rates([True], [True, False])


def test_agreement_counts_abstentions_against() -> None:
    answers = [["a", "a", "b"], ["x", None, None], [None, None]]
    assert agreement_rate(answers) == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
    assert agreement_rate([["7", "7", "7"]]) == 1.0
    with pytest.raises(ValueError, match=r"^answers: "):
        agreement_rate([])
    with pytest.raises(ValueError, match=r"^answers\[1\]: "):
        agreement_rate([["a"], []])


# -- position bias -----------------------------------------------------------------------


def _brute_force_p(first: list[int], shown: list[int]) -> float:
    """Every outcome of "chose position 0 or not" per review, exactly."""
    pmf = [Fraction(0)] * (len(shown) + 1)
    for outcome in product((0, 1), repeat=len(shown)):
        weight = Fraction(1)
        for hit, k in zip(outcome, shown, strict=True):
            weight *= Fraction(1, k) if hit else 1 - Fraction(1, k)
        pmf[sum(outcome)] += weight
    x = sum(1 for c in first if c == 0)
    return float(min(Fraction(1), 2 * min(sum(pmf[: x + 1]), sum(pmf[x:]))))


def test_position_bias_by_hand() -> None:
    bias = position_bias([0, 0, 1, 0], [2, 2, 2, 4])
    assert bias.chose_first == 3 and bias.reviews == 4
    assert bias.observed == 0.75
    assert bias.expected == pytest.approx((3 / 2 + 1 / 4) / 4)
    assert bias.excess == pytest.approx(0.75 - 1.75 / 4)
    assert bias.interval == wilson_interval(3, 4)
    assert bias.p_value == pytest.approx(_brute_force_p([0, 0, 1, 0], [2, 2, 2, 4]), rel=1e-12)


def test_position_bias_without_reviews() -> None:
    bias = position_bias([], [])
    assert (bias.excess, bias.interval, bias.p_value) == (0.0, (0.0, 1.0), 1.0)


def test_a_strong_bias_on_many_reviews_is_significant_without_underflow() -> None:
    rng = random.Random(3)
    shown = [rng.choice((2, 3, 4)) for _ in range(3000)]
    first = [0 if rng.random() < 0.6 else rng.randrange(k) for k in shown]
    bias = position_bias(first, shown)
    assert bias.excess > 0.3 and bias.p_value < 1e-100
    always_first = position_bias([0] * 3000, [2] * 3000).p_value  # 2**-2999: below the smallest float
    assert 0.0 <= always_first < 1e-300
    fair = [rng.randrange(k) for k in shown]
    assert 0.0 <= position_bias(fair, shown).p_value <= 1.0


@pytest.mark.parametrize(("first", "shown", "named"), [
    ([2], [2], r"first_choices\[0\]"), ([-1], [3], r"first_choices\[0\]"), ([0, 0], [2, 0], r"n_positions\[1\]"),
    ([0], [2, 2], "first_choices, n_positions"),
])
def test_position_bias_refuses_impossible_reviews(first: list[int], shown: list[int], named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named}"):
        position_bias(first, shown)


@bounded(100, deadline_ms=2000)
@given(st.lists(st.integers(1, 5).flatmap(lambda k: st.tuples(st.integers(0, k - 1), st.just(k))),
                max_size=8))
def test_position_bias_p_value_is_exact(reviews: list[tuple[int, int]]) -> None:
    first, shown = [c for c, _ in reviews], [k for _, k in reviews]
    bias = position_bias(first, shown)
    assert bias.p_value == pytest.approx(_brute_force_p(first, shown), rel=1e-9, abs=1e-15)
    assert 0.0 <= bias.p_value <= 1.0


def test_clustered_interval_widens_wilson_by_the_design_effect_of_the_clusters() -> None:
    # one trial per cluster: the clusters are the trials, deff = k/(k-1) from the robust variance
    ones = [1] * 30 + [0] * 70
    assert clustered_interval(ones, [1] * 100) == pytest.approx(wilson_interval(30, 100, Z95 * math.sqrt(100 / 99)))
    # all-or-nothing clusters of four: as wide as 25 independent trials (deff 4·k/(k-1))
    whole = clustered_interval([4] * 10 + [0] * 15, [4] * 25)
    assert whole == pytest.approx(wilson_interval(40, 100, Z95 * math.sqrt(4 * 25 / 24)))
    assert whole[1] - whole[0] > 1.9 * (wilson_interval(40, 100)[1] - wilson_interval(40, 100)[0])
    # clusters more even than chance never give an interval narrower than Wilson's
    assert clustered_interval([2] * 50, [4] * 50) == wilson_interval(100, 200)
    # nothing to measure a variance on: Wilson's
    assert clustered_interval([3], [10]) == wilson_interval(3, 10)
    assert clustered_interval([0, 0], [5, 5]) == wilson_interval(0, 10)
    assert clustered_interval([], []) == (0.0, 1.0)
    with pytest.raises(ValueError, match="successes"):
        clustered_interval([3], [2])
    with pytest.raises(ValueError, match="same length"):
        clustered_interval([1], [1, 2])
