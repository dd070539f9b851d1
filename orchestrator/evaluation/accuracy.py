"""Each arm's accuracy with its 95 % interval, and two evals side by side (``conclave eval compare``).

The full report (intervals, paired tests against each baseline, cost per correct answer, flips,
effective votes, …) is :mod:`.report`'s; this is the small part ``compare`` needs, and the
table ``conclave eval`` prints when the report module is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.evaluation.outcomes import ItemOutcome
from orchestrator.evaluation.statistics import paired, wilson_interval


@dataclass(frozen=True)
class ArmAccuracy:
    arm: str
    items: int
    correct: int
    failed: int  # plans that did not complete (counted wrong)
    tokens: int

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.items if self.items else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.items)

    @property
    def tokens_per_item(self) -> float | None:
        return self.tokens / self.items if self.items else None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.accuracy, "interval": list(self.interval),
                "tokens_per_item": self.tokens_per_item}


def by_arm(outcomes: Sequence[ItemOutcome]) -> list[ArmAccuracy]:
    """Per arm, in the order the arms first appear."""
    grouped: dict[str, list[ItemOutcome]] = {}
    for o in outcomes:
        grouped.setdefault(o.arm, []).append(o)
    return [ArmAccuracy(arm, len(os), sum(o.correct for o in os), sum(o.status != "completed" for o in os),
                        sum(o.tokens for o in os)) for arm, os in grouped.items()]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _span(interval: tuple[float, float]) -> str:
    return f"[{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def accuracy_table(name: str, arms: Sequence[ArmAccuracy]) -> str:
    rows = [["arm", "items", "correct", "accuracy", "95% interval", "tokens/item", "failed"]]
    rows += [[a.arm, str(a.items), str(a.correct), _pct(a.accuracy), _span(a.interval), _tokens(a.tokens_per_item),
              str(a.failed)] for a in arms]
    return f"eval {name}\n" + _grid(rows)


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths,
                                                                                              strict=True))).rstrip()
             for r in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


@dataclass(frozen=True)
class Comparison:
    """Two evals' accuracies per arm (the arms both have), and what the first gains."""

    a: str
    b: str
    rows: list[dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "arms": self.rows}

    def table(self) -> str:
        rows = [["arm", f"{self.a}", "95% interval", f"{self.b}", "95% interval", "difference", "paired p"]]
        for r in self.rows:
            a, b = r["a"], r["b"]
            rows.append([r["arm"], _pct(a["accuracy"]) if a else "-", _span(tuple(a["interval"])) if a else "-",
                         _pct(b["accuracy"]) if b else "-", _span(tuple(b["interval"])) if b else "-",
                         "-" if r["difference"] is None else f"{100 * r['difference']:+.1f} pts",
                         "-" if r["paired"] is None else
                         f"{r['paired']['p_value']:.3g} ({r['paired']['items']} items)"])
        return f"eval {self.a} against eval {self.b}\n" + _grid(rows)


def compare(a_name: str, a: Sequence[ItemOutcome], b_name: str, b: Sequence[ItemOutcome]) -> Comparison:
    """Accuracy per arm of ``a`` and ``b``, their difference, and — on the items both evals
    share, by item id — the exact McNemar test of the paired answers."""
    mine, theirs = {x.arm: x for x in by_arm(a)}, {x.arm: x for x in by_arm(b)}
    rows = []
    for arm in [*mine, *(k for k in theirs if k not in mine)]:
        x, y = mine.get(arm), theirs.get(arm)
        difference = None
        if x is not None and y is not None and x.accuracy is not None and y.accuracy is not None:
            difference = x.accuracy - y.accuracy
        left = {o.item_id: o.correct for o in a if o.arm == arm}
        right = {o.item_id: o.correct for o in b if o.arm == arm}
        shared = [i for i in left if i in right]
        test = paired([left[i] for i in shared], [right[i] for i in shared]) if shared else None
        rows.append({"arm": arm, "a": x.as_json() if x else None, "b": y.as_json() if y else None,
                     "difference": difference,
                     "paired": None if test is None else {"items": test.n, "a_only": test.a_only,
                                                          "b_only": test.b_only, "p_value": test.p_value}})
    return Comparison(a_name, b_name, rows)
