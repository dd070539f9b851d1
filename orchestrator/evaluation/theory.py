"""The exact accuracy a decision rule reaches under the simulation's model of experts.

An evaluation on simulated items prints, beside each measured accuracy, the accuracy the
model of the simulation predicts; a measurement far outside its interval from the theory
means the harness (not the panel) is wrong. The numbers are exact: outcomes are enumerated
and summed in rational arithmetic (:class:`~fractions.Fraction`, with ``skill`` taken as the
exact value of the float given), and rounded to a float once, at the end. Nothing here is
Monte-Carlo.

The model, per item with ``options`` answers of which one is right:

- an expert's *draw* is right with probability ``skill``, and otherwise one of the
  ``options - 1`` wrong answers, uniformly;
- independent experts (:func:`plurality_accuracy`) each answer their own draw;
- correlated experts (:func:`correlated_plurality_accuracy`) share one latent draw per
  item; each expert, independently, answers that shared draw with probability
  sqrt(correlation) and its own draw otherwise;
- the panel answers the plurality; a tie among the top answers is broken uniformly at
  random (``tie="random"``: a tie between the right answer and k wrong ones is worth
  1/(k+1)), counted as lost (``tie="wrong"``), or — the tally's own rule
  (:func:`~orchestrator.deliberation.protocols.tally`), which a report uses — given to the
  higher total confidence, a tie on that too drawn uniformly (``tie="confidence"``).

The confidences are the simulated solver's: a right answer's ``low + width·u`` with
:data:`~orchestrator.gateway.providers.offline.solver.RIGHT_CONFIDENCE`, a wrong one's with
:data:`~orchestrator.gateway.providers.offline.solver.WRONG_CONFIDENCE`, u uniform and
independent per expert, rounded to the verdict line's decimals. Informative, so the right
answer wins most ties: with two options and four experts of skill 0.7 the tally is right
≈ 0.90 of the time, against 0.78 when a tie is worth one half.

How: for r right votes, what matters about the other votes is how they spread over the
wrong answers: the largest count M and how many wrong answers reach it. Those numbers, over
every spread of W votes on b wrong answers, come from one dynamic programme over the
answers (cached per n and b), whatever the skill.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction
from functools import cache

from orchestrator.gateway.providers.offline.solver import RIGHT_CONFIDENCE, WRONG_CONFIDENCE
from orchestrator.gateway.providers.offline.verdict_line import CONFIDENCE_DECIMALS

#: How a tie for the plurality is settled: "random" (uniformly among the tied answers),
#: "wrong" (a tie is never a right answer), "confidence" (the tally's rule: the highest
#: total confidence, then uniformly among those equal).
TIES = ("random", "wrong", "confidence")

#: Each table below is indexed ``[W][R]``: W votes spread uniformly over the wrong answers,
#: R votes for the right one.
_Table = tuple[tuple[Fraction, ...], ...]


def _check(n: int, skill: float, options: int, tie: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: must be a positive integer, got {n!r}")
    if isinstance(skill, bool) or not isinstance(skill, int | float) or not 0 <= skill <= 1:
        raise ValueError(f"skill: must be a probability in [0, 1], got {skill!r}")
    if isinstance(options, bool) or not isinstance(options, int) or options < 2:
        raise ValueError(f"options: must be an integer of at least 2, got {options!r}")
    if tie not in TIES:
        raise ValueError(f"tie: must be one of {', '.join(TIES)}, got {tie!r}")


def _binomial(n: int, p: Fraction) -> list[Fraction]:
    """P[Bin(n, p) = x] for x = 0..n."""
    return [math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(n + 1)]


@cache
def _spreads(votes: int, buckets: int) -> tuple[dict[tuple[int, int], int], ...]:
    """``[W][(M, k)]``: in how many ways W labelled votes fall on ``buckets`` answers so
    that the largest count is M and exactly k answers have it (M = -1 when there are no
    answers). Dividing by buckets^W gives the probability under a uniform spread."""
    states: dict[tuple[int, int, int], int] = {(0, -1, 0): 1}  # (votes placed, M, k) -> ways
    for _ in range(buckets):
        grown: defaultdict[tuple[int, int, int], int] = defaultdict(int)
        for (placed, top, count), ways in states.items():
            for c in range(votes - placed + 1):
                # which of the placed + c labelled votes land on this answer
                key = (placed + c, c, 1) if c > top else (placed + c, top, count + (c == top))
                grown[key] += ways * math.comb(placed + c, c)
        states = grown
    table: list[dict[tuple[int, int], int]] = [{} for _ in range(votes + 1)]
    for (placed, top, count), ways in states.items():
        table[placed][top, count] = table[placed].get((top, count), 0) + ways
    return tuple(table)


def _share(tie: str) -> Callable[[int, int], Fraction]:
    """What a tie of the right answer's ``r`` votes with ``k`` wrong answers of ``r`` votes
    each is worth."""
    if tie == "random":
        return lambda r, k: Fraction(1, k + 1)
    if tie == "confidence":
        return _confidence_tie
    return lambda r, k: Fraction(0)


def _rounded_uniform(low: float, width: float) -> tuple[dict[int, int], int]:
    """The distribution of ``round(low + width·u, CONFIDENCE_DECIMALS)`` for u uniform on
    [0, 1), in units of the last decimal: ``({value: weight}, denominator)``, integers."""
    scale = 10**CONFIDENCE_DECIMALS
    lo, hi = Fraction(str(low)) * scale, (Fraction(str(low)) + Fraction(str(width))) * scale
    if not 0 <= lo < hi <= scale:
        raise ValueError(f"a confidence range must lie in [0, 1], got {low} + {width}")
    found = {}
    for value in range(math.floor(lo), math.ceil(hi) + 1):  # value/scale collects [value - ½, value + ½)
        overlap = min(hi, Fraction(2 * value + 1, 2)) - max(lo, Fraction(2 * value - 1, 2))
        if overlap > 0:
            found[value] = overlap / (hi - lo)
    denominator = math.lcm(*(p.denominator for p in found.values()))
    return {v: int(p * denominator) for v, p in found.items()}, denominator


@cache
def _total_confidence(right: bool, votes: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """The distribution of the sum of ``votes`` independent rounded confidences of right
    (or wrong) answers: ``(total, weight)`` pairs, totals ascending, and the denominator of
    the weights (integers, so that large panels stay quick)."""
    one, denominator = _rounded_uniform(*(RIGHT_CONFIDENCE if right else WRONG_CONFIDENCE))
    if votes == 0:
        return ((0, 1),), 1
    fewer, _ = _total_confidence(right, votes - 1)  # cached: each size is one convolution
    total: defaultdict[int, int] = defaultdict(int)
    for t, p in fewer:
        for v, q in one.items():
            total[t + v] += p * q
    return tuple(sorted(total.items())), denominator**votes


@cache
def _confidence_tie(votes: int, wrong: int) -> Fraction:
    """The chance the right answer wins a tie of ``votes`` votes each with ``wrong`` wrong
    answers under the tally's rule: its total confidence above every other's, and a share
    1/(m + 1) of the draw when m of them equal it — given e = P[a wrong total equals it] and
    l = P[it is below], sum over m of C(k, m)·e^m·l^(k-m)/(m + 1) = ((l + e)^(k+1) -
    l^(k+1)) / ((k + 1)·e)."""
    if votes == 0:  # nobody voted: the tally has no winner
        return Fraction(0)
    wrong_totals, d = _total_confidence(False, votes)
    values = [t for t, _ in wrong_totals]
    # below[i]: the weight of the wrong totals under values[i]
    below = list(itertools.accumulate((w for _, w in wrong_totals), initial=0))
    right_totals, d_right = _total_confidence(True, votes)
    won = Fraction(0)
    for t, p in right_totals:
        i = bisect.bisect_left(values, t)
        less = below[i]
        equal = wrong_totals[i][1] if i < len(values) and values[i] == t else 0
        share = (Fraction((less + equal) ** (wrong + 1) - less ** (wrong + 1), (wrong + 1) * equal) if equal
                 else Fraction(less**wrong))
        won += p * share
    return won / (d_right * d**wrong)


@cache
def _tables(votes: int, buckets: int, tie: str) -> tuple[_Table, _Table]:
    """``won[W][R]``: the chance the right answer wins with R votes against W votes spread
    uniformly over ``buckets`` wrong answers. ``with_one_at[W][R]``: the same when, besides
    those, one more wrong answer has exactly R votes."""
    worth = _share(tie)
    won: list[tuple[Fraction, ...]] = []
    with_one_at: list[tuple[Fraction, ...]] = []
    for spread_count, spreads in enumerate(_spreads(votes, buckets)):
        if not spreads:  # no wrong answer to hold these votes: the case has probability 0
            won.append((Fraction(0),) * (votes + 1))
            with_one_at.append((Fraction(0),) * (votes + 1))
            continue
        total = buckets**spread_count
        row_won, row_tied = [], []
        for right in range(votes + 1):
            plain = tied = Fraction(0)
            for (top, count), ways in spreads.items():
                if top < right:
                    plain += ways
                    tied += ways * worth(right, 1)
                elif top == right:
                    plain += ways * worth(right, count)
                    tied += ways * worth(right, count + 1)
            row_won.append(plain / total)
            row_tied.append(tied / total)
        won.append(tuple(row_won))
        with_one_at.append(tuple(row_tied))
    return tuple(won), tuple(with_one_at)


@cache
def _shared_wrong(n: int, options: int, tie: str) -> dict[tuple[int, int, int], Fraction]:
    """``[(j, r, W)]``: the chance the right answer wins with r right votes when j experts
    copy a shared wrong answer and W independent wrong votes spread uniformly over all
    ``options - 1`` wrong answers (c of them on the shared one)."""
    buckets = options - 1
    won, with_one_at = _tables(n, buckets - 1, tie)
    on_shared = Fraction(1, buckets)
    out: dict[tuple[int, int, int], Fraction] = {}
    for copiers in range(n + 1):
        for right in range(n - copiers + 1):
            spread = n - copiers - right
            chance = Fraction(0)
            for c, weight in enumerate(_binomial(spread, on_shared)):
                shared = copiers + c
                if shared < right:
                    chance += weight * won[spread - c][right]
                elif shared == right:
                    chance += weight * with_one_at[spread - c][right]
            out[copiers, right, spread] = chance
    return out


def plurality_accuracy(n: int, skill: float, options: int, tie: str = "random") -> float:
    """The chance that a plurality of ``n`` independent experts is right.

    Each expert is right with probability ``skill`` and otherwise picks one of the
    ``options - 1`` wrong answers uniformly; ties are settled by ``tie`` (module docstring).
    With two options and odd n this is P[Bin(n, skill) > n/2]; with even n a tie is worth
    one half. Exact (no sampling); each (n, options) costs a dynamic programme once.
    """
    _check(n, skill, options, tie)
    s = Fraction(skill)
    won, _ = _tables(n, options - 1, tie)
    return float(sum(weight * won[n - right][right] for right, weight in enumerate(_binomial(n, s))))


def correlated_plurality_accuracy(n: int, skill: float, options: int, correlation: float,
                                  tie: str = "random") -> float:
    """The chance that a plurality of ``n`` experts following the one-factor model is right.

    The model (the one the simulated solver uses). Per item, one *shared* draw L and, per
    expert i, one *own* draw Dᵢ, all independent, each right with probability ``skill`` and
    otherwise a wrong answer chosen uniformly among the ``options - 1``. Independently per
    expert, with probability q = sqrt(``correlation``) the expert answers L, otherwise Dᵢ.
    Every expert is right with probability ``skill``, and two experts' correctness
    indicators have covariance q²·skill·(1 - skill) (only when both copy L are their answers
    dependent), i.e. phi correlation exactly ``correlation`` when 0 < skill < 1. Two wrong
    experts who both copied L give the same wrong answer, so correlated errors also
    concentrate on one wrong option.

    Exact: conditioned on the number j of experts copying L and on whether L is right, the
    remaining votes are independent draws. ``correlation = 0`` is :func:`plurality_accuracy`;
    ``correlation = 1`` is exactly ``skill`` (every expert answers L).
    """
    _check(n, skill, options, tie)
    if isinstance(correlation, bool) or not isinstance(correlation, int | float) or not 0 <= correlation <= 1:
        raise ValueError(f"correlation: must be in [0, 1], got {correlation!r}")
    s = Fraction(skill)
    q = Fraction(math.sqrt(correlation))
    won, _ = _tables(n, options - 1, tie)
    shared_wrong = _shared_wrong(n, options, tie)
    total = Fraction(0)
    for copiers, p_copiers in enumerate(_binomial(n, q)):
        if not p_copiers:
            continue
        own = n - copiers
        given = Fraction(0)
        for right, p_right in enumerate(_binomial(own, s)):
            spread = own - right
            # L right: the copiers vote with the right answer; L wrong: with one wrong answer
            given += p_right * (s * won[spread][copiers + right] + (1 - s) * shared_wrong[copiers, right, spread])
        total += p_copiers * given
    return float(total)


def majority_of_samples_accuracy(samples: int, skill: float, options: int, tie: str = "random") -> float:
    """Self-consistency: one model sampled ``samples`` times, the plurality answer taken.

    Under the simulation's model the samples are independent draws of one expert, so this
    is :func:`plurality_accuracy` with n = ``samples``; it has its own name so a report says
    which baseline it prints.
    """
    return plurality_accuracy(samples, skill, options, tie)


def conformity_flip_rates(n: int, skill: float, conformity: float) -> tuple[float, float]:
    """The expected (right→wrong, wrong→right) flip rates of a board's experts from round 1
    to round 2, on two-option items, for independent experts (correlation 0).

    The simulated solver's model of conformity: an expert's own answer is the same in every
    round; in a later round, with probability ``conformity`` (independently of everything
    else), it gives instead the plurality of the previous round's ``n`` answers, its own
    among them. An expert right in round 1 therefore turns wrong exactly when it conforms
    and that plurality is wrong. Given it is right, the other n - 1 experts' wrong answers
    W are Bin(n - 1, 1 - skill), independent of it; with two options the plurality of the n
    answers is wrong when W > n - W, i.e. 2W > n, and 2W = n is a tie, worth one half (the
    solver breaks it by the answers' string order, which favours neither the right nor the
    wrong answer across items). So

        right→wrong = conformity · (P[2W > n] + ½·P[2W = n]),  W ~ Bin(n - 1, 1 - skill)
        wrong→right = conformity · (P[2R > n] + ½·P[2R = n]),  R ~ Bin(n - 1, skill)

    (the second by the same argument for an expert wrong in round 1). With more options
    the wrong answers split and correlated experts are not independent given one of them,
    so no such closed form is offered for them. Exact, like the rest of this module.
    """
    _check(n, skill, 2, "random")
    if isinstance(conformity, bool) or not isinstance(conformity, int | float) or not 0 <= conformity <= 1:
        raise ValueError(f"conformity: must be in [0, 1], got {conformity!r}")
    c = Fraction(conformity)

    def against(p_other_side: Fraction) -> Fraction:
        weights = _binomial(n - 1, p_other_side)
        won = (w if 2 * k > n else w / 2 if 2 * k == n else Fraction(0) for k, w in enumerate(weights))
        return sum(won, Fraction(0))

    s = Fraction(skill)
    return float(c * against(1 - s)), float(c * against(s))
