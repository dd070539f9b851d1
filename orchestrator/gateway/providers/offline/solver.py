"""The offline model's simulated solver (``options.solver``): experts that solve a plan's
``What is <expr>?`` question with a given skill, correlated with one another, conforming
to their peers, and biased by position when they review — so that the statistics of a
panel's structured verdicts (majority votes, self-consistency, debates) can be measured
offline, against a known truth.

What it guarantees, for questions with a computable answer:

* **Skill.** Each expert is right with probability ``skill``: its answer is the right
  option (the one whose text is ``str(value)``) or the value itself for numbers.
* **Correlation.** One factor per item: with probability ``sqrt(correlation)`` an expert
  takes the item's shared draw (right iff the item's uniform is below ``skill``, else the
  item's shared wrong answer), otherwise its own draw. Two experts' correctness then has
  pairwise correlation ``correlation``; at 1 every expert gives the same answer.
* **Wrong answers** are uniform over the other options; for numbers, the value off by a
  seeded ±1..±10.
* **Independence of the round.** An expert's own draw depends on (seed, question, expert)
  only, never on its round, so n experts named apart (``sample-1`` … ``sample-n``) are n
  independent samples. Only **conformity** looks at the round: in a later round, with
  probability ``conformity``, the expert takes the peers' majority of the latest round.
* **Confidence** is seeded in [0.6, 0.95] for a right answer, [0.35, 0.75] for a wrong
  one, and 0.5 when the question has no computable answer (no expression, or no option
  equal to its value): then the answer is a seeded guess.
* **Determinism.** Every draw is SHA-256 of the solver's seed, the question and the
  expert's slug (:class:`~orchestrator.gateway.providers.offline.text.Dice`).

``position_bias`` is for a review round: given the labels shown (``hints["review"]``),
with that probability the reviewer ranks the first one first, otherwise by its own solve.

The expression is read with :mod:`ast`: non-negative integer literals, ``+``, ``-``, ``*``
and parentheses, at most :data:`MAX_EXPRESSION` characters; anything else has no value.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.gateway.providers.offline.options import SolverOptions
from orchestrator.gateway.providers.offline.text import Dice, slug_of
from orchestrator.gateway.providers.offline.verdict_line import Answer, AnswerSpec, majority

MAX_EXPRESSION = 200  # characters of an expression the solver evaluates
#: A confidence is ``low + width·u`` for the expert's seeded uniform u, ``(low, width)`` here:
#: a right answer's in [0.6, 0.95], a wrong one's in [0.35, 0.75] (the verdict line rounds it
#: to :data:`~.verdict_line.CONFIDENCE_DECIMALS`). Informative, so a tie of votes broken by
#: total confidence (the tally's rule) favours the right answer; the theory counts on it.
RIGHT_CONFIDENCE = (0.6, 0.35)
WRONG_CONFIDENCE = (0.35, 0.4)
OFFSETS = tuple(range(-10, 0)) + tuple(range(1, 11))  # how far a wrong number is off
GUESS = "I can't work it out from the question"  # a text answer without a computable value

_QUESTION = re.compile(r"\bwhat is\s+([0-9+\-*()\s]+?)\s*\?", re.I)
_OPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}


def value_of(question: str) -> int | None:
    """The value of the first ``What is <expr>?`` in ``question`` that evaluates, or None."""
    for found in _QUESTION.finditer(question):
        expression = found.group(1).strip()
        if not expression or len(expression) > MAX_EXPRESSION:
            continue
        try:
            tree = ast.parse(expression, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        value = _value(tree.body)
        if value is not None:
            return value
    return None


def _value(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left), _value(node.right)
        if left is None or right is None:
            return None
        return _OPS[type(node.op)](left, right)
    return None


@dataclass(frozen=True)
class Solved:
    """An expert's answer, how sure it is, and whether it is right (None: nobody can tell)."""

    answer: Answer
    confidence: float
    right: bool | None


class Solver:
    """The solver of one question under one answer spec (see the module docstring)."""

    def __init__(self, opts: SolverOptions, question: str, spec: AnswerSpec) -> None:
        self.opts = opts
        self.spec = spec
        self.question = " ".join(question.split())
        self.value = value_of(self.question)
        self.right = self._right_answer()

    def first(self, expert: str) -> Solved:
        """The expert's own answer: the same in every round."""
        who = _who(expert)
        if self.right is None:
            return Solved(self._guess(who), 0.5, None)
        if self._dice(who, "shared").uniform() < math.sqrt(self.opts.correlation):
            correct = self._dice("item").uniform() < self.opts.skill
            wrong = self._wrong(self._dice("item", "wrong"))
        else:
            correct = self._dice(who, "own").uniform() < self.opts.skill
            wrong = self._wrong(self._dice(who, "wrong"))
        return self._solved(who, self.right if correct else wrong)

    def answer(self, expert: str, *, later: bool, turn: object, peers: Any) -> Solved:
        """The expert's answer in a call: its own, or in a ``later`` round (``turn`` names
        it, for the draw) the peers' majority with probability ``conformity``."""
        own = self.first(expert)
        if not later or self.opts.conformity <= 0:
            return own
        most = majority(peers, self.spec)
        who = _who(expert)
        if most is None or self._dice(who, "conform", turn).uniform() >= self.opts.conformity:
            return own
        return self._solved(who, most)

    def ranking(self, expert: str, labels: Sequence[str], answers: Sequence[Any], turn: object) -> list[str]:
        """A reviewer's ranking of the ``labels`` shown (``answers[i]`` is what label i
        stands for, when given): as shown with probability ``position_bias``, else its own
        answer's labels first (in a seeded order) and the rest in another."""
        who = _who(expert)
        if self._dice(who, "position", turn).uniform() < self.opts.position_bias:
            return list(labels)
        own = str(self.first(expert).answer)
        mine = [i for i, label in enumerate(labels)
                if label == own or (i < len(answers) and str(answers[i]) == own)]
        # several labels may carry its answer: their order is drawn too, so an unbiased reviewer
        # has no lean to the first position shown
        agreeing = self._dice(who, "agreeing", turn).shuffled(mine)
        rest = self._dice(who, "review", turn).shuffled([i for i in range(len(labels)) if i not in mine])
        return [labels[i] for i in agreeing + rest]

    def _dice(self, *parts: object) -> Dice:
        return Dice("solver", self.opts.seed, self.question, *parts)

    def _right_answer(self) -> Answer | None:
        if self.value is None:
            return None
        if self.spec.type == "choice":
            return str(self.value) if str(self.value) in self.spec.options else None
        return self.value if self.spec.type == "number" else str(self.value)

    def _solved(self, who: str, answer: Answer) -> Solved:
        if self.right is None:
            return Solved(answer, 0.5, None)
        u = self._dice(who, "confidence").uniform()
        right = answer == self.right
        low, width = RIGHT_CONFIDENCE if right else WRONG_CONFIDENCE
        return Solved(answer, low + width * u, right)

    def _wrong(self, dice: Dice) -> Answer:
        assert self.right is not None and self.value is not None
        if self.spec.type == "choice":
            others = [o for o in self.spec.options if o != self.right]
            return dice.pick(others) if others else self.right
        off = self.value + dice.pick(OFFSETS)
        return off if self.spec.type == "number" else str(off)

    def _guess(self, who: str) -> Answer:
        dice = self._dice(who, "guess")
        if self.spec.type == "choice":
            return dice.pick(self.spec.options)
        return dice.below(101) if self.spec.type == "number" else GUESS


def _who(expert: str) -> str:
    return slug_of(expert) or expert
