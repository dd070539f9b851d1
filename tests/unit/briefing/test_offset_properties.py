"""Properties of every offset Conclave hands out (I31): over arbitrary Unicode — astral
characters anywhere, combining marks, CJK, the code points either side of the surrogate
block — offsets are UTF-16 code units, so slicing the UTF-16 encoding at them gives exactly
the span; chunks tile the document (I30); citation positions point at the reference."""

from __future__ import annotations

import re
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.briefing.chunking import Format, chunk_document
from orchestrator.briefing.citations import find_citations
from orchestrator.briefing.utf16 import Utf16Index, utf16_len, utf16_slice
from tests.unit.bounded import bounded

# Characters that make offsets interesting, each with a fair chance of being drawn.
SPECIAL = [
    "\U0001f600", "\U0001f469\u200d\U0001f469\u200d\U0001f467", "\U0001f1eb\U0001f1f7",  # emoji, ZWJ, flag
    "\U00020000", "\U0002a6d6", "\U0001d4b3", "\U0001d11e",  # CJK Extension B, math, music
    "\U00010000", "\U0010ffff", "\ud7ff", "\ue000", "\uffff", "\ufffd", "\ufeff",  # surrogate-adjacent
    "e\u0301", "\u0301", "\u0323\u0302", "\u20dd",  # combining marks, alone or after a letter
    "價", "格", "中", "。", "\uff01", "\uff1f", "\uff1b", "\u3000",  # CJK text and its punctuation, ideographic space
    " ", "\t", "\n", "\r\n", "\n\n", ".", "! ", "# ", "## ", "```", "~~~", "---", "===", "<!--", "-->",
]
CHARS = st.one_of(st.sampled_from(SPECIAL), st.characters(codec="utf-8"))
TEXTS = st.lists(CHARS, max_size=120).map("".join)


def code_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def js_slice(text: str, start: int, end: int) -> str:
    """What ``text.slice(start, end)`` gives in JavaScript; a slice that splits a surrogate
    pair fails to decode here (strict), so such an offset fails the property too."""
    return text.encode("utf-16-le")[2 * start:2 * end].decode("utf-16-le")


@bounded(300)
@given(TEXTS)
def test_lengths_and_offsets_are_utf16_code_units(text: str) -> None:
    assert utf16_len(text) == code_units(text)
    index = Utf16Index(text)
    for i in range(len(text) + 1):
        assert index.offset(i) == code_units(text[:i])


@bounded(200)
@given(TEXTS, st.data())
def test_slicing_at_converted_offsets_gives_the_code_point_span(text: str, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, len(text)))
    index = Utf16Index(text)
    assert utf16_slice(text, index.offset(i), index.offset(j)) == text[i:j]
    assert js_slice(text, index.offset(i), index.offset(j)) == text[i:j]


@bounded(150, deadline_ms=1000)
@given(TEXTS, st.sampled_from(["markdown", "text"]), st.integers(4, 40))
def test_chunks_tile_the_document_in_utf16_offsets(text: str, fmt: Format, budget: int) -> None:
    chunks = chunk_document(text, fmt, budget)
    assert [c.ordinal for c in chunks] == list(range(1, len(chunks) + 1))
    previous_end = 0
    for c in chunks:
        assert previous_end <= c.start < c.end <= code_units(text)
        assert js_slice(text, c.start, c.end) == c.text
        assert not c.text[0].isspace() and not c.text[-1].isspace()
        # what lies between two chunks is blank: together they hold every non-blank character
        assert not js_slice(text, previous_end, c.start).strip()
        previous_end = c.end
    assert not js_slice(text, previous_end, code_units(text)).strip()
    assert chunk_document(text, fmt, budget) == chunks  # stable: [doc:n] always names the same passage


REF = st.tuples(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,8}", fullmatch=True), st.integers(0, 999_999))
SPACE = st.sampled_from(["", " ", "  ", "\t", "\u3000", "\n"])
# filler never holds a bracket, so every citation in the text is one the test wrote
FILLER = st.lists(CHARS.filter(lambda c: "[" not in c and "]" not in c), max_size=12).map("".join)


@st.composite
def citing_texts(draw: st.DrawFn) -> tuple[str, list[tuple[str, str]]]:
    """A text of filler and bracketed citation groups, with the references written in it."""
    parts: list[str] = [draw(FILLER)]
    written: list[tuple[str, str]] = []
    for _ in range(draw(st.integers(0, 4))):
        refs = draw(st.lists(REF, min_size=1, max_size=3))
        group = "[" + draw(SPACE)
        for k, (doc, chunk) in enumerate(refs):
            if k:
                group += draw(SPACE) + draw(st.sampled_from([",", ";"])) + draw(SPACE)
            group += f"{doc}:{chunk}"
            written.append((doc, str(chunk)))
        parts += [group + draw(SPACE) + "]", draw(FILLER)]
    return "".join(parts), written


@bounded(200)
@given(citing_texts())
def test_citation_positions_slice_the_reference_in_utf16(case: tuple[str, list[tuple[str, str]]]) -> None:
    text, written = case
    refs = find_citations(text)
    assert [(r.doc, r.chunk) for r in refs] == [(doc.lower(), int(chunk)) for doc, chunk in written]
    for ref, (doc, chunk) in zip(refs, written, strict=True):
        assert js_slice(text, ref.start, ref.end) == f"{doc}:{chunk}"
    assert all(a.end <= b.start for a, b in pairwise(refs))


def test_the_alphabet_reaches_every_class_it_claims() -> None:
    """The special characters really are astral, combining, CJK and surrogate-adjacent."""
    joined = "".join(SPECIAL)
    assert re.search("[\U00010000-\U0010ffff]", joined) and "\ud7ff" in joined and "\ue000" in joined
    assert code_units("".join(SPECIAL)) > len(joined)
