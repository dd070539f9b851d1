"""An expert's verdict: the machine-readable end of a turn.

Every turn of a plan that declares ``answer:`` ends with one line::

    Verdict: {"answer": "B", "confidence": 0.7, "reason": "the margin is too thin"}

:func:`read_verdict` finds the last such line (or a fenced JSON object holding an
``answer``), and validates it against the plan's answer spec: a choice must be one of the
options (or its letter, A for the first), a number must be finite, a confidence lies in
[0, 1]; ``ranking`` (an order of the options, best first) is optional and used by Borda.
What cannot be read is a :class:`MalformedVerdict` naming the problem; the runner asks
once for a repair, and a verdict still unreadable is stored as an abstention
(:func:`abstention`) — never a failed phase or plan.

A verdict is stored with its phase as JSON (:meth:`Verdict.as_json`), the same shape the
API shows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.deliberation.answers import ChoiceAnswer, NumberAnswer, TextAnswer, answer_key

Spec = ChoiceAnswer | NumberAnswer | TextAnswer
MAX_REASON = 300
MAX_TEXT_ANSWER = 500

_LINE = re.compile(r"^[ \t>*_#-]*verdict[ \t*_]*:[ \t*_]*(\{.*\})[ \t*_]*$", re.I | re.M)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)
_NUMBER = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?$")


class MalformedVerdict(ValueError):
    """A verdict that cannot be read; the message says what is wrong, for the repair request."""


@dataclass(frozen=True)
class Verdict:
    answer: str | float | None  # None: an abstention
    confidence: float
    reason: str
    ranking: tuple[str, ...] = ()
    problem: str | None = None  # why it is an abstention
    repaired: bool = False  # read from the answer to the repair request

    @property
    def abstained(self) -> bool:
        return self.answer is None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"answer": self.answer, "confidence": self.confidence, "reason": self.reason}
        if self.ranking:
            data["ranking"] = list(self.ranking)
        if self.problem:
            data["abstained"] = self.problem
        if self.repaired:
            data["repaired"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        """A stored verdict (:meth:`as_json`) back, as it was validated."""
        answer = data.get("answer")
        return cls(answer=float(answer) if isinstance(answer, int | float) and not isinstance(answer, bool)
                   else answer, confidence=float(data.get("confidence", 0.0)), reason=str(data.get("reason", "")),
                   ranking=tuple(data.get("ranking") or ()), problem=data.get("abstained"),
                   repaired=bool(data.get("repaired")))


def abstention(problem: str, *, repaired: bool = False) -> Verdict:
    return Verdict(answer=None, confidence=0.0, reason="", problem=problem[:MAX_REASON], repaired=repaired)


def read_verdict(text: str, spec: Spec, *, labels: Sequence[str] = ()) -> Verdict:
    """The verdict at the end of ``text``, validated against ``spec``; raises :class:`MalformedVerdict`.
    ``labels``: a review's — its ``ranking`` orders those labels (every one, each once), not options."""
    raw = _last_object(text)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedVerdict(f"the verdict is not valid JSON ({exc.msg})") from None
    except ValueError:  # an integer longer than Python converts (sys.get_int_max_str_digits)
        raise MalformedVerdict("the verdict holds a number too long to read") from None
    if not isinstance(data, dict):
        raise MalformedVerdict("the verdict must be a JSON object")
    unknown = sorted(set(data) - {"answer", "confidence", "reason", "ranking"})
    if unknown:
        raise MalformedVerdict(f"unknown field(s) in the verdict: {', '.join(unknown)}")
    if "answer" not in data:
        raise MalformedVerdict("the verdict has no 'answer'")
    answer = read_answer(spec, data["answer"])
    confidence = data.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        raise MalformedVerdict("'confidence' must be a number from 0 to 1")
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        raise MalformedVerdict("'reason' must be a string")
    reason = " ".join(reason.split())
    if len(reason) > MAX_REASON:
        reason = reason[: MAX_REASON - 1].rstrip() + "…"
    ranking = _labels(data.get("ranking"), labels) if labels else _ranking(spec, data.get("ranking"), answer)
    return Verdict(answer=answer, confidence=float(confidence), reason=reason, ranking=ranking)


def read_answer(spec: Spec, value: Any) -> str | float:
    """An answer as the spec allows it: an option (its declared spelling), a finite number,
    or a short text. Raises :class:`MalformedVerdict`."""
    if isinstance(spec, NumberAnswer):
        number = _number(value)
        if number is None:
            raise MalformedVerdict("'answer' must be a number")
        return number
    if not isinstance(value, str) or not value.strip():
        raise MalformedVerdict("'answer' must be a non-empty string")
    if isinstance(spec, ChoiceAnswer):
        return _option(spec, value)
    text = " ".join(value.split())
    if len(text) > MAX_TEXT_ANSWER:
        raise MalformedVerdict(f"'answer' is longer than {MAX_TEXT_ANSWER} characters")
    return text


def _option(spec: ChoiceAnswer, value: str) -> str:
    try:  # an option as written first: the option "C" is not the third option's letter
        return answer_key(spec, value)
    except StopIteration:
        pass
    letter = value.strip().rstrip(").:").upper()
    if len(letter) == 1 and "A" <= letter <= "Z" and ord(letter) - 65 < len(spec.options):
        return spec.options[ord(letter) - 65]
    raise MalformedVerdict(f"'answer' must be one of: {', '.join(spec.options)}")


def _ranking(spec: Spec, value: Any, answer: str | float) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(spec, ChoiceAnswer):
        raise MalformedVerdict("'ranking' is only for an answer among options")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MalformedVerdict("'ranking' must be a list of options, best first")
    ranked = tuple(_option(spec, v) for v in value)
    if len(set(ranked)) != len(ranked):
        raise MalformedVerdict("'ranking' names an option twice")
    if ranked and ranked[0] != answer:
        raise MalformedVerdict("'ranking' must start with the answer")
    return ranked


def _labels(value: Any, labels: Sequence[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MalformedVerdict(f"'ranking' must list the labels {', '.join(labels)}, best first")
    ranked = tuple(v.strip().upper() for v in value)
    if sorted(ranked) != sorted(labels):
        raise MalformedVerdict(f"'ranking' must name each of {', '.join(labels)} once")
    return ranked


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an int no float can hold (10^400 written out)
            return None
    elif isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value.strip().replace(",", ""))
    else:
        return None
    return number if math.isfinite(number) else None


def _last_object(text: str) -> str:
    lines = list(_LINE.finditer(text))
    if lines:
        return lines[-1].group(1)
    fenced = [m.group(1) for m in _FENCED.finditer(text) if '"answer"' in m.group(1)]
    if fenced:
        return fenced[-1]
    raise MalformedVerdict("no line beginning 'Verdict:' followed by a JSON object")
