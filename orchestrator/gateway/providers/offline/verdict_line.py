"""Structured answers as the offline model reads and writes them: the answer spec a plan
declares (``hints["answer"]``), the peers' verdicts (``hints["peer_answers"]``), and the
one ``Verdict: {…}`` line an answer ends with.

It guarantees that a well-formed verdict line is one line of valid JSON (double quotes,
``answer``, ``confidence`` in [0, 1], a one-line ``reason``), that its answer has the
spec's shape (one of the options, a number, or text), and that a broken line (a fault
switch) is never valid JSON. Nothing here reads a request; a hint of the wrong shape is
read as the nearest sensible thing (an unknown type is text, a choice without options is
text), never as an error: the offline model is a stand-in, not a validator.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Answer = str | int | float

BROKEN_TURN = 'Verdict: {answer: maybe'  # what a turn ends with under malformed_verdict
BROKEN_REPAIR = 'Verdict: {"answer": "maybe", confidence: high'  # a repair, under "always"


@dataclass(frozen=True)
class AnswerSpec:
    """What shape an answer takes: ``type`` is ``choice`` (one of ``options``), ``number`` or ``text``."""

    type: str
    options: tuple[str, ...] = ()

    @classmethod
    def from_hint(cls, value: Any) -> AnswerSpec:
        if not isinstance(value, Mapping):
            return cls("text")
        kind = str(value.get("type") or "text").strip().lower()
        if kind == "choice":
            raw = value.get("options")
            options = tuple(dict.fromkeys(str(o) for o in raw)) if isinstance(raw, list | tuple) else ()
            return cls("choice", options) if options else cls("text")
        return cls("number") if kind == "number" else cls("text")

    def accepts(self, answer: Any) -> Answer | None:
        """``answer`` in this spec's shape (a choice as its option, a number as an int when
        whole), or None when it has another shape."""
        if answer is None or isinstance(answer, bool):
            return None
        if self.type == "choice":
            text = str(answer)
            return text if text in self.options else None
        if self.type == "number":
            return as_number(answer)
        text = str(answer).strip()
        return text or None

    def other_than(self, answer: Answer) -> Answer:
        """A different answer of the same shape: the next option, the number plus one, or other text."""
        if self.type == "choice":
            at = self.options.index(str(answer)) if str(answer) in self.options else -1
            if len(self.options) > 1 or at < 0:
                return self.options[(at + 1) % len(self.options)]
            return f"not {answer}"
        if self.type == "number":
            number = as_number(answer)
            return number + 1 if number is not None else 0
        return f"not {answer}"


def as_number(value: Any) -> int | float | None:
    """A finite number from an int, a float or numeric text (an int when whole), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value) if isinstance(value, float | str) else math.nan
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def majority(peers: Any, spec: AnswerSpec) -> Answer | None:
    """The most common answer of the latest round among the peers' verdicts
    (``[{"expert", "round", "answer"}]``), ties to the smallest by string order; None
    when no peer gave an answer of the spec's shape."""
    if not isinstance(peers, Sequence) or isinstance(peers, str):
        return None
    given: list[tuple[int, Answer]] = []
    for peer in peers:
        if not isinstance(peer, Mapping):
            continue
        answer = spec.accepts(peer.get("answer"))
        if answer is not None:
            given.append((_round(peer.get("round")), answer))
    if not given:
        return None
    latest = max(r for r, _ in given)
    counts = Counter(a for r, a in given if r == latest)
    return min(counts, key=lambda a: (-counts[a], str(a)))


def tally(peers: Any, spec: AnswerSpec, answer: Answer) -> tuple[int, int]:
    """``(k, n)``: of the n answers of the latest round among the peers' verdicts, k are ``answer``."""
    if not isinstance(peers, Sequence) or isinstance(peers, str):
        return 0, 0
    given = [(_round(p.get("round")), spec.accepts(p.get("answer"))) for p in peers if isinstance(p, Mapping)]
    rounds = [r for r, a in given if a is not None]
    if not rounds:
        return 0, 0
    latest = [a for r, a in given if r == max(rounds) and a is not None]
    return sum(1 for a in latest if a == answer), len(latest)


#: The decimals of a confidence in the offline model's verdict line.
CONFIDENCE_DECIMALS = 2


def verdict_line(answer: Answer, confidence: float, reason: str, ranking: Sequence[Answer] = ()) -> str:
    """``Verdict: {"answer": …, "confidence": …, "reason": …}``, one line of JSON."""
    body: dict[str, Any] = {
        "answer": answer,
        "confidence": round(min(1.0, max(0.0, confidence)), CONFIDENCE_DECIMALS),
        "reason": " ".join(reason.split()) or "It is my best reading of the question.",
    }
    if ranking:
        body["ranking"] = list(ranking)
    return "Verdict: " + json.dumps(body, ensure_ascii=False)


def _round(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
