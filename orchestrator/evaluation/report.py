"""The report of an evaluation: every figure ``conclave eval`` prints, computed from the stored
eval and its items' outcomes alone, so it can be rebuilt at any time from what Postgres holds.

**Input.** :func:`build_report` takes the stored eval (``eval_record``) and the
:class:`~.outcomes.ItemOutcome` of every item of every arm. ``eval_record`` is a mapping with
at least these keys (others are ignored)::

    {
      "name": "arith-400",                 # the eval's name, non-empty
      "arms": [                            # non-empty; names unique; the report keeps this order
        {
          "name": "panel",                 # non-empty; what ItemOutcome.arm says
          "kind": "panel",                 # "panel" | "single" | "self_consistency"
          "baseline": false,               # a baseline: every other arm is paired against it
          "experts": 5,                    # panel: its experts; self_consistency: samples; single: 1
          "decide": "vote",                # a panel's protocol, default "vote" (the others ignore it)
          "simulation": null               # or, when the arm ran the offline simulated solver:
                                           # {"skill": 0.7,        in [0, 1], required
                                           #  "options": 2,        an integer >= 2, required (the choices
                                           #                       of an item; numeric items: 21, the
                                           #                       right value and the solver's 20 offsets)
                                           #  "correlation": 0.0,  in [0, 1], default 0
                                           #  "conformity": 0.0,   in [0, 1], default 0
                                           #  "position_bias": 0.0} in [0, 1], default 0
                                           # other keys of the solver's options (seed) are allowed
                                           # and ignored
        }
      ]
    }

A malformed record, an outcome of an arm the record does not name, or two outcomes of one
item in one arm raise :class:`InvalidReportInput`, naming what is wrong.

**Figures.** Per arm: items, correct, accuracy with its 95 % Wilson interval (a plan that did
not complete counts as a wrong answer), tokens in all, per item and per correct answer, failed
and cancelled plans. Every non-baseline arm is paired with every baseline arm on the items both
have: the 2 x 2 table, the accuracy difference (arm minus baseline) and the exact McNemar
p-value. An arm (but ``single``) whose outcomes have ``rounds`` (a panel, or samples recorded as one round) gets
the panel figures: how often the right answer was present and lost; right→wrong and
wrong→right flips for each pair of consecutive rounds, over every expert present in both
(pooled, with Wilson intervals widened by the clustering of the experts in an item, and per
expert); the agreement of the last round; rounds used and planned, early stops and the tokens they
saved; the effective number of independent votes (Kish's n / (1 + (n - 1)·mean phi) over
the experts' round-1 correctness, on the items where every expert answered round 1) with its
95 % interval (the mean phi's jackknife over the items); and, if
there are reviews, position bias (the position, among the labels shown, of the one ranked
first) and self-preference (how often a reviewer who was shown its own answer ranks it first,
against the 1/k chance). The reviews of one item are counted as independent there.

**Theory**, for an arm with ``simulation``: the accuracy the simulation's model predicts
(:mod:`.theory`: ``skill`` for a single call; the plurality of n independent or one-factor
correlated draws for a panel or self-consistency — the tally's rule, a tie of votes going to
the higher total confidence (``tie="confidence"``); a panel deciding by weighted vote, Borda
or its chair is shown plurality's value for reference, with ``exact`` false, and so is a
panel of later rounds under conformity where a round can tie — an even panel or more than
two options —, since a conforming expert takes the round's majority with ties broken by the
answers' order, not by confidence) and whether it lies in the measured interval;
the effective votes n / (1 + (n - 1)·correlation); and, on two options with correlation 0
and no early stop, the expected round 1 → 2 flip rates under conformity
(:func:`.theory.conformity_flip_rates`, whose docstring derives them); for reviews, the share
that rank the first answer shown first, b + (1 - b)·chance for the simulated position bias b
(the measured side estimates b itself: ``estimated_bias``).

**Output.** :meth:`Report.as_json` (keys below, all always present; a figure that is undefined
— an accuracy over no items — is ``null``) and :meth:`Report.table` (plain text, at most 100
columns, one row per arm in each section)::

    {"eval", "arms": [{"name", "kind", "baseline", "experts", "items", "correct", "accuracy",
                       "interval": [low, high], "tokens", "tokens_per_item", "tokens_per_correct",
                       "cost_usd", "cost_per_item", "cost_per_correct",   # US dollars, null when unpriced
                       "failed", "cancelled", "panel": null | PANEL, "theory": null | THEORY}],
     "paired": [{"arm", "baseline", "items", "both_right", "only_arm", "only_baseline",
                 "both_wrong", "difference", "p_value"}]}
    PANEL  = {"items", "present", "lost", "lost_rate", "flips": [FLIPS], "agreement",
              "rounds_used", "rounds_planned", "early_stopped", "early_stop_share",
              "tokens_saved", "tokens_saved_per_item", "effective_votes",
              "effective_votes_experts", "effective_votes_items", "effective_votes_interval",
              "reviews": null | REVIEWS}
    FLIPS  = {"from_round", "to_round", "right_to_wrong", "wrong_to_right", "right_before",
              "wrong_before", "right_to_wrong_rate", "wrong_to_right_rate",
              "right_to_wrong_interval", "wrong_to_right_interval",
              "experts": [{"expert", "right_to_wrong", "wrong_to_right", "right_before",
                           "wrong_before", "right_to_wrong_rate", "wrong_to_right_rate"}]}
    REVIEWS = {"reviews", "unreadable",
               "position_bias": {"reviews", "chose_first", "observed", "expected", "excess",
                                 "interval", "p_value", "estimated_bias"},
               "self_preference": null | {"reviews", "self_first", "rate", "expected", "interval"}}
    THEORY = {"simulation": {"skill", "correlation", "conformity", "position_bias", "options"},
              "rule", "exact", "accuracy", "within", "effective_votes", "effective_votes_within",
              "reviews": null | {"first_rate", "within"},
              "flips": null | {"from_round", "to_round", "right_to_wrong_rate",
                               "wrong_to_right_rate", "right_to_wrong_within",
                               "wrong_to_right_within"}}

``rule`` is ``skill``, ``plurality``, ``majority_of_samples`` or ``correlated_plurality``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, get_args

from orchestrator.deliberation.answers import Protocol
from orchestrator.evaluation.figures import (
    ArmFigures,
    ArmSpec,
    PairFigures,
    PanelFigures,
    ReviewFigures,
    SelfPreference,
    Simulation,
    Theory,
    TheoryFlips,
    TheoryReviews,
    TransitionFlips,
)
from orchestrator.evaluation.outcomes import Answer, ItemOutcome
from orchestrator.evaluation.report_text import report_table
from orchestrator.evaluation.statistics import (
    Flips,
    Paired,
    agreement_rate,
    clustered_interval,
    effective_votes,
    effective_votes_interval,
    flip_rates,
    paired,
    position_bias,
)
from orchestrator.evaluation.theory import (
    conformity_flip_rates,
    correlated_plurality_accuracy,
    majority_of_samples_accuracy,
    plurality_accuracy,
)

KINDS = ("panel", "single", "self_consistency")
PROTOCOLS = get_args(Protocol)
PLURALITY_RULES = ("vote", "consensus")  # decide by the latest round's plurality (consensus: at its round limit)
TIE = "confidence"  # how the tally breaks a tie of votes (:func:`~orchestrator.deliberation.protocols.tally`)


class InvalidReportInput(ValueError):
    """The stored eval or its outcomes break the input contract (module docstring)."""


@dataclass(frozen=True)
class Report:
    name: str
    arms: tuple[ArmFigures, ...]
    pairs: tuple[PairFigures, ...]

    def arm(self, name: str) -> ArmFigures:
        for figures in self.arms:
            if figures.name == name:
                return figures
        raise KeyError(name)

    def as_json(self) -> dict[str, Any]:
        return {"eval": self.name, "arms": [a.as_json() for a in self.arms],
                "paired": [p.as_json() for p in self.pairs]}

    def table(self) -> str:
        """The plain-text tables of ``conclave eval`` (:mod:`.report_text`)."""
        return report_table(self.name, self.arms, self.pairs)


def build_report(eval_record: Mapping[str, Any], outcomes: Sequence[ItemOutcome]) -> Report:
    """Every figure of the module docstring, from the stored eval and its outcomes."""
    name, specs = _read_record(eval_record)
    by_arm: dict[str, dict[str, ItemOutcome]] = {s.name: {} for s in specs}
    for o in outcomes:
        if o.arm not in by_arm:
            raise InvalidReportInput(f"outcome of item {o.item_id!r}: arm {o.arm!r} is not one of the eval's arms")
        if o.item_id in by_arm[o.arm]:
            raise InvalidReportInput(f"arm {o.arm!r}: item {o.item_id!r} has two outcomes")
        by_arm[o.arm][o.item_id] = o
    arms = tuple(_arm(s, list(by_arm[s.name].values())) for s in specs)
    pairs = tuple(PairFigures(a.name, b.name, _pair(by_arm[a.name], by_arm[b.name]))
                  for a in specs if not a.baseline for b in specs if b.baseline)
    return Report(name, arms, pairs)


def _read_record(record: Mapping[str, Any]) -> tuple[str, list[ArmSpec]]:
    if not isinstance(record, Mapping):
        raise InvalidReportInput("eval_record: must be a mapping")
    name = record.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidReportInput("name: must be a non-empty string")
    arms = record.get("arms")
    if not isinstance(arms, Sequence) or isinstance(arms, str) or not arms:
        raise InvalidReportInput("arms: must be a non-empty list")
    specs = [_read_arm(i, arm) for i, arm in enumerate(arms)]
    seen = Counter(s.name for s in specs)
    twice = sorted(n for n, c in seen.items() if c > 1)
    if twice:
        raise InvalidReportInput(f"arms: the name {twice[0]!r} is used twice")
    return name, specs


def _read_arm(i: int, arm: object) -> ArmSpec:
    where = f"arms[{i}]"
    if not isinstance(arm, Mapping):
        raise InvalidReportInput(f"{where}: must be a mapping")
    name, kind, baseline, experts = arm.get("name"), arm.get("kind"), arm.get("baseline"), arm.get("experts")
    decide = arm.get("decide", "vote")
    if not isinstance(name, str) or not name:
        raise InvalidReportInput(f"{where}.name: must be a non-empty string")
    if kind not in KINDS:
        raise InvalidReportInput(f"{where}.kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(baseline, bool):
        raise InvalidReportInput(f"{where}.baseline: must be true or false")
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
        raise InvalidReportInput(f"{where}.experts: must be a positive integer, got {experts!r}")
    if decide not in PROTOCOLS:
        raise InvalidReportInput(f"{where}.decide: must be one of {', '.join(PROTOCOLS)}, got {decide!r}")
    simulation = arm.get("simulation")
    return ArmSpec(name, kind, baseline, experts,
                   None if simulation is None else _read_simulation(f"{where}.simulation", simulation), decide)


def _read_simulation(where: str, sim: object) -> Simulation:
    if not isinstance(sim, Mapping):
        raise InvalidReportInput(f"{where}: must be null or a mapping")
    probabilities = {}
    for key, default in (("skill", None), ("correlation", 0.0), ("conformity", 0.0), ("position_bias", 0.0)):
        value = sim.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise InvalidReportInput(f"{where}.{key}: must be a number in [0, 1], got {value!r}")
        probabilities[key] = float(value)
    options = sim.get("options")
    if isinstance(options, bool) or not isinstance(options, int) or options < 2:
        raise InvalidReportInput(f"{where}.options: must be an integer of at least 2, got {options!r}")
    return Simulation(skill=probabilities["skill"], options=options, correlation=probabilities["correlation"],
                      conformity=probabilities["conformity"], position_bias=probabilities["position_bias"])


def _arm(spec: ArmSpec, outcomes: list[ItemOutcome]) -> ArmFigures:
    correct = sum(1 for o in outcomes if o.correct)
    figures = ArmFigures(
        spec=spec, items=len(outcomes), correct=correct, tokens=sum(o.tokens for o in outcomes),
        cost_usd=_cost(outcomes),
        failed=sum(1 for o in outcomes if o.status == "failed"),
        cancelled=sum(1 for o in outcomes if o.status == "cancelled"),
        panel=None if spec.kind == "single" else _panel(outcomes), theory=None)  # one voter deliberates nothing
    if spec.simulation is None:
        return figures
    return replace(figures, theory=_theory(spec, spec.simulation, figures))


def _pair(arm: dict[str, ItemOutcome], baseline: dict[str, ItemOutcome]) -> Paired:
    common = sorted(arm.keys() & baseline.keys())
    return paired([arm[i].correct for i in common], [baseline[i].correct for i in common])


def _panel(outcomes: list[ItemOutcome]) -> PanelFigures | None:
    deliberated = [o for o in outcomes if o.rounds]
    if not deliberated:
        return None
    votes, experts, items, votes_interval = _effective_votes(deliberated)
    last = [[_key(a) for a in o.rounds[-1].values()] for o in deliberated if o.rounds[-1]]
    return PanelFigures(
        items=len(deliberated),
        present=sum(1 for o in outcomes if o.present),
        lost=sum(1 for o in outcomes if o.lost),
        flips=_flips_between_rounds(deliberated),
        agreement=agreement_rate(last) if last else None,
        rounds_used=sum(len(o.rounds) for o in deliberated) / len(deliberated),
        rounds_planned=sum(o.rounds_planned for o in deliberated) / len(deliberated),
        early_stopped=sum(1 for o in deliberated if o.early_stopped),
        tokens_saved=sum(o.tokens_saved for o in deliberated),
        effective_votes=votes, effective_votes_experts=experts, effective_votes_items=items,
        effective_votes_interval=votes_interval, reviews=_reviews(outcomes),
    )


def _key(answer: Answer) -> str | None:
    """An answer as the agreement counts it: numbers by their value (12 and 12.0 agree)."""
    if answer is None:
        return None
    return f"{answer:g}" if isinstance(answer, float) else str(answer)


def _flips_between_rounds(outcomes: list[ItemOutcome]) -> tuple[TransitionFlips, ...]:
    """Per consecutive pair of rounds, each expert's correctness before and after, over the
    items and experts present in both rounds."""
    deepest = max(len(o.rounds_correct) for o in outcomes)
    found = []
    for t in range(deepest - 1):
        pooled: tuple[list[bool], list[bool]] = ([], [])
        per_expert: dict[str, tuple[list[bool], list[bool]]] = {}
        per_item: list[Flips] = []
        for o in outcomes:
            if len(o.rounds_correct) <= t + 1:
                continue
            before, after = o.rounds_correct[t], o.rounds_correct[t + 1]
            here: tuple[list[bool], list[bool]] = ([], [])
            for expert in sorted(before.keys() & after.keys()):
                for into in (pooled, per_expert.setdefault(expert, ([], [])), here):
                    into[0].append(before[expert])
                    into[1].append(after[expert])
            per_item.append(flip_rates(*here))
        found.append(TransitionFlips(
            from_round=t + 1, pooled=flip_rates(*pooled),
            right_to_wrong_interval=clustered_interval([f.right_to_wrong for f in per_item],
                                                       [f.right_before for f in per_item]),
            wrong_to_right_interval=clustered_interval([f.wrong_to_right for f in per_item],
                                                       [f.wrong_before for f in per_item]),
            experts=tuple((e, flip_rates(*per_expert[e])) for e in sorted(per_expert))))
    return tuple(found)


def _effective_votes(outcomes: list[ItemOutcome]) -> tuple[float | None, int, int, tuple[float, float] | None]:
    """``(effective votes, experts, items, its 95 % interval)`` over round 1, on the items
    where every expert seen in any item's round 1 answered it."""
    firsts = [o.rounds_correct[0] for o in outcomes if o.rounds_correct and o.rounds_correct[0]]
    experts = sorted({e for first in firsts for e in first})
    complete = [first for first in firsts if all(e in first for e in experts)]
    if not experts or not complete:
        return None, len(experts), 0, None
    correct = [[first[e] for first in complete] for e in experts]
    return effective_votes(correct), len(experts), len(complete), effective_votes_interval(correct)


def _reviews(outcomes: list[ItemOutcome]) -> ReviewFigures | None:
    reviews = [r for o in outcomes for r in o.reviews]
    if not reviews:
        return None
    positions, shown = [], []
    self_reviews = self_first = 0
    self_chance = 0.0
    for review in reviews:
        labels, ranking = review.get("labels"), review.get("ranking")
        if not isinstance(labels, list) or not isinstance(ranking, list) or not ranking or ranking[0] not in labels:
            continue
        first = labels.index(ranking[0])
        positions.append(first)
        shown.append(len(labels))
        authors = review.get("authors")
        reviewer = review.get("reviewer")
        if not isinstance(authors, list) or len(authors) != len(labels):
            continue
        own = [i for i, a in enumerate(authors) if a == reviewer or (isinstance(a, list) and reviewer in a)]
        if own:  # the reviewer was shown its own answer: exclude_self was off
            self_reviews += 1
            self_first += first in own
            self_chance += len(own) / len(labels)
    preference = SelfPreference(self_reviews, self_first, self_chance / self_reviews) if self_reviews else None
    return ReviewFigures(reviews=len(positions), unreadable=len(reviews) - len(positions),
                         position=position_bias(positions, shown), self_preference=preference)


def _cost(outcomes: list[ItemOutcome]) -> float | None:
    """The arm's dollars, if every item's were known (a sum that leaves items out is no cost)."""
    if not outcomes or any(o.cost_usd is None for o in outcomes):
        return None
    return sum(o.cost_usd or 0.0 for o in outcomes)


def _theory(spec: ArmSpec, sim: Simulation, measured: ArmFigures) -> Theory:
    n = spec.experts
    if spec.kind == "single":
        rule, accuracy = "skill", sim.skill
    elif sim.correlation > 0:
        rule = "correlated_plurality"
        accuracy = correlated_plurality_accuracy(n, sim.skill, sim.options, sim.correlation, tie=TIE)
    elif spec.kind == "self_consistency":
        rule, accuracy = "majority_of_samples", majority_of_samples_accuracy(n, sim.skill, sim.options, tie=TIE)
    else:
        rule, accuracy = "plurality", plurality_accuracy(n, sim.skill, sim.options, tie=TIE)
    low, high = measured.interval
    votes = None if spec.kind == "single" else n / (1 + (n - 1) * sim.correlation)
    conforming = (sim.conformity > 0 and measured.panel is not None and measured.panel.rounds_planned > 1
                  and (sim.options > 2 or n % 2 == 0))
    exact = spec.kind != "panel" or (spec.decide in PLURALITY_RULES and not conforming)
    measured_votes = None if measured.panel is None else measured.panel.effective_votes_interval
    return Theory(simulation=sim, rule=rule, accuracy=accuracy, within=low <= accuracy <= high,
                  effective_votes=votes, flips=_theory_flips(spec, sim, measured.panel), exact=exact,
                  reviews=_theory_reviews(sim, measured.panel),
                  effective_votes_within=None if votes is None or measured_votes is None else
                  _inside(votes, measured_votes))


def _theory_reviews(sim: Simulation, panel: PanelFigures | None) -> TheoryReviews | None:
    """A reviewer of the simulation ranks the labels as shown with probability
    ``position_bias``, else by its own answer, the order shown drawn at random: so position 0
    comes first with probability b + (1 - b)·(1/k), averaged over the reviews' k."""
    if panel is None or panel.reviews is None or not panel.reviews.reviews:
        return None
    position = panel.reviews.position
    rate = sim.position_bias + (1 - sim.position_bias) * position.expected
    return TheoryReviews(rate, _inside(rate, position.interval))


def _theory_flips(spec: ArmSpec, sim: Simulation, panel: PanelFigures | None) -> TheoryFlips | None:
    """Only where :func:`.theory.conformity_flip_rates` holds: a panel on two options with
    independent experts, and no early stop (the items that reach round 2 would otherwise be
    the ones the panel disagreed on)."""
    if (spec.kind != "panel" or sim.options != 2 or sim.correlation != 0 or panel is None or not panel.flips
            or panel.early_stopped):
        return None
    right_to_wrong, wrong_to_right = conformity_flip_rates(spec.experts, sim.skill, sim.conformity)
    first = panel.flips[0]
    return TheoryFlips(right_to_wrong, wrong_to_right,
                       right_to_wrong_within=_inside(right_to_wrong, first.right_to_wrong_interval),
                       wrong_to_right_within=_inside(wrong_to_right, first.wrong_to_right_interval))


def _inside(value: float, interval: tuple[float, float]) -> bool:
    return interval[0] <= value <= interval[1]
