"""UTF-16 offsets where astral characters sit in the middle of a document — after plain
text, in runs, at the very end, at every index including each astral character's own — checked against an oracle
that does not share the helper's code: the length of the UTF-16 encoding of the prefix."""

from __future__ import annotations

import pytest

from orchestrator.briefing.chunking import chunk_document
from orchestrator.briefing.citations import find_citations
from orchestrator.briefing.utf16 import Utf16Index, utf16_len, utf16_slice

# plain BMP text first, so the first astral character is well inside the document
MIDDLE = (
    "# Pricing review\n\nPlain words come first, for a good while, before anything astral at all.\n\n"
    "## Risks\n\n😀 starts this paragraph; 𠀀𠀀 two ideographs in a row, then 價格 (BMP CJK).\n\n"
    "## Numbers\n\nRevenue \U0001d4b3 rises 8% and 👩‍👩‍👧 families churn less. 🚀\n\n"
    "## Close\n\nThe last character is astral 🇫🇷"
)
CASES = [
    MIDDLE,
    "abc😀def",       # one, in the middle
    "ab😀😀cd𠀀",     # a run, and one at the end
    "x" * 50 + "\U0010ffff" + "y" * 50,  # the highest code point
    "no astral characters here, only BMP: 價格 é ß",
]


def units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@pytest.mark.parametrize("text", CASES)
def test_every_code_point_index_maps_to_its_utf16_offset(text: str) -> None:
    index = Utf16Index(text)
    assert utf16_len(text) == units(text)
    assert [index.offset(i) for i in range(len(text) + 1)] == [units(text[:i]) for i in range(len(text) + 1)]


@pytest.mark.parametrize("text", CASES)
def test_slices_by_converted_offsets_give_back_the_span(text: str) -> None:
    index = Utf16Index(text)
    for i in range(len(text) + 1):
        for j in range(i, min(len(text), i + 12) + 1):
            assert utf16_slice(text, index.offset(i), index.offset(j)) == text[i:j], (i, j)


def test_chunks_of_a_document_astral_in_the_middle_slice_back_exactly() -> None:
    chunks = chunk_document(MIDDLE, budget=60)
    assert len(chunks) >= 4
    assert MIDDLE.index("😀") > 60  # nothing astral near the start
    for c in chunks:
        assert utf16_slice(MIDDLE, c.start, c.end) == c.text
        start = MIDDLE.index(c.text)
        assert (c.start, c.end) == (units(MIDDLE[:start]), units(MIDDLE[:start + len(c.text)]))
    assert chunks[-1].end == units(MIDDLE)
    assert any(c.start > MIDDLE.index(c.text) for c in chunks)  # later chunks really are shifted


def test_citations_after_astral_characters_in_the_middle() -> None:
    text = "Plain words first [memo:1], then 😀𠀀 in the middle [memo:2] and 🇫🇷 [risks:3] at the end 𝄞"
    refs = find_citations(text)
    assert [utf16_slice(text, r.start, r.end) for r in refs] == ["memo:1", "memo:2", "risks:3"]
    shifts = [r.start - text.index(f"{r.doc}:{r.chunk}") for r in refs]
    assert shifts == [0, 2, 4]  # none before the first astral character, two per character after
