"""What one item of one arm of an evaluation came to: the facts a report is computed from.

The harness (:mod:`.harness`) reads them from the stored plans — one durable plan per item
and arm — and the report (:mod:`.report`) computes every figure from them alone, so a report
can be rebuilt at any time from what Postgres holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Answer = str | float | None  # None: no answer (every expert abstained, or the plan did not complete)


@dataclass(frozen=True)
class ItemOutcome:
    arm: str  # the arm's name: "panel", "single", "self_consistency", or one the eval names
    item_id: str
    expected: str | float
    answer: Answer  # the arm's answer: the decision's (tallied), else the chair's verdict
    correct: bool
    plan_id: str
    status: str  # the plan's status: completed | failed | cancelled
    tokens: int  # the plan's total tokens (usage rows, waste excluded)
    cost_usd: float | None = None  # what they cost, when every call's model had a price
    #: per round (in order), each expert's answer that round: a board's rounds, a team's one
    #: round of expert phases then one per debate; None for an abstention
    rounds: list[dict[str, Answer]] = field(default_factory=list)
    #: the same, graded by the eval's scorer: whether each expert's answer was right
    rounds_correct: list[dict[str, bool]] = field(default_factory=list)
    rounds_planned: int = 1  # a board's rounds; 1 for a team
    early_stopped: bool = False
    tokens_saved: int = 0  # estimated tokens of the rounds an early stop skipped
    #: each anonymized review: the reviewer, the labels shown in order, the authors behind them,
    #: and the ranking given (labels, best first); empty without a review round
    reviews: list[dict[str, Any]] = field(default_factory=list)

    @property
    def present(self) -> bool:
        """Some expert gave the right answer in some round."""
        return any(any(r.values()) for r in self.rounds_correct)

    @property
    def lost(self) -> bool:
        """The right answer was in the room and the arm's answer is wrong."""
        return self.present and not self.correct
