"""The answer a plan declares: choices are distinct as a reader would tell them apart,
numbers agree within the tolerance (inclusive), free text agrees after normalisation, and
an answer is counted and shown by one key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.deliberation.answers import (
    MAX_OPTIONS,
    ChoiceAnswer,
    NumberAnswer,
    StopWhen,
    TextAnswer,
    answer_key,
    normalise_text,
    same_answer,
)

CHOICE = ChoiceAnswer(type="choice", options=["Adopt usage pricing", "Keep the flat plan", "Pilot it first"])
TEXT = TextAnswer(type="text")


@pytest.mark.parametrize(("raw", "normal"), [
    ("Keep the flat plan", "keep the flat plan"),
    ("  KEEP   the\tflat\nplan  ", "keep the flat plan"),
    ("Keep the flat plan.", "keep the flat plan"),
    ('"Keep the flat plan!"', "keep the flat plan"),
    ("**keep the flat plan**", "keep the flat plan"),
    ("\uff2b\uff45\uff45\uff50 the flat plan", "keep the flat plan"),  # full-width letters (NFKC)
    ("Straße", "strasse"),  # casefold, not lower
    ("keep, the plan", "keep, the plan"),  # punctuation inside is kept
])
def test_text_is_compared_without_case_spacing_or_punctuation_at_the_ends(raw: str, normal: str) -> None:
    assert normalise_text(raw) == normal


def test_two_free_text_answers_agree_when_they_read_the_same() -> None:
    assert same_answer(TEXT, "Keep the flat plan.", "keep  THE flat plan")
    assert not same_answer(TEXT, "Keep the flat plan", "Keep the plan")
    assert not same_answer(TEXT, "92", 92.0)  # a number is never the same as text


@pytest.mark.parametrize(("a", "b", "tolerance", "same"), [
    (92.0, 92.0, 0.0, True),
    (92.0, 92.5, 0.0, False),
    (92.0, 92.5, 0.5, True),  # the tolerance is inclusive
    (92.5, 92.0, 0.5, True),
    (92.0, 92.51, 0.5, False),
    (-1.0, 1.0, 2.0, True),
])
def test_numbers_agree_within_the_tolerance(a: float, b: float, tolerance: float, same: bool) -> None:
    assert same_answer(NumberAnswer(type="number", tolerance=tolerance), a, b) is same


def test_a_number_answer_never_matches_text() -> None:
    spec = NumberAnswer(type="number", tolerance=10)
    assert not same_answer(spec, 92.0, "92")
    assert not same_answer(spec, "92", "92")


@pytest.mark.parametrize(("answer", "key"), [
    (92.0, "92"), (-3.0, "-3"), (0.5, "0.5"), (1234.25, "1234.25"), (1e20, "1e+20"), (0.0, "0"),
])
def test_a_number_is_counted_in_its_shortest_exact_form(answer: float, key: str) -> None:
    assert answer_key(NumberAnswer(type="number"), answer) == key


def test_an_option_is_counted_as_declared_and_text_normalised() -> None:
    assert answer_key(CHOICE, "keep THE flat plan.") == "Keep the flat plan"
    assert answer_key(TEXT, "  Keep THE flat plan. ") == "keep the flat plan"


@pytest.mark.parametrize("options", [
    ["yes", "Yes"], ["yes", "yes."], ["Keep the plan", "keep  the plan"],
])
def test_options_that_are_the_same_answer_are_refused(options: list[str]) -> None:
    with pytest.raises(ValidationError, match="is the same answer as"):
        ChoiceAnswer(type="choice", options=options)


@pytest.mark.parametrize("options", [
    [], ["only one"], ["", "no"], ["x" * 201, "no"], [f"option {i}" for i in range(MAX_OPTIONS + 1)], ["yes", 1],
])
def test_a_choice_needs_two_to_twenty_six_short_options(options: list[object]) -> None:
    with pytest.raises(ValidationError):
        ChoiceAnswer.model_validate({"type": "choice", "options": options})


def test_a_choice_of_twenty_six_options_is_allowed() -> None:  # labelled A..Z in reviews
    assert len(ChoiceAnswer(type="choice", options=[f"option {i}" for i in range(MAX_OPTIONS)]).options) == 26


@pytest.mark.parametrize("tolerance", [-0.1, 1e13, "1", True])
def test_a_tolerance_is_a_number_from_zero(tolerance: object) -> None:
    with pytest.raises(ValidationError):
        NumberAnswer.model_validate({"type": "number", "tolerance": tolerance})


def test_a_number_answer_defaults_to_an_exact_match() -> None:
    assert NumberAnswer(type="number").tolerance == 0.0
    assert NumberAnswer.model_validate({"type": "number", "tolerance": 2}).tolerance == 2.0


@pytest.mark.parametrize("agreement", [0.5, 0.3, 1.01, 0, "0.8", True])
def test_stop_when_needs_more_than_half_the_panel_and_at_most_all_of_it(agreement: object) -> None:
    with pytest.raises(ValidationError):
        StopWhen.model_validate({"agreement": agreement})


def test_stop_when_accepts_a_majority_up_to_unanimity() -> None:
    assert StopWhen(agreement=0.51).agreement == 0.51
    assert StopWhen(agreement=1.0).agreement == 1.0


@pytest.mark.parametrize("doc", [
    {"type": "choice", "options": ["a", "b"], "tolerance": 1},
    {"type": "number", "options": ["a", "b"]},
    {"type": "text", "extra": True},
])
def test_an_answer_spec_refuses_fields_of_another_type(doc: dict[str, object]) -> None:
    model = {"choice": ChoiceAnswer, "number": NumberAnswer, "text": TextAnswer}[str(doc["type"])]
    with pytest.raises(ValidationError, match="Extra inputs"):
        model.model_validate(doc)
