"""Evaluation items: the JSONL format, and a seeded generator of items a program can grade.

One item per line, a JSON object::

    {"id": "q1", "question": "...", "choices": ["A", "B"], "answer": "A", "source": "..."}

``choices`` (2 to 26 distinct non-empty strings) is optional; with it ``answer`` is one of the
choices, without it ``answer`` is a number. ``source`` (where the fact can be checked) is
optional; no other field is accepted. :func:`load_items` refuses a file with the first
fault it finds, naming the line and the field (``line 7: answer: must be one of the
choices``), so a dataset is fixed before an evaluation spends anything on it.

:func:`generate` writes arithmetic items whose question text is a contract: exactly
``What is <expr>?``, where ``<expr>`` is 2 or 3 integer operands from 2 to 99 joined by
`` + ``, `` - `` or `` * `` (single spaces, no parentheses, usual precedence). The
simulated solver parses that text; :func:`evaluate_expression` is the reference reading.
"""

from __future__ import annotations

import ast
import json
import math
import os
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

MIN_CHOICES, MAX_CHOICES = 2, 26
_FIELDS = ("id", "question", "choices", "answer", "source")
#: operands of generated questions, inclusive
LOWEST, HIGHEST = 2, 99
_QUESTION = re.compile(r"What is ([0-9+\-* ]{1,200})\?")


class InvalidItem(ValueError):
    """An item, or a line of a dataset, that breaks the format; the message names the field
    (and, from :func:`load_items`, the line)."""


@dataclass(frozen=True)
class Item:
    """One evaluation item, valid by construction (see the module docstring for the rules).

    A numeric ``answer`` is stored as a float, whatever number was given.
    """

    id: str
    question: str
    answer: str | float
    choices: list[str] | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        for name in ("id", "question"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidItem(f"{name}: must be a non-empty string")
        if self.source is not None and (not isinstance(self.source, str) or not self.source.strip()):
            raise InvalidItem("source: must be a non-empty string when given")
        if self.choices is None:
            object.__setattr__(self, "answer", _number(self.answer))
            return
        choices = self.choices
        if not isinstance(choices, list) or not all(isinstance(c, str) and c.strip() for c in choices):
            raise InvalidItem("choices: must be a list of non-empty strings")
        if not MIN_CHOICES <= len(choices) <= MAX_CHOICES:
            raise InvalidItem(f"choices: must hold {MIN_CHOICES} to {MAX_CHOICES} choices, got {len(choices)}")
        if len(set(choices)) != len(choices):
            raise InvalidItem("choices: must be distinct")
        if not isinstance(self.answer, str) or self.answer not in choices:
            raise InvalidItem("answer: must be one of the choices")
        object.__setattr__(self, "choices", list(choices))  # the item's own copy

    def to_json(self) -> dict[str, object]:
        """The item as one JSONL object (absent optional fields left out)."""
        out: dict[str, object] = {"id": self.id, "question": self.question}
        if self.choices is not None:
            out["choices"] = list(self.choices)
        out["answer"] = self.answer
        if self.source is not None:
            out["source"] = self.source
        return out


def _number(answer: object) -> float:
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        try:
            value = float(answer)
        except OverflowError:
            value = math.inf
        if math.isfinite(value):
            return value
    raise InvalidItem("answer: must be a finite number when there are no choices")


def item_from_json(data: object) -> Item:
    """Build an :class:`Item` from one decoded JSON value, or raise :class:`InvalidItem`."""
    if not isinstance(data, Mapping):
        raise InvalidItem("must be a JSON object")
    for name in data:
        if name not in _FIELDS:
            raise InvalidItem(f"{name}: unknown field (expected {', '.join(_FIELDS)})")
    for name in ("id", "question", "answer"):
        if name not in data:
            raise InvalidItem(f"{name}: missing")
    return Item(id=data["id"], question=data["question"], answer=data["answer"],
                choices=data.get("choices"), source=data.get("source"))


def load_items(path: str | os.PathLike[str]) -> list[Item]:
    """Read a JSONL dataset; blank lines are skipped, duplicate ids refused."""
    items: list[Item] = []
    seen: dict[str, int] = {}
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidItem(f"line {number}: not valid JSON: {exc.msg}") from None
            try:
                item = item_from_json(data)
            except InvalidItem as exc:
                raise InvalidItem(f"line {number}: {exc}") from None
            if item.id in seen:
                raise InvalidItem(f"line {number}: id: {item.id!r} is already the id of line {seen[item.id]}")
            seen[item.id] = number
            items.append(item)
    return items


def dump_items(items: Iterable[Item], path: str | os.PathLike[str]) -> None:
    """Write ``items`` as JSONL (one object a line, UTF-8), readable by :func:`load_items`."""
    with Path(path).open("w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")


def evaluate_expression(text: str) -> int | None:
    """The value of the expression in ``What is <expr>?`` inside ``text``, or None.

    Read with :mod:`ast` and evaluated by walking the tree; only integer literals and the
    binary operators ``+``, ``-``, ``*`` are allowed (no unary minus, no power, no names),
    and the expression is at most 200 characters, so no text can make this run long. None
    when there is no such question or it holds anything else.
    """
    found = _QUESTION.search(text)
    if found is None:
        return None
    try:
        tree = ast.parse(found.group(1).strip(), mode="eval")
    except SyntaxError:
        return None
    return _value(tree.body)


def _value(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        return None
    left, right = _value(node.left), _value(node.right)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    return left * right


def _calculate(operands: list[int], operators: list[str]) -> int:
    """The value with ``*`` before ``+``/``-``, left to right: computed without :mod:`ast`,
    so the generator and :func:`evaluate_expression` check each other."""
    terms, signs = [operands[0]], [1]
    for operator, operand in zip(operators, operands[1:], strict=True):
        if operator == "*":
            terms[-1] *= operand
        else:
            terms.append(operand)
            signs.append(1 if operator == "+" else -1)
    return sum(sign * term for sign, term in zip(signs, terms, strict=True))


def _distractors(value: int, count: int, rng: random.Random) -> list[int]:
    """``count`` distinct wrong values near ``value``: offsets ±1, ±2, … drawn at random."""
    reach = max(3, count)
    offsets = [d for d in range(-reach, reach + 1) if d]
    return [value + d for d in rng.sample(offsets, count)]


def generate(n: int, *, options: int = 2, seed: int = 0, numeric: bool = False) -> list[Item]:
    """``n`` arithmetic items, the same for the same arguments on every machine.

    Choice items (the default) carry ``options`` distinct integer strings: the value and
    ``options - 1`` values near it, in an order shuffled by the seeded generator; ``answer``
    is the value's string. Numeric items carry no choices and the value as a float. Ids are
    ``gen-<seed>-<i>``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n: must be a non-negative integer, got {n!r}")
    if not numeric and (isinstance(options, bool) or not isinstance(options, int)
                        or not MIN_CHOICES <= options <= MAX_CHOICES):
        raise ValueError(f"options: must be an integer from {MIN_CHOICES} to {MAX_CHOICES}, got {options!r}")
    rng = random.Random(seed)
    items = []
    for i in range(n):
        count = rng.choice((2, 3))
        operands = [rng.randint(LOWEST, HIGHEST) for _ in range(count)]
        operators = [rng.choice("+-*") for _ in range(count - 1)]
        expression = str(operands[0]) + "".join(f" {o} {x}" for o, x in zip(operators, operands[1:], strict=True))
        value = _calculate(operands, operators)
        question = f"What is {expression}?"
        if numeric:
            items.append(Item(id=f"gen-{seed}-{i}", question=question, answer=float(value), source="generated"))
            continue
        choices = [str(v) for v in [value, *_distractors(value, options - 1, rng)]]
        rng.shuffle(choices)
        items.append(Item(id=f"gen-{seed}-{i}", question=question, answer=str(value), choices=choices,
                          source="generated"))
    return items
