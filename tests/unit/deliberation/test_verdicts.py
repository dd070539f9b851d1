"""Reading an expert's verdict: the last ``Verdict:`` line (or a fenced JSON object) wins;
the answer is validated against the plan's spec (an option or its letter, a finite number,
short text); the confidence is a number in [0, 1]; anything else is a
:class:`MalformedVerdict` whose message names the problem, which the runner turns into one
repair request and then an abstention — never an exception of another kind."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.deliberation.answers import ChoiceAnswer, NumberAnswer, TextAnswer
from orchestrator.deliberation.verdicts import (
    MAX_REASON,
    MAX_TEXT_ANSWER,
    MalformedVerdict,
    Verdict,
    abstention,
    read_answer,
    read_verdict,
)

CHOICE = ChoiceAnswer(type="choice", options=["Adopt usage pricing", "Keep the flat plan", "Pilot it first"])
NUMBER = NumberAnswer(type="number", tolerance=0.5)
TEXT = TextAnswer(type="text")
Spec = ChoiceAnswer | NumberAnswer | TextAnswer


def line(**body: Any) -> str:
    return "Verdict: " + json.dumps(body)


def refused(text: str, spec: Spec = CHOICE) -> str:
    with pytest.raises(MalformedVerdict) as info:
        read_verdict(text, spec)
    return str(info.value)


# ---------------------------------------------------------------- where the verdict is


def test_the_verdict_is_the_last_verdict_line() -> None:
    text = "\n".join([
        "I first thought we should adopt it.",
        line(answer="Adopt usage pricing", confidence=0.4, reason="early view"),
        "Position: OPPOSE — on reflection the churn risk is too high.",
        line(answer="Keep the flat plan", confidence=0.8, reason="churn"),
        "",
    ])
    assert read_verdict(text, CHOICE) == Verdict(answer="Keep the flat plan", confidence=0.8, reason="churn")


@pytest.mark.parametrize("prefix", [
    "Verdict: ", "verdict:", "VERDICT :", "**Verdict:** ", "> Verdict: ", "- Verdict: ", "## Verdict: ", "  Verdict:\t",
])
def test_the_verdict_line_may_be_dressed_as_markdown_in_any_case(prefix: str) -> None:
    text = "Some words.\n" + prefix + json.dumps({"answer": "Pilot it first", "confidence": 0.6}) + " "
    assert read_verdict(text, CHOICE).answer == "Pilot it first"


def test_a_fenced_json_object_with_an_answer_is_read_when_there_is_no_verdict_line() -> None:
    text = ('Here is my analysis.\n```json\n{"note": "not this one"}\n```\n'
            '```json\n{"answer": "B", "confidence": 0.7, "reason": "safer"}\n```\nThanks.')
    assert read_verdict(text, CHOICE) == Verdict(answer="Keep the flat plan", confidence=0.7, reason="safer")
    assert read_verdict('```\n{"answer": 3, "confidence": 1}\n```', NUMBER).answer == 3.0


def test_a_verdict_line_is_preferred_to_a_fenced_object() -> None:
    text = line(answer="A", confidence=0.9) + '\n```json\n{"answer": "B", "confidence": 0.1}\n```'
    assert read_verdict(text, CHOICE).answer == "Adopt usage pricing"


@pytest.mark.parametrize("text", [
    "", "I support adopting it.", "Verdict: adopt", 'Verdict {"answer": "A", "confidence": 1}',
    '```json\n{"confidence": 0.4}\n```', 'My verdict: {"answer": "A", "confidence": 1}',
])
def test_text_without_a_verdict_is_malformed(text: str) -> None:
    assert refused(text).startswith("no line beginning 'Verdict:'")


@pytest.mark.parametrize(("text", "problem"), [
    ('Verdict: {answer: "A"}', "not valid JSON"),
    ('Verdict: {"answer": "A", "confidence": 0.5,}', "not valid JSON"),
    ('Verdict: {"answer": "A"} {"confidence": 1}', "not valid JSON"),
])
def test_a_verdict_that_is_not_json_names_the_problem(text: str, problem: str) -> None:
    assert problem in refused(text)


# ---------------------------------------------------------------- the answer


@pytest.mark.parametrize(("given", "option"), [
    ("Adopt usage pricing", "Adopt usage pricing"),
    ("  keep THE   flat plan. ", "Keep the flat plan"),
    ("PILOT IT FIRST", "Pilot it first"),
    ("A", "Adopt usage pricing"), ("b", "Keep the flat plan"), ("C)", "Pilot it first"), (" c. ", "Pilot it first"),
])
def test_a_choice_is_an_option_in_any_case_and_spacing_or_its_letter(given: str, option: str) -> None:
    verdict = read_verdict(line(answer=given, confidence=0.5), CHOICE)
    assert verdict.answer == option  # always the option's declared spelling


@pytest.mark.parametrize("given", ["D", "Z", "Raise prices", "", "   ", 1, None, True, ["A"]])
def test_a_choice_outside_the_options_is_refused(given: Any) -> None:
    assert "'answer' must be" in refused(line(answer=given, confidence=0.5))


@pytest.mark.parametrize(("options", "given", "read"), [
    (["C", "Go", "Rust"], "C", "C"),  # the option "C", not the third option's letter
    (["B", "A"], "A", "A"),
    (["B", "A"], "b", "B"),
    (["R", "Python"], "B", "Python"),  # a letter that is no option still names one by position
])
def test_an_option_that_is_itself_a_letter_is_read_as_itself(options: list[str], given: str, read: str) -> None:
    spec = ChoiceAnswer(type="choice", options=options)
    assert read_verdict(line(answer=given, confidence=0.5), spec).answer == read


@pytest.mark.parametrize(("given", "number"), [
    (92, 92.0), (92.5, 92.5), (-3, -3.0), ("92", 92.0), (" 1,234.5 ", 1234.5), ("12,345,678", 12345678.0),
    ("+3e2", 300.0), ("-0.25", -0.25), ("1,000", 1000.0),
])
def test_a_number_may_be_written_with_thousands_separators(given: Any, number: float) -> None:
    verdict = read_verdict(line(answer=given, confidence=0.5), NUMBER)
    assert verdict.answer == number and isinstance(verdict.answer, float)


@pytest.mark.parametrize("given", [
    "1,23", "12 345", "1.234,5", "ninety-two", "92%", "", "0x10", "1e", True, False, None, [92], {"n": 92},
])
def test_what_is_not_a_number_is_refused(given: Any) -> None:
    assert "'answer' must be a number" in refused(line(answer=given, confidence=0.5), NUMBER)


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", '"nan"', '"inf"', "1e400", '"1e400"'])
def test_a_number_must_be_finite(raw: str) -> None:
    assert "'answer' must be a number" in refused(f'Verdict: {{"answer": {raw}, "confidence": 0.5}}', NUMBER)


def test_a_number_too_large_for_a_float_is_malformed_not_a_crash() -> None:
    # a model that writes out 10^400 in digits: json gives an int no float can hold
    assert "'answer' must be a number" in refused('Verdict: {"answer": 1' + "0" * 400 + ', "confidence": 0.5}', NUMBER)


@pytest.mark.parametrize("text", [
    'Verdict: {"answer": 1' + "0" * 5000 + ', "confidence": 0.5}',
    'Verdict: {"answer": 3, "confidence": 1' + "0" * 5000 + "}",
])
def test_digits_past_the_integer_conversion_limit_are_malformed_not_a_crash(text: str) -> None:
    assert refused(text, NUMBER) == "the verdict holds a number too long to read"


def test_free_text_is_kept_with_its_spacing_collapsed() -> None:
    assert read_verdict(line(answer="  Keep \n the   flat plan ", confidence=1), TEXT).answer == "Keep the flat plan"
    assert read_verdict(line(answer="x" * MAX_TEXT_ANSWER, confidence=1), TEXT).answer == "x" * MAX_TEXT_ANSWER
    assert "longer than" in refused(line(answer="x" * (MAX_TEXT_ANSWER + 1), confidence=1), TEXT)
    assert "non-empty string" in refused(line(answer=" ", confidence=1), TEXT)
    assert "non-empty string" in refused(line(answer=42, confidence=1), TEXT)


# ---------------------------------------------------------------- confidence, reason, fields


@pytest.mark.parametrize("confidence", [0, 0.0, 0.5, 1, 1.0])
def test_a_confidence_lies_between_zero_and_one(confidence: float) -> None:
    verdict = read_verdict(line(answer="A", confidence=confidence), CHOICE)
    assert verdict.confidence == confidence and isinstance(verdict.confidence, float)


@pytest.mark.parametrize("raw", ["1.01", "-0.1", "2", "true", "false", '"0.5"', "null", "NaN", "Infinity", "[0.5]"])
def test_a_confidence_out_of_range_or_not_a_number_is_refused(raw: str) -> None:
    message = refused(f'Verdict: {{"answer": "A", "confidence": {raw}}}')
    assert message == "'confidence' must be a number from 0 to 1"


def test_a_confidence_is_required() -> None:
    assert refused(line(answer="A")) == "'confidence' must be a number from 0 to 1"


def test_an_answer_is_required_and_the_verdict_is_an_object() -> None:
    assert refused(line(confidence=0.5)) == "the verdict has no 'answer'"
    assert refused('```json\n["answer", "A"]\n```').startswith("no line beginning")  # only an object is looked for


def test_unknown_fields_are_refused_by_name() -> None:
    message = refused(line(answer="A", confidence=0.5, why="x", certainty=1))
    assert message == "unknown field(s) in the verdict: certainty, why"


def test_the_reason_is_one_line_trimmed_to_its_limit() -> None:
    assert read_verdict(line(answer="A", confidence=0.5, reason="  churn \n risk\t"), CHOICE).reason == "churn risk"
    assert read_verdict(line(answer="A", confidence=0.5), CHOICE).reason == ""
    long = read_verdict(line(answer="A", confidence=0.5, reason="word " * 200), CHOICE).reason
    assert len(long) == MAX_REASON and long.endswith("…") and "  " not in long
    exact = "w" * MAX_REASON
    assert read_verdict(line(answer="A", confidence=0.5, reason=exact), CHOICE).reason == exact
    assert refused(line(answer="A", confidence=0.5, reason=["churn"])) == "'reason' must be a string"


# ---------------------------------------------------------------- rankings (Borda)


def test_a_ranking_names_options_best_first_starting_with_the_answer() -> None:
    verdict = read_verdict(line(answer="B", confidence=0.5, ranking=["b", "C", "Adopt usage pricing"]), CHOICE)
    assert verdict.ranking == ("Keep the flat plan", "Pilot it first", "Adopt usage pricing")
    partial = read_verdict(line(answer="B", confidence=0.5, ranking=["B"]), CHOICE)
    assert partial.ranking == ("Keep the flat plan",)
    assert read_verdict(line(answer="B", confidence=0.5, ranking=[]), CHOICE).ranking == ()
    assert read_verdict(line(answer="B", confidence=0.5, ranking=None), CHOICE).ranking == ()


@pytest.mark.parametrize(("ranking", "problem"), [
    (["A", "B", "C"], "'ranking' must start with the answer"),
    (["B", "keep the flat plan"], "'ranking' names an option twice"),
    (["B", "B"], "'ranking' names an option twice"),
    (["B", "Raise prices"], "'answer' must be one of"),
    ("B, A", "'ranking' must be a list of options, best first"),
    (["B", 1], "'ranking' must be a list of options, best first"),
])
def test_a_bad_ranking_is_refused(ranking: Any, problem: str) -> None:
    assert refused(line(answer="B", confidence=0.5, ranking=ranking)).startswith(problem)


def test_only_a_choice_is_ranked() -> None:
    problem = refused(line(answer=3, confidence=0.5, ranking=["3"]), NUMBER)
    assert problem == "'ranking' is only for an answer among options"


# ---------------------------------------------------------------- as stored


def test_a_verdict_is_stored_as_json_and_read_back_as_it_was() -> None:
    verdicts = [
        read_verdict(line(answer="b", confidence=0.75, reason="safer", ranking=["B", "A"]), CHOICE),
        read_verdict(line(answer="1,234", confidence=1, reason=""), NUMBER),
        Verdict("Keep the flat plan", 0.5, "r", repaired=True),
        abstention("no line beginning 'Verdict:'", repaired=True),
    ]
    for verdict in verdicts:
        stored = json.loads(json.dumps(verdict.as_json()))
        assert Verdict.from_json(stored) == verdict
    assert verdicts[0].as_json() == {"answer": "Keep the flat plan", "confidence": 0.75, "reason": "safer",
                                     "ranking": ["Keep the flat plan", "Adopt usage pricing"]}
    assert verdicts[3].as_json() == {"answer": None, "confidence": 0.0, "reason": "",
                                     "abstained": "no line beginning 'Verdict:'", "repaired": True}


def test_a_stored_whole_number_reads_back_as_a_float() -> None:
    assert Verdict.from_json({"answer": 92, "confidence": 1, "reason": ""}).answer == 92.0
    assert Verdict.from_json({"answer": True, "confidence": 1, "reason": ""}).answer is True  # never a number


def test_an_abstention_says_why_within_the_reason_limit() -> None:
    gone = abstention("x" * 1000)
    assert gone.abstained and gone.answer is None and gone.confidence == 0.0
    assert gone.problem == "x" * MAX_REASON and not gone.repaired


def test_read_answer_is_the_same_check_the_chair_is_held_to() -> None:
    assert read_answer(CHOICE, "keep the flat plan") == "Keep the flat plan"
    assert read_answer(NUMBER, "1,000") == 1000.0
    with pytest.raises(MalformedVerdict):
        read_answer(CHOICE, "Raise prices")
