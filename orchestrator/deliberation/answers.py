"""What a plan asks its panel to answer, and how answers are told apart.

``answer:`` declares the shape of the panel's answer: ``choice`` among ``options``, a
``number`` (two numbers are the same answer when they differ by at most ``tolerance``), or
free ``text`` (the same answer when they read the same after normalisation: case, spacing,
punctuation at the ends). ``decide:`` names the protocol that turns the experts' verdicts
into the panel's decision (:mod:`.protocols`); ``chair`` is the moderator's synthesis, as
before verdicts existed. Plans that declare nothing run exactly as they did.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

PROTOCOLS = ("vote", "weighted_vote", "borda", "consensus", "chair")
Protocol = Literal["vote", "weighted_vote", "borda", "consensus", "chair"]
MAX_OPTIONS = 26  # labelled A..Z in reviews


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, strict=True, frozen=True)


class ChoiceAnswer(_Strict):
    type: Literal["choice"]
    options: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(min_length=2, max_length=MAX_OPTIONS)

    @field_validator("options")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        seen: dict[str, str] = {}
        for option in v:
            key = normalise_text(option)
            if key in seen:
                raise ValueError(f"option {option!r} is the same answer as {seen[key]!r}")
            seen[key] = option
        return v


class NumberAnswer(_Strict):
    type: Literal["number"]
    tolerance: float = Field(0.0, ge=0, le=1e12)


class TextAnswer(_Strict):
    type: Literal["text"]


AnswerSpec = Annotated[ChoiceAnswer | NumberAnswer | TextAnswer, Field(discriminator="type")]


class StopWhen(_Strict):
    """Skip a board's remaining rounds once this share of the panel gives the same answer."""

    agreement: float = Field(gt=0.5, le=1.0)


class Review(_Strict):
    """A review round after a board's first (independent) round: each expert ranks the others'
    answers, shown as A, B, C… in an order drawn for that reviewer, then gives its own."""

    anonymize: bool = True  # the answers are shown by label only, never by who gave them
    exclude_self: bool = True  # a reviewer never sees (or ranks) its own answer


_SPACE = re.compile(r"\s+")
_ENDS = ".,;:!?\"'`()[]{}*_ "


def normalise_text(text: str) -> str:
    """The form two free-text answers are compared in."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", text).strip(_ENDS)


def same_answer(spec: ChoiceAnswer | NumberAnswer | TextAnswer, a: str | float, b: str | float) -> bool:
    """Whether two validated answers (as :func:`.verdicts.read_answer` returns them) agree."""
    if isinstance(spec, NumberAnswer):
        return isinstance(a, float) and isinstance(b, float) and abs(a - b) <= spec.tolerance
    return isinstance(a, str) and isinstance(b, str) and normalise_text(a) == normalise_text(b)


def answer_key(spec: ChoiceAnswer | NumberAnswer | TextAnswer, answer: str | float) -> str:
    """How an answer is shown and counted: an option as declared, a number in its shortest
    exact form, free text normalised."""
    if isinstance(spec, NumberAnswer):
        assert isinstance(answer, float) and math.isfinite(answer)
        return repr(int(answer)) if answer.is_integer() and abs(answer) < 1e15 else repr(answer)
    if isinstance(spec, ChoiceAnswer):
        key = normalise_text(str(answer))
        return next(o for o in spec.options if normalise_text(o) == key)
    return normalise_text(str(answer))
