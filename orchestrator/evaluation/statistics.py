"""The statistics an evaluation report rests on, computed exactly from counts.

A panel's accuracy on a few hundred items is a noisy number; these functions say how noisy
and whether a difference between two systems on the same items is real:

- :func:`wilson_interval` — a 95 % interval on an accuracy that stays inside [0, 1] and is
  honest for small n and for accuracies near 0 or 1; :func:`clustered_interval` the same for
  a share pooled over clusters of dependent trials (the experts of one item);
- :func:`mcnemar_exact`, :func:`paired` — the exact test for two systems answering the same
  items (only the items where exactly one of them is right carry information);
- :func:`effective_votes` — how many independent votes a panel of correlated experts is
  worth (five copies of one model are one vote), and :func:`effective_votes_interval` how
  sure that number is (a jackknife over the items);
- :func:`flip_rates` — how often a debate round turns right answers wrong and wrong ones right;
- :func:`agreement_rate` — how much the experts agree with their own plurality;
- :func:`position_bias` — whether reviewers of anonymised answers favour the first one shown.

The tests are exact, not normal approximations: binomial tails are sums of integers (McNemar)
or of non-negative floating-point terms (the Poisson-binomial of :func:`position_bias`), never
a difference of nearly equal numbers. Only the Wilson interval rests on the normal quantile,
which is what makes it an interval that can be printed for any n.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

#: The two-sided 95 % quantile of the standard normal distribution, Φ⁻¹(0.975).
Z95 = 1.959963984540054


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: must be non-negative, got {value}")
    return value


def _same_length(a: Sequence[object], b: Sequence[object], names: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{names}: must have the same length, got {len(a)} and {len(b)}")


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a proportion ``successes / n`` (95 % with the default ``z``).

    With no trials nothing is known: ``(0.0, 1.0)``. The bounds are clamped to [0, 1] against
    rounding, and always contain the observed proportion.
    """
    _count(successes, "successes")
    _count(n, "n")
    if successes > n:
        raise ValueError(f"successes: must be at most n ({n}), got {successes}")
    if isinstance(z, bool) or not isinstance(z, int | float) or not math.isfinite(z) or z <= 0:
        raise ValueError(f"z: must be a positive finite number, got {z!r}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, min(p, centre - half))
    high = 1.0 if successes == n else min(1.0, max(p, centre + half))
    return (low, high)


def clustered_interval(successes: Sequence[int], trials: Sequence[int], z: float = Z95) -> tuple[float, float]:
    """A Wilson interval on a share pooled over clusters whose trials are not independent.

    ``successes[i]`` of ``trials[i]`` in cluster i (an item: the experts of one item flip
    together when they conform to one majority). The pooled share is r = Σs / Σt; its
    cluster-robust (ratio-estimator) variance is k/(k-1) · Σ(sᵢ - r·tᵢ)² / (Σt)² over the k
    clusters with trials, and the design effect (Kish) its ratio to the binomial r(1-r)/Σt,
    never below 1. Wilson with n/deff trials is Wilson with z·sqrt(deff) (z only ever
    appears as z²/n), so the interval is :func:`wilson_interval` at that z: as wide as the
    binomial one when the clusters are independent inside, wider when they are not. With
    fewer than two clusters, or a share of 0 or 1, there is no variance to measure: deff 1.
    """
    _same_length(successes, trials, "successes, trials")
    for i, (s, t) in enumerate(zip(successes, trials, strict=True)):
        _count(s, f"successes[{i}]")
        _count(t, f"trials[{i}]")
        if s > t:
            raise ValueError(f"successes[{i}]: must be at most trials[{i}] ({t}), got {s}")
    total, n = sum(successes), sum(trials)
    clusters = sum(1 for t in trials if t)
    deff = 1.0
    if clusters > 1 and 0 < total < n:
        r = total / n
        robust = clusters / (clusters - 1) * sum((s - r * t) ** 2 for s, t in zip(successes, trials, strict=True))
        deff = max(1.0, robust / (n * r * (1 - r)))  # both variances times n²
    return wilson_interval(total, n, z * math.sqrt(deff))


def mcnemar_exact(b: int, c: int) -> float:
    """The two-sided exact McNemar p-value from the discordant counts.

    ``b`` items only the first system got right, ``c`` only the second: under the null
    hypothesis each discordant item is a fair coin, so the p-value is the binomial test with
    p = 1/2 on ``b + c`` trials, ``min(1, 2·P[X ≤ min(b, c)])``, summed in exact integers.
    No discordant item: 1.0.
    """
    _count(b, "b")
    _count(c, "c")
    trials = b + c
    if trials == 0:
        return 1.0
    tail = sum(math.comb(trials, i) for i in range(min(b, c) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**trials)))


@dataclass(frozen=True)
class Paired:
    """Two systems on the same items: the 2 x 2 table, the McNemar p-value, and by how much
    the first system's accuracy exceeds the second's (negative when it is worse)."""

    both_right: int
    a_only: int
    b_only: int
    both_wrong: int
    p_value: float
    difference: float

    @property
    def n(self) -> int:
        return self.both_right + self.a_only + self.b_only + self.both_wrong


def paired(a: Sequence[bool], b: Sequence[bool]) -> Paired:
    """Compare two systems item by item (``a[i]``, ``b[i]``: was each right on item i).

    No items: all counts 0, p-value 1.0, difference 0.0.
    """
    _same_length(a, b, "a, b")
    table = Counter((bool(x), bool(y)) for x, y in zip(a, b, strict=True))
    a_only, b_only = table[True, False], table[False, True]
    n = len(a)
    return Paired(
        both_right=table[True, True],
        a_only=a_only,
        b_only=b_only,
        both_wrong=table[False, False],
        p_value=mcnemar_exact(a_only, b_only),
        difference=(a_only - b_only) / n if n else 0.0,
    )


def _phi(x: Sequence[bool], y: Sequence[bool]) -> float:
    """The phi (Pearson) correlation of two 0/1 sequences; 0.0 when either is constant."""
    n = len(x)
    x1 = sum(1 for v in x if v)
    y1 = sum(1 for v in y if v)
    both = sum(1 for u, v in zip(x, y, strict=True) if u and v)
    spread = x1 * (n - x1) * y1 * (n - y1)
    if spread == 0:
        return 0.0
    # n·n11 - x1·y1 is n² times the covariance; the product under the root is n⁴ Var(x) Var(y)
    return max(-1.0, min(1.0, (n * both - x1 * y1) / math.sqrt(spread)))


def effective_votes(correct: Sequence[Sequence[bool]]) -> float:
    """How many independent votes a panel is worth: Kish's design effect on its experts.

    ``correct[e][i]``: was expert e right on item i (every expert answers the same items).
    With n experts and r the mean, over the n(n-1)/2 pairs, of the phi correlation of two
    experts' correctness indicators, ``n_eff = n / (1 + (n - 1)·r)``, clamped to [1, n]
    (a negative r would claim more than n votes; r = 1 gives exactly 1).

    An expert always right or always wrong on these items has no variance, so its correlation
    with anyone is undefined: it is counted as 0 (uncorrelated). A panel of constant experts
    therefore reports n, the items cannot tell; report their accuracy beside this number.
    """
    experts = len(correct)
    if experts == 0:
        raise ValueError("correct: needs at least one expert")
    items = len(correct[0])
    for e, answers in enumerate(correct):
        if len(answers) != items:
            raise ValueError(f"correct[{e}]: has {len(answers)} items, expert 0 has {items}")
    if experts == 1:
        return 1.0
    pairs = list(combinations(range(experts), 2))
    rho = sum(_phi(correct[i], correct[j]) for i, j in pairs) / len(pairs)
    return _kish(experts, rho)


def _kish(experts: int, rho: float) -> float:
    denominator = 1 + (experts - 1) * rho
    if denominator <= 0:
        return float(experts)
    return max(1.0, min(float(experts), experts / denominator))


def effective_votes_interval(correct: Sequence[Sequence[bool]], z: float = Z95) -> tuple[float, float] | None:
    """A 95 % interval on :func:`effective_votes`: the mean pairwise phi r, its standard error
    by the jackknife over the items (each left out in turn: the experts' answers to one item
    are one unit, however they depend on each other), ``r ± z·se`` mapped through
    ``n / (1 + (n - 1)·r)`` (decreasing in r) and clamped to [1, n] like the figure itself.
    None with one expert or fewer than three items. Leaving one item out needs only the
    counts without it, so this costs items x pairs, not a recomputation per item."""
    experts = len(correct)
    if experts < 2:
        return None
    items = len(correct[0])
    if items < 3:
        return None
    pairs = list(combinations(range(experts), 2))
    ones = [sum(1 for v in answers if v) for answers in correct]
    both = {(i, j): sum(1 for u, v in zip(correct[i], correct[j], strict=True) if u and v) for i, j in pairs}

    def mean_phi(n: int, one: Sequence[int], joint: dict[tuple[int, int], int]) -> float:
        total = 0.0
        for i, j in pairs:
            spread = one[i] * (n - one[i]) * one[j] * (n - one[j])
            if spread:
                total += max(-1.0, min(1.0, (n * joint[i, j] - one[i] * one[j]) / math.sqrt(spread)))
        return total / len(pairs)

    left_out = []
    for k in range(items):
        here = [answers[k] for answers in correct]
        one = [ones[e] - here[e] for e in range(experts)]
        joint = {(i, j): both[i, j] - (here[i] and here[j]) for i, j in pairs}
        left_out.append(mean_phi(items - 1, one, joint))
    centre = math.fsum(left_out) / items
    se = math.sqrt((items - 1) / items * math.fsum((r - centre) ** 2 for r in left_out))
    rho = mean_phi(items, ones, both)
    return _kish(experts, rho + z * se), _kish(experts, rho - z * se)


@dataclass(frozen=True)
class Flips:
    """Transitions of correctness between two rounds on the same items.

    ``right_to_wrong_rate`` is the share of the items right before that became wrong;
    ``wrong_to_right_rate`` the share of the items wrong before that became right; each is 0.0
    when nothing was right (wrong) before.
    """

    right_to_wrong: int
    wrong_to_right: int
    right_before: int
    wrong_before: int
    right_to_wrong_rate: float
    wrong_to_right_rate: float


def flip_rates(before: Sequence[bool], after: Sequence[bool]) -> Flips:
    """Count right→wrong and wrong→right changes from ``before[i]`` to ``after[i]``."""
    _same_length(before, after, "before, after")
    right_before = sum(1 for v in before if v)
    wrong_before = len(before) - right_before
    right_to_wrong = sum(1 for x, y in zip(before, after, strict=True) if x and not y)
    wrong_to_right = sum(1 for x, y in zip(before, after, strict=True) if not x and y)
    return Flips(
        right_to_wrong=right_to_wrong,
        wrong_to_right=wrong_to_right,
        right_before=right_before,
        wrong_before=wrong_before,
        right_to_wrong_rate=right_to_wrong / right_before if right_before else 0.0,
        wrong_to_right_rate=wrong_to_right / wrong_before if wrong_before else 0.0,
    )


def agreement_rate(answers: Sequence[Sequence[str | None]]) -> float:
    """The mean, over items, of the share of experts giving the item's most common answer.

    ``answers[i]`` holds every expert's answer to item i (note the order: per item, unlike
    :func:`effective_votes`). ``None`` is an abstention: it is never the most common answer
    and counts in the denominator, so abstaining lowers agreement. An item where every expert
    abstains scores 0.
    """
    if len(answers) == 0:
        raise ValueError("answers: needs at least one item")
    total = 0.0
    for i, given in enumerate(answers):
        if len(given) == 0:
            raise ValueError(f"answers[{i}]: needs at least one expert's answer")
        votes = Counter(a for a in given if a is not None)
        top = max(votes.values(), default=0)
        total += top / len(given)
    return total / len(answers)


@dataclass(frozen=True)
class PositionBias:
    """How often reviewers ranked the first answer shown first, against chance.

    ``observed`` is the share of reviews that chose position 0, ``expected`` the share chance
    would give (Σ 1/k over the reviews, divided by their number), ``excess`` their difference,
    ``interval`` the Wilson interval on ``observed``, and ``p_value`` the exact two-sided
    Poisson-binomial test of ``chose_first`` against chance (see :func:`position_bias`).
    """

    reviews: int
    chose_first: int
    observed: float
    expected: float
    excess: float
    interval: tuple[float, float]
    p_value: float


def _poisson_binomial(shown: Sequence[int]) -> list[float]:
    """P[X = x] for x = 0..N, X the number of reviews choosing position 0 by chance.

    Reviews showing the same number k of answers form one binomial Bin(m, 1/k), computed
    in log space (no underflow of k⁻ᵐ for large m); the binomials are convolved. Every term is
    non-negative, so the sums lose nothing to cancellation.
    """
    distribution = [1.0]
    for k, m in sorted(Counter(shown).items()):
        if k == 1:
            group = [0.0] * m + [1.0]  # a lone answer is always the first
        else:
            log_p, log_q = -math.log(k), math.log1p(-1 / k)
            log_m = math.lgamma(m + 1)
            group = [math.exp(log_m - math.lgamma(x + 1) - math.lgamma(m - x + 1) + x * log_p + (m - x) * log_q)
                     for x in range(m + 1)]
        if len(group) > len(distribution):
            distribution, group = group, distribution
        out = [0.0] * (len(distribution) + len(group) - 1)
        for j, g in enumerate(group):
            if g:
                for i, d in enumerate(distribution):
                    out[i + j] += d * g
        distribution = out
    return distribution


def position_bias(first_choices: Sequence[int], n_positions: Sequence[int]) -> PositionBias:
    """Estimate how much more often than chance reviewers rank position 0 first.

    Per review, ``first_choices[r]`` is the 0-based position of the answer ranked first and
    ``n_positions[r]`` how many answers were shown. Under no bias review r picks position 0
    with probability 1/k_r, so the count of position-0 choices is Poisson-binomial. The
    p-value is exact (up to floating-point rounding of the probabilities, no normal
    approximation): twice the smaller tail at the observed count, capped at 1, the same
    two-sided rule as :func:`mcnemar_exact`. The work grows with the square of the number
    of reviews in the worst case (a few seconds at 10⁴ reviews with many distinct k).

    No reviews: nothing observed, excess 0.0, interval (0, 1), p-value 1.0.
    """
    _same_length(first_choices, n_positions, "first_choices, n_positions")
    for r, (choice, k) in enumerate(zip(first_choices, n_positions, strict=True)):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"n_positions[{r}]: must be a positive integer, got {k!r}")
        if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < k:
            raise ValueError(f"first_choices[{r}]: must be an integer in [0, {k}), got {choice!r}")
    reviews = len(first_choices)
    if reviews == 0:
        return PositionBias(0, 0, 0.0, 0.0, 0.0, (0.0, 1.0), 1.0)
    chose_first = sum(1 for choice in first_choices if choice == 0)
    expected = float(sum(Fraction(1, k) for k in n_positions) / reviews)
    observed = chose_first / reviews
    pmf = _poisson_binomial(n_positions)
    lower = sum(pmf[: chose_first + 1])
    upper = sum(pmf[chose_first:])
    return PositionBias(
        reviews=reviews,
        chose_first=chose_first,
        observed=observed,
        expected=expected,
        excess=observed - expected,
        interval=wilson_interval(chose_first, reviews),
        p_value=min(1.0, 2 * min(lower, upper)),
    )
