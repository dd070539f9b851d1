"""Results enter storage as text; non-string results are serialised, never sliced."""

from __future__ import annotations

import json

from tasks.runner import as_text


def test_strings_pass_through() -> None:
    assert as_text("hello") == "hello"


def test_none_is_empty_and_structures_are_serialised_whole() -> None:
    assert as_text(None) == ""
    value = {"verdict": "go", "reasons": ["margin", "pipeline"], "n": 3}
    assert json.loads(as_text(value)) == value
    assert json.loads(as_text([{"type": "text", "text": "a"}])) == [{"type": "text", "text": "a"}]
