"""The figures of an evaluation's report, one frozen value per thing measured, each with the
``as_json`` whose keys :mod:`.report` documents. Computed by :func:`.report.build_report`;
rendered as text by :mod:`.report_text` and as a page by ``orchestrator.api.ui.eval_page``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.evaluation.statistics import Flips, Paired, PositionBias, wilson_interval


@dataclass(frozen=True)
class Simulation:
    skill: float
    options: int
    correlation: float = 0.0
    conformity: float = 0.0
    position_bias: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"skill": self.skill, "correlation": self.correlation, "conformity": self.conformity,
                "position_bias": self.position_bias, "options": self.options}


@dataclass(frozen=True)
class ArmSpec:
    """One arm as the stored eval declares it."""

    name: str
    kind: str
    baseline: bool
    experts: int
    simulation: Simulation | None
    decide: str = "vote"  # a panel's protocol (deliberation.answers.Protocol)


@dataclass(frozen=True)
class TransitionFlips:
    """Flips from one round to the next: pooled over the experts, and each expert's. The
    intervals on the pooled rates treat each item as a cluster
    (:func:`~.statistics.clustered_interval`): the experts of one item flip together."""

    from_round: int
    pooled: Flips
    right_to_wrong_interval: tuple[float, float]
    wrong_to_right_interval: tuple[float, float]
    experts: tuple[tuple[str, Flips], ...]

    def as_json(self) -> dict[str, Any]:
        return {"from_round": self.from_round, "to_round": self.from_round + 1, **_flips(self.pooled),
                "right_to_wrong_interval": list(self.right_to_wrong_interval),
                "wrong_to_right_interval": list(self.wrong_to_right_interval),
                "experts": [{"expert": name, **_flips(f)} for name, f in self.experts]}


@dataclass(frozen=True)
class SelfPreference:
    """Reviews shown the reviewer's own answer: how often it was ranked first, against chance."""

    reviews: int
    self_first: int
    expected: float  # the chance share: Σ (own labels / labels shown) / reviews

    @property
    def rate(self) -> float:
        return self.self_first / self.reviews

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.self_first, self.reviews)

    def as_json(self) -> dict[str, Any]:
        return {"reviews": self.reviews, "self_first": self.self_first, "rate": self.rate,
                "expected": self.expected, "interval": list(self.interval)}


@dataclass(frozen=True)
class ReviewFigures:
    reviews: int
    unreadable: int  # reviews without a first-ranked label among those shown: left out
    position: PositionBias
    self_preference: SelfPreference | None

    @property
    def estimated_bias(self) -> float:
        """The share of reviews that put the first answer shown first whatever it said: with
        bias b, a review picks position 0 with probability b + (1 - b)·chance, so
        b = (observed - chance) / (1 - chance) — 0 when every review was shown one answer."""
        p = self.position
        return p.excess / (1 - p.expected) if p.expected < 1 else 0.0

    def as_json(self) -> dict[str, Any]:
        p = self.position
        return {"reviews": self.reviews, "unreadable": self.unreadable,
                "position_bias": {"reviews": p.reviews, "chose_first": p.chose_first, "observed": p.observed,
                                  "expected": p.expected, "excess": p.excess, "interval": list(p.interval),
                                  "p_value": p.p_value, "estimated_bias": self.estimated_bias},
                "self_preference": self.self_preference.as_json() if self.self_preference else None}


@dataclass(frozen=True)
class PanelFigures:
    items: int  # outcomes with rounds
    present: int
    lost: int
    flips: tuple[TransitionFlips, ...]
    agreement: float | None
    rounds_used: float
    rounds_planned: float
    early_stopped: int
    tokens_saved: int
    effective_votes: float | None
    effective_votes_experts: int
    effective_votes_items: int
    reviews: ReviewFigures | None
    effective_votes_interval: tuple[float, float] | None = None

    @property
    def lost_rate(self) -> float | None:
        return self.lost / self.present if self.present else None

    @property
    def early_stop_share(self) -> float:
        return self.early_stopped / self.items

    def as_json(self) -> dict[str, Any]:
        return {"items": self.items, "present": self.present, "lost": self.lost, "lost_rate": self.lost_rate,
                "flips": [f.as_json() for f in self.flips], "agreement": self.agreement,
                "rounds_used": self.rounds_used, "rounds_planned": self.rounds_planned,
                "early_stopped": self.early_stopped, "early_stop_share": self.early_stop_share,
                "tokens_saved": self.tokens_saved, "tokens_saved_per_item": self.tokens_saved / self.items,
                "effective_votes": self.effective_votes, "effective_votes_experts": self.effective_votes_experts,
                "effective_votes_items": self.effective_votes_items,
                "effective_votes_interval": list(self.effective_votes_interval)
                if self.effective_votes_interval else None,
                "reviews": self.reviews.as_json() if self.reviews else None}


@dataclass(frozen=True)
class TheoryFlips:
    """The expected round 1 → 2 flip rates under conformity, beside the measured intervals."""

    right_to_wrong_rate: float
    wrong_to_right_rate: float
    right_to_wrong_within: bool
    wrong_to_right_within: bool

    def as_json(self) -> dict[str, Any]:
        return {"from_round": 1, "to_round": 2, "right_to_wrong_rate": self.right_to_wrong_rate,
                "wrong_to_right_rate": self.wrong_to_right_rate, "right_to_wrong_within": self.right_to_wrong_within,
                "wrong_to_right_within": self.wrong_to_right_within}


@dataclass(frozen=True)
class TheoryReviews:
    """The share of reviews expected to rank the first answer shown first, b + (1 - b)·chance
    for the simulated position bias b, beside the measured interval."""

    first_rate: float
    within: bool

    def as_json(self) -> dict[str, Any]:
        return {"first_rate": self.first_rate, "within": self.within}


@dataclass(frozen=True)
class Theory:
    simulation: Simulation
    rule: str
    accuracy: float
    within: bool
    effective_votes: float | None
    flips: TheoryFlips | None
    #: whether ``rule`` is how the arm decides; False for a panel deciding by weighted vote,
    #: Borda or its chair, where plurality's value is shown for reference only
    exact: bool = True
    reviews: TheoryReviews | None = None
    #: whether ``effective_votes`` lies in the measured interval (None: no interval measured)
    effective_votes_within: bool | None = None

    def as_json(self) -> dict[str, Any]:
        return {"simulation": self.simulation.as_json(), "rule": self.rule, "exact": self.exact,
                "accuracy": self.accuracy, "within": self.within, "effective_votes": self.effective_votes,
                "effective_votes_within": self.effective_votes_within,
                "flips": self.flips.as_json() if self.flips else None,
                "reviews": self.reviews.as_json() if self.reviews else None}


@dataclass(frozen=True)
class ArmFigures:
    spec: ArmSpec
    items: int
    correct: int
    tokens: int
    failed: int
    cancelled: int
    panel: PanelFigures | None
    theory: Theory | None
    cost_usd: float | None = None  # US dollars, when every item's calls were priced

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.items if self.items else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.items)

    @property
    def tokens_per_item(self) -> float | None:
        return self.tokens / self.items if self.items else None

    @property
    def tokens_per_correct(self) -> float | None:
        return self.tokens / self.correct if self.correct else None

    @property
    def cost_per_item(self) -> float | None:
        return self.cost_usd / self.items if self.cost_usd is not None and self.items else None

    @property
    def cost_per_correct(self) -> float | None:
        return self.cost_usd / self.correct if self.cost_usd is not None and self.correct else None

    def as_json(self) -> dict[str, Any]:
        s = self.spec
        return {"name": s.name, "kind": s.kind, "baseline": s.baseline, "experts": s.experts,
                "items": self.items, "correct": self.correct, "accuracy": self.accuracy,
                "interval": list(self.interval), "tokens": self.tokens, "tokens_per_item": self.tokens_per_item,
                "tokens_per_correct": self.tokens_per_correct, "cost_usd": self.cost_usd,
                "cost_per_item": self.cost_per_item, "cost_per_correct": self.cost_per_correct,
                "failed": self.failed, "cancelled": self.cancelled,
                "panel": self.panel.as_json() if self.panel else None,
                "theory": self.theory.as_json() if self.theory else None}


@dataclass(frozen=True)
class PairFigures:
    """A non-baseline arm against a baseline arm, on the items both have."""

    arm: str
    baseline: str
    table: Paired

    def as_json(self) -> dict[str, Any]:
        t = self.table
        return {"arm": self.arm, "baseline": self.baseline, "items": t.n, "both_right": t.both_right,
                "only_arm": t.a_only, "only_baseline": t.b_only, "both_wrong": t.both_wrong,
                "difference": t.difference, "p_value": t.p_value}


def _flips(f: Flips) -> dict[str, Any]:
    return {"right_to_wrong": f.right_to_wrong, "wrong_to_right": f.wrong_to_right, "right_before": f.right_before,
            "wrong_before": f.wrong_before, "right_to_wrong_rate": f.right_to_wrong_rate,
            "wrong_to_right_rate": f.wrong_to_right_rate}
