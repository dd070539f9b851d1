"""Datasets: generated items keep the question-text contract and grade themselves, files
round-trip, and a bad line is refused with its number and field."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.evaluation.datasets import (
    InvalidItem,
    Item,
    dump_items,
    evaluate_expression,
    generate,
    load_items,
)
from tests.conftest import ROOT
from tests.unit.bounded import bounded

#: the contract the simulated solver parses
CONTRACT = re.compile(r"What is (\d+)(?: ([+*-]) (\d+)){1,2}\?")
GOOD = '{"id": "ok", "question": "Which?", "choices": ["a", "b"], "answer": "a"}'


def _check_generated(item: Item, options: int, numeric: bool) -> None:
    assert CONTRACT.fullmatch(item.question), item.question
    expression = item.question.removeprefix("What is ").removesuffix("?")
    operands = [int(x) for x in re.findall(r"\d+", expression)]
    assert 2 <= len(operands) <= 3 and all(2 <= x <= 99 for x in operands)
    value = evaluate_expression(item.question)
    assert value == eval(expression)  # digits and + - * only: CONTRACT matched
    if numeric:
        assert item.choices is None and item.answer == float(value)
    else:
        assert item.choices is not None and item.answer == str(value)
        assert len(item.choices) == options == len(set(item.choices))
        assert item.answer in item.choices
        assert all(re.fullmatch(r"-?\d+", c) for c in item.choices)


# -- the generator -----------------------------------------------------------------------


@bounded(200, deadline_ms=2000)
@given(st.integers(0, 25), st.integers(2, 26), st.integers(-(2**40), 2**40), st.booleans())
def test_every_generated_item_keeps_the_contract_and_grades_itself(n: int, options: int, seed: int,
                                                                   numeric: bool) -> None:
    items = generate(n, options=options, seed=seed, numeric=numeric)
    assert [item.id for item in items] == [f"gen-{seed}-{i}" for i in range(n)]
    for item in items:
        _check_generated(item, options, numeric)


def test_the_generator_is_deterministic_and_uses_every_operator() -> None:
    assert generate(40, options=4, seed=5) == generate(40, options=4, seed=5)
    assert generate(40, options=4, seed=5) != generate(40, options=4, seed=6)
    questions = " ".join(item.question for item in generate(200, seed=1))
    assert all(f" {op} " in questions for op in "+-*")
    # the right answer is not always in one place
    positions = {item.choices.index(str(item.answer)) for item in generate(50, options=4) if item.choices}
    assert positions == {0, 1, 2, 3}


def test_the_generator_refuses_bad_sizes() -> None:
    with pytest.raises(ValueError, match=r"^n: "):
        generate(-1)
    with pytest.raises(ValueError, match=r"^options: "):
        generate(3, options=1)
    with pytest.raises(ValueError, match=r"^options: "):
        generate(3, options=27)


@pytest.mark.parametrize(("text", "value"), [
    ("What is 2 + 3 * 4?", 14), ("What is 99 - 98 - 97?", -96), ("Q: What is 7 * 8? Answer with a number.", 56),
    ("What is 10-2*3?", 4),
])
def test_the_evaluator_reads_the_question(text: str, value: int) -> None:
    assert evaluate_expression(text) == value


@pytest.mark.parametrize("text", [
    "What is 2 ** 3?", "What is -3 + 2?", "What is 2 / 3?", "What is (2 + 3) * 4?", "What is 07 + 1?",
    "What is __import__('os')?", "What is 2 + ?", "What is 1 + 2", "what is 1 + 2?", "no question here",
    "What is " + " + ".join(["99"] * 80) + "?",
])
def test_the_evaluator_refuses_anything_else(text: str) -> None:
    assert evaluate_expression(text) is None


# -- the file format ---------------------------------------------------------------------


TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).filter(str.strip)


@st.composite
def items(draw: st.DrawFn) -> list[Item]:
    count = draw(st.integers(0, 5))
    ids = draw(st.lists(TEXTS, min_size=count, max_size=count, unique=True))
    out = []
    for id_ in ids:
        source = draw(st.none() | TEXTS)
        if draw(st.booleans()):
            choices = draw(st.lists(TEXTS, min_size=2, max_size=6, unique=True))
            out.append(Item(id=id_, question=draw(TEXTS), answer=draw(st.sampled_from(choices)), choices=choices,
                            source=source))
        else:
            number = draw(st.integers(-(10**12), 10**12) | st.floats(allow_nan=False, allow_infinity=False))
            out.append(Item(id=id_, question=draw(TEXTS), answer=number, source=source))
    return out


@bounded(100, deadline_ms=2000)
@given(items())
def test_dump_then_load_gives_the_same_items(written: list[Item]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "items.jsonl"
        dump_items(written, path)
        assert load_items(path) == written


def test_blank_lines_are_skipped_and_numbers_become_floats(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('\n{"id": "n", "question": "What is 2 + 2?", "answer": 4}\n\n   \n' + GOOD + "\n")
    loaded = load_items(path)
    assert [item.id for item in loaded] == ["n", "ok"]
    assert loaded[0].answer == 4.0 and isinstance(loaded[0].answer, float)


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "line 3: not valid JSON: "),
    ("[1, 2]", "line 3: must be a JSON object"),
    ('{"question": "Q?", "answer": 1}', "line 3: id: missing"),
    ('{"id": "x", "answer": 1}', "line 3: question: missing"),
    ('{"id": "x", "question": "Q?"}', "line 3: answer: missing"),
    ('{"id": "x", "question": "Q?", "answer": 1, "level": 2}', "line 3: level: unknown field"),
    ('{"id": "", "question": "Q?", "answer": 1}', "line 3: id: must be a non-empty string"),
    ('{"id": 7, "question": "Q?", "answer": 1}', "line 3: id: must be a non-empty string"),
    ('{"id": "x", "question": "  ", "answer": 1}', "line 3: question: must be a non-empty string"),
    ('{"id": "x", "question": "Q?", "choices": ["a", "b"], "answer": "c"}', "line 3: answer: must be one of the"),
    ('{"id": "x", "question": "Q?", "choices": ["1", "2"], "answer": 1}', "line 3: answer: must be one of the"),
    ('{"id": "x", "question": "Q?", "choices": ["a"], "answer": "a"}', "line 3: choices: must hold 2 to 26"),
    ('{"id": "x", "question": "Q?", "choices": ["a", "a"], "answer": "a"}', "line 3: choices: must be distinct"),
    ('{"id": "x", "question": "Q?", "choices": "ab", "answer": "a"}', "line 3: choices: must be a list"),
    ('{"id": "x", "question": "Q?", "choices": ["a", 2], "answer": "a"}', "line 3: choices: must be a list"),
    ('{"id": "x", "question": "Q?", "answer": "4"}', "line 3: answer: must be a finite number"),
    ('{"id": "x", "question": "Q?", "answer": true}', "line 3: answer: must be a finite number"),
    ('{"id": "x", "question": "Q?", "answer": NaN}', "line 3: answer: must be a finite number"),
    ('{"id": "x", "question": "Q?", "answer": 1e999}', "line 3: answer: must be a finite number"),
    ('{"id": "x", "question": "Q?", "answer": 1, "source": ""}', "line 3: source: must be a non-empty string"),
    ('{"id": "ok", "question": "Q?", "answer": 1}', "line 3: id: 'ok' is already the id of line 1"),
])
def test_a_bad_line_is_refused_naming_its_number_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(f"{GOOD}\n\n{line}\n{GOOD.replace('ok', 'later')}\n")
    with pytest.raises(InvalidItem, match=f"^{re.escape(message)}"):
        load_items(path)


def test_the_real_questions_load() -> None:
    real = load_items(ROOT / "examples" / "eval" / "real-questions.jsonl")
    assert len(real) == 50
    assert all(item.choices is not None and len(item.choices) == 4 for item in real)
    assert all(item.source for item in real)
    assert len({item.question for item in real}) == 50
    # the right answer sits in every position about equally often
    counts = [sum(1 for item in real if item.choices and item.choices.index(str(item.answer)) == p) for p in range(4)]
    assert min(counts) >= 10
