"""Whether an answer is right: the eval's scorer, one for the arm's answer and every expert's.

- ``exact`` — the answer reads as the expected one after normalisation (case, spacing,
  punctuation at the ends: :func:`~orchestrator.deliberation.answers.normalise_text`); a
  numeric item's answer must equal the expected number;
- ``numeric`` — both read as numbers and differ by at most the eval's ``tolerance`` (answers
  that are not numbers fall back on ``exact``);
- ``judge`` — the verdict of the judge plan of that item and answer (:mod:`.arms`): right
  when its decision is ``correct``; an answer not judged (yet) is not counted right.

No answer (every expert abstained, the plan failed or was cancelled) is never right.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from orchestrator.deliberation.answers import normalise_text
from orchestrator.evaluation.arms import answer_text

Answer = str | float | None


def number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            parsed = float(value.replace(",", "").strip())
        except ValueError:
            return None
        return parsed if math.isfinite(parsed) else None
    return None


@dataclass
class Scorer:
    method: str  # exact | numeric | judge
    tolerance: float = 0.0
    #: (item id, normalised answer) -> the judge's grade; filled as judge plans end
    judged: dict[tuple[str, str], bool] = field(default_factory=dict)

    @classmethod
    def of(cls, record: dict[str, Any]) -> Scorer:
        scoring = record["scoring"]
        return cls(method=scoring["method"], tolerance=float(scoring["tolerance"]))

    def grade(self, item: dict[str, Any], answer: Answer) -> bool:
        if answer is None:
            return False
        expected = item["answer"]
        if self.method == "judge":
            return self.judged.get(judge_key(item, answer), False)
        if self.method == "numeric" or item.get("choices") is None:
            a, b = number(answer), number(expected)
            if a is not None and b is not None:
                return abs(a - b) <= (self.tolerance if self.method == "numeric" else 0.0)
            if item.get("choices") is None:
                return False
        return normalise_text(answer_text(answer)) == normalise_text(answer_text(expected))

    def is_judged(self, item: dict[str, Any], answer: Answer) -> bool:
        return answer is None or self.method != "judge" or judge_key(item, answer) in self.judged


def judge_key(item: dict[str, Any], answer: str | float) -> tuple[str, str]:
    return (str(item["id"]), normalise_text(answer_text(answer)))
