"""The theoretical accuracies are the exact ones: they give the closed forms where there are
some, agree with brute-force enumeration of every vote, and with a seeded simulation of the
documented model within four standard errors."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from functools import cache
from itertools import pairwise, product

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.deliberation.answers import ChoiceAnswer
from orchestrator.deliberation.protocols import Ballot, tally
from orchestrator.deliberation.verdicts import read_verdict
from orchestrator.evaluation.datasets import generate
from orchestrator.evaluation.statistics import effective_votes
from orchestrator.evaluation.theory import (
    conformity_flip_rates,
    correlated_plurality_accuracy,
    majority_of_samples_accuracy,
    plurality_accuracy,
)
from orchestrator.gateway.providers.offline.options import SolverOptions
from orchestrator.gateway.providers.offline.solver import Solver
from orchestrator.gateway.providers.offline.verdict_line import AnswerSpec, verdict_line
from tests.unit.bounded import bounded

DRAWS = 20_000


def _grid_confidence(low: float, width: float, points: int = 5_600) -> dict[int, Fraction]:
    """The solver's rounded confidence, in hundredths, read off a fine grid of u: a point in
    the middle of each of ``points`` equal steps, whose edges include every bucket's (the
    widths 0.35 and 0.4 are 70 and 80 half-hundredths, and 5,600 a multiple of both), so
    each bucket gets its exact share."""
    counts = Counter(round(round(low + width * ((i + 0.5) / points), 2) * 100) for i in range(points))
    return {v: Fraction(c, points) for v, c in counts.items()}


RIGHT_HUNDREDTHS, WRONG_HUNDREDTHS = _grid_confidence(0.6, 0.35), _grid_confidence(0.35, 0.4)


def _sum_of(one: dict[int, Fraction], k: int) -> dict[int, Fraction]:
    total = {0: Fraction(1)}
    for _ in range(k):
        grown: Counter[int] = Counter()
        for t, p in total.items():
            for v, q in one.items():
                grown[t + v] += p * q
        total = dict(grown)
    return total


@cache
def _confidence_worth(votes: int, wrong_answers: int) -> Fraction:
    """The right answer's share of a tie of ``votes`` votes each with ``wrong_answers``
    answers: every total of every tied answer enumerated, an equal top split evenly."""
    right, wrong = _sum_of(RIGHT_HUNDREDTHS, votes), _sum_of(WRONG_HUNDREDTHS, votes)
    worth = Fraction(0)
    for totals in product(wrong.items(), repeat=wrong_answers):
        p_wrong = math.prod((p for _, p in totals), start=Fraction(1))
        top = max(t for t, _ in totals)
        level = sum(1 for t, _ in totals if t == top)
        worth += p_wrong * sum((p * (1 if t > top else Fraction(1, level + 1) if t == top else 0)
                                for t, p in right.items()), Fraction(0))
    return worth


def _share(votes: list[int], tie: str) -> Fraction:
    """What one panel outcome is worth: answer 0 is the right one."""
    counts = Counter(votes)
    top = max(counts.values())
    leaders = [a for a, c in counts.items() if c == top]
    if 0 not in leaders:
        return Fraction(0)
    if len(leaders) == 1:
        return Fraction(1)
    if tie == "confidence":
        return _confidence_worth(top, len(leaders) - 1)
    return Fraction(1, len(leaders)) if tie == "random" else Fraction(0)


def _draw_probability(answer: int, skill: Fraction, options: int) -> Fraction:
    return skill if answer == 0 else (1 - skill) / (options - 1)


def _brute_independent(n: int, skill: Fraction, options: int, tie: str) -> Fraction:
    total = Fraction(0)
    for votes in product(range(options), repeat=n):
        weight = math.prod((_draw_probability(v, skill, options) for v in votes), start=Fraction(1))
        total += weight * _share(list(votes), tie)
    return total


def _brute_correlated(n: int, skill: Fraction, options: int, copy: Fraction) -> Fraction:
    total = Fraction(0)
    for copies in product((True, False), repeat=n):
        p_copies = math.prod((copy if c else 1 - copy for c in copies), start=Fraction(1))
        own = copies.count(False)
        for shared in range(options):
            for draws in product(range(options), repeat=own):
                it = iter(draws)
                votes = [shared if c else next(it) for c in copies]
                weight = p_copies * _draw_probability(shared, skill, options)
                weight *= math.prod((_draw_probability(d, skill, options) for d in draws), start=Fraction(1))
                total += weight * _share(votes, "random")
    return total


def _sample_panel(rng: random.Random, n: int, skill: float, options: int, correlation: float) -> list[int]:
    """The documented one-factor model; answer 0 is right, 1..options-1 are wrong."""
    def draw() -> int:
        return 0 if rng.random() < skill else rng.randrange(1, options)

    shared, copy = draw(), math.sqrt(correlation)
    return [shared if rng.random() < copy else draw() for _ in range(n)]


def _pick(votes: list[int], rng: random.Random) -> int:
    counts = Counter(votes)
    top = max(counts.values())
    return rng.choice(sorted(a for a, c in counts.items() if c == top))


# -- closed forms ------------------------------------------------------------------------


def test_five_experts_at_seventy_percent_on_two_options() -> None:
    assert plurality_accuracy(5, 0.7, 2) == pytest.approx(0.83692, abs=1e-12)


@pytest.mark.parametrize("skill", [0.0, 0.3, 0.55, 0.9, 1.0])
def test_even_panels_on_two_options_count_a_tie_as_one_half(skill: float) -> None:
    binomial = [math.comb(4, r) * skill**r * (1 - skill) ** (4 - r) for r in range(5)]
    assert plurality_accuracy(4, skill, 2) == pytest.approx(binomial[3] + binomial[4] + binomial[2] / 2, abs=1e-12)
    assert plurality_accuracy(4, skill, 2, tie="wrong") == pytest.approx(binomial[3] + binomial[4], abs=1e-12)


def test_one_expert_is_its_skill_and_self_consistency_is_the_same_rule() -> None:
    for options in (2, 4, 26):
        assert plurality_accuracy(1, 0.37, options) == pytest.approx(0.37, abs=1e-15)
    assert majority_of_samples_accuracy(7, 0.45, 5) == plurality_accuracy(7, 0.45, 5)


@pytest.mark.parametrize(("n", "skill", "options"), [(1, 0.3, 2), (5, 0.7, 2), (7, 0.37, 4), (25, 0.2, 26)])
def test_perfect_correlation_is_one_expert(n: int, skill: float, options: int) -> None:
    assert correlated_plurality_accuracy(n, skill, options, 1.0) == skill


@pytest.mark.parametrize(("n", "skill", "options"), [(4, 0.5, 2), (5, 0.7, 3), (9, 0.3, 6)])
def test_no_correlation_is_independence(n: int, skill: float, options: int) -> None:
    assert correlated_plurality_accuracy(n, skill, options, 0.0) == plurality_accuracy(n, skill, options)


def test_more_options_spread_the_wrong_votes_and_lift_a_weak_panel() -> None:
    accuracies = [plurality_accuracy(5, 0.4, options) for options in range(2, 27)]
    assert all(a < b for a, b in pairwise(accuracies))
    # with infinitely many options no two wrong experts agree: the right answer wins unless
    # nobody gives it, and ties one-against-one only when exactly one expert is right
    limit = 1 - 0.6**5 - 5 * 0.4 * 0.6**4 * (1 - 1 / 5)
    assert accuracies[0] < 0.4 < accuracies[-1] < limit


def test_the_largest_panel_is_quick_and_a_probability() -> None:
    for correlation in (0.0, 0.3, 1.0):
        assert 0.0 <= correlated_plurality_accuracy(25, 0.35, 26, correlation) <= 1.0


@pytest.mark.parametrize(("call", "named"), [
    (lambda: plurality_accuracy(0, 0.5, 2), "n"), (lambda: plurality_accuracy(3, 1.2, 2), "skill"),
    (lambda: plurality_accuracy(3, 0.5, 1), "options"), (lambda: plurality_accuracy(3, 0.5, 2, tie="first"), "tie"),
    (lambda: correlated_plurality_accuracy(3, 0.5, 2, -0.1), "correlation"),
])
def test_bad_arguments_are_named(call: Callable[[], float], named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named}: "):
        call()


# -- brute force -------------------------------------------------------------------------


@bounded(60, deadline_ms=5000)
@given(st.integers(1, 5), st.integers(2, 4), st.fractions(0, 1, max_denominator=20),
       st.sampled_from(["random", "wrong"]))
def test_independent_panels_match_every_vote_enumerated(n: int, options: int, skill: Fraction, tie: str) -> None:
    expected = _brute_independent(n, skill, options, tie)
    assert plurality_accuracy(n, float(skill), options, tie) == pytest.approx(float(expected), abs=1e-12)


@bounded(30, deadline_ms=20_000)
@given(st.integers(1, 5), st.integers(2, 3), st.fractions(0, 1, max_denominator=20))
def test_the_tallys_tie_rule_matches_every_vote_and_confidence_enumerated(n: int, options: int,
                                                                           skill: Fraction) -> None:
    # a tie of votes goes to the higher total confidence (the solver's, rounded as its verdict
    # line writes them), an equal total to the draw
    expected = _brute_independent(n, skill, options, "confidence")
    assert plurality_accuracy(n, float(skill), options, "confidence") == pytest.approx(float(expected), abs=1e-12)


@bounded(40, deadline_ms=5000)
@given(st.integers(1, 4), st.integers(2, 3), st.fractions(0, 1, max_denominator=10),
       st.fractions(0, 1, max_denominator=10))
def test_correlated_panels_match_every_vote_enumerated(n: int, options: int, skill: Fraction, copy: Fraction) -> None:
    expected = _brute_correlated(n, skill, options, copy)
    got = correlated_plurality_accuracy(n, float(skill), options, float(copy) ** 2)
    assert got == pytest.approx(float(expected), abs=1e-12)


@bounded(200, deadline_ms=2000)
@given(st.integers(1, 9), st.integers(2, 6), st.floats(0, 1), st.floats(0, 1))
def test_accuracies_are_probabilities_and_rise_with_skill(n: int, options: int, a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert 0.0 <= plurality_accuracy(n, low, options) <= plurality_accuracy(n, high, options) + 1e-12 <= 1.0 + 1e-12
    assert 0.0 <= correlated_plurality_accuracy(n, low, options, high) <= 1.0


# -- simulation --------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "skill", "options", "correlation"), [
    (5, 0.6, 2, 0.0), (6, 0.4, 4, 0.0), (5, 0.5, 3, 0.3), (7, 0.45, 5, 0.6),
])
def test_a_seeded_simulation_of_the_model_agrees(n: int, skill: float, options: int, correlation: float) -> None:
    rng = random.Random(20_240_601 + n)
    right = sum(_pick(_sample_panel(rng, n, skill, options, correlation), rng) == 0 for _ in range(DRAWS))
    theory = correlated_plurality_accuracy(n, skill, options, correlation)
    assert abs(right / DRAWS - theory) <= 4 * math.sqrt(theory * (1 - theory) / DRAWS)


def _tallied(n: int, skill: float, options: int, correlation: float, items: int) -> float:
    """The accuracy of the real simulated solver's verdict lines, read and tallied by the
    real tally (plurality; ties by total confidence, then the draw), over generated items."""
    solver = SolverOptions(skill=skill, correlation=correlation, seed=3)
    right = 0
    for item in generate(items, options=options, seed=11):
        assert item.choices is not None
        spec = ChoiceAnswer(type="choice", options=item.choices)
        solve = Solver(solver, f"Answer the question: {item.question}", AnswerSpec("choice", tuple(item.choices)))
        ballots = []
        for e in range(n):
            solved = solve.first(f"expert-{e}")
            line = verdict_line(solved.answer, solved.confidence, "worked it out")
            ballots.append(Ballot(f"expert-{e}", f"p{e}", read_verdict(line, spec)))
        right += tally("vote", spec, ballots, seed=item.id).answer == item.answer
    return right / items


@pytest.mark.parametrize(("n", "skill", "options", "correlation"), [
    (4, 0.6, 2, 0.0), (5, 0.45, 4, 0.0), (6, 0.6, 2, 0.2),
])
def test_the_tally_of_the_simulated_solver_is_the_theory_where_ties_happen(
        n: int, skill: float, options: int, correlation: float) -> None:
    # an even panel or more than two options ties often; the tally gives a tie to the higher
    # total confidence, and the solver's right answers are the surer: counting a tie as
    # half (tie="random") is 7 to 17 points below what the tally does
    items = 2_000
    theory = correlated_plurality_accuracy(n, skill, options, correlation, tie="confidence")
    measured = _tallied(n, skill, options, correlation, items)
    assert abs(measured - theory) <= 4 * math.sqrt(theory * (1 - theory) / items)
    assert theory - correlated_plurality_accuracy(n, skill, options, correlation) > 0.04


def test_the_model_gives_the_correlation_it_is_named_after() -> None:
    rng = random.Random(11)
    n, skill, correlation = 4, 0.6, 0.25
    panels = [_sample_panel(rng, n, skill, 3, correlation) for _ in range(DRAWS)]
    correct = [[panel[e] == 0 for panel in panels] for e in range(n)]
    # n_eff = n / (1 + (n - 1) rho); rho's standard error here is about 0.004
    expected = n / (1 + (n - 1) * correlation)
    assert effective_votes(correct) == pytest.approx(expected, abs=0.1)


def test_conformity_flip_rates_have_the_closed_form_of_five_experts_and_simulate() -> None:
    # five experts of skill 0.7: the four others hold three or four wrong answers with
    # probability 4·0.3³·0.7 + 0.3⁴ = 0.0837, three or four right ones with 4·0.7³·0.3 + 0.7⁴
    right_to_wrong, wrong_to_right = conformity_flip_rates(5, 0.7, 0.5)
    assert right_to_wrong == pytest.approx(0.5 * (4 * 0.3**3 * 0.7 + 0.3**4))
    assert wrong_to_right == pytest.approx(0.5 * (4 * 0.7**3 * 0.3 + 0.7**4))
    # an even panel: a tie of the four answers (the expert's own among them) is worth one half
    assert conformity_flip_rates(4, 0.5, 1.0)[0] == pytest.approx(0.125 + 0.5 * 0.375)
    assert conformity_flip_rates(5, 0.7, 0.0) == (0.0, 0.0)
    rng = random.Random(7)
    flips = right = 0
    for _ in range(DRAWS // 5):
        first = [rng.random() < 0.7 for _ in range(5)]
        plurality = sum(first) * 2 > 5
        for own in first:
            if own:
                right += 1
                flips += rng.random() < 0.5 and not plurality
    standard_error = math.sqrt(right_to_wrong * (1 - right_to_wrong) / right)
    assert abs(flips / right - right_to_wrong) < 4 * standard_error
    with pytest.raises(ValueError, match="conformity"):
        conformity_flip_rates(5, 0.7, 1.5)
