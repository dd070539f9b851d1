"""Two runs of an evaluation side by side (``conclave eval compare A B``): for every arm both
reports have (matched by name), each run's accuracy with its 95 % Wilson interval, and by how
much B's exceeds A's, with a 95 % interval on that difference.

The runs are independent samples — other items, or the same items answered again — so the
difference's interval is Newcombe's hybrid score interval for two independent proportions
(Newcombe 1998, method 10), built from the two Wilson intervals: for d = p_B - p_A,

    low  = d - sqrt((p_B - l_B)² + (u_A - p_A)²)
    high = d + sqrt((u_B - p_B)² + (p_A - l_A)²)

It is honest where the normal interval on a difference is not (small n, accuracies near 0
or 1). Runs on the very same items would deserve the paired test instead; a report keeps
no per-item answers, so it cannot tell.

:meth:`Comparison.as_json`::

    {"a", "b", "arms": [{"name", "a": {"items", "correct", "accuracy", "interval"},
                         "b": {…the same}, "difference", "difference_interval"}],
     "only_a": [names], "only_b": [names]}

``difference`` and its interval are ``null`` when either run has no items in the arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.evaluation.figures import ArmFigures
from orchestrator.evaluation.report import Report
from orchestrator.evaluation.tables import grid, percent, span


@dataclass(frozen=True)
class ArmComparison:
    name: str
    a: ArmFigures
    b: ArmFigures

    @property
    def difference(self) -> float | None:
        if self.a.accuracy is None or self.b.accuracy is None:
            return None
        return self.b.accuracy - self.a.accuracy

    @property
    def difference_interval(self) -> tuple[float, float] | None:
        if self.a.accuracy is None or self.b.accuracy is None:
            return None
        pa, (la, ua) = self.a.accuracy, self.a.interval
        pb, (lb, ub) = self.b.accuracy, self.b.interval
        d = pb - pa
        return (max(-1.0, d - math.hypot(pb - lb, ua - pa)), min(1.0, d + math.hypot(ub - pb, pa - la)))

    def as_json(self) -> dict[str, Any]:
        interval = self.difference_interval
        return {"name": self.name, "a": _side(self.a), "b": _side(self.b), "difference": self.difference,
                "difference_interval": list(interval) if interval else None}


@dataclass(frozen=True)
class Comparison:
    a: str  # the first report's eval name
    b: str
    arms: tuple[ArmComparison, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "arms": [x.as_json() for x in self.arms], "only_a": list(self.only_a),
                "only_b": list(self.only_b)}

    def table(self) -> str:
        """One row per arm in both runs, at most 100 columns; the arms of one run only below."""
        rows = [[x.name, str(x.a.items), percent(x.a.accuracy), span(x.a.interval), str(x.b.items),
                 percent(x.b.accuracy), span(x.b.interval),
                 "-" if x.difference is None else f"{100 * x.difference:+.1f}",
                 "-" if x.difference_interval is None
                 else f"{100 * x.difference_interval[0]:+.1f} to {100 * x.difference_interval[1]:+.1f}"]
                for x in self.arms]
        text = grid(f"A = {self.a}, B = {self.b} (accuracy and 95 % intervals in %; difference B - A in points)",
                    ["arm", "A items", "A acc", "A 95% CI", "B items", "B acc", "B 95% CI", "B - A", "95% CI"], rows)
        for label, names in (("only in A", self.only_a), ("only in B", self.only_b)):
            if names:
                text += f"\n{label}: {', '.join(names)}"
        return text + "\n"


def compare_reports(a: Report, b: Report) -> Comparison:
    """Every arm of ``a`` that ``b`` also has, in ``a``'s order."""
    in_b = {x.name: x for x in b.arms}
    in_a = {x.name for x in a.arms}
    return Comparison(
        a=a.name, b=b.name,
        arms=tuple(ArmComparison(x.name, x, in_b[x.name]) for x in a.arms if x.name in in_b),
        only_a=tuple(x.name for x in a.arms if x.name not in in_b),
        only_b=tuple(x.name for x in b.arms if x.name not in in_a))


def _side(arm: ArmFigures) -> dict[str, Any]:
    return {"items": arm.items, "correct": arm.correct, "accuracy": arm.accuracy, "interval": list(arm.interval)}
