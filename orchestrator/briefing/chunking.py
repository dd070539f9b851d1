"""Splitting a briefing document into citable chunks that respect Markdown.

Guarantees (failure report R-02):

- chunks follow headings — ATX (``#`` … ``######``) and setext (``===`` / ``---`` under a
  paragraph) — and each keeps its heading path, e.g. ``("Pricing", "Risks")``;
- fenced code (```` ``` ```` or ``~~~``, any length ≥ 3, with or without an info string)
  is opaque: a ``#`` line inside is never a heading, and a fence is never split. A fence
  closes only with the same character, at least as long, and nothing after it; an
  unclosed fence runs to the end of the document. HTML comments, ``<pre>``/``<script>``/
  ``<style>`` blocks and YAML front matter are opaque the same way;
- a section longer than the budget is split between blocks (at blank lines), a paragraph
  longer than it at sentence ends, then at spaces — never inside an opaque block (a fence
  longer than the budget stays one oversized chunk);
- plain-text documents are split by paragraphs the same way, with an empty heading path;
- chunks are in document order, do not overlap, start and end on non-blank characters,
  and together hold every non-blank character of the document;
- ``start``/``end`` are UTF-16 code units (R-03): ``chunk.text`` is exactly
  ``document.slice(start, end)`` in JavaScript;
- the same text always gives the same chunks, so ``[doc:ordinal]`` is a stable citation.

Lines end at ``\\n`` (``\\r\\n`` too). This is a block scanner, not a full CommonMark parser:
headings inside block quotes and list items are treated as text, which only ever makes a
section longer, never invents a heading.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.briefing.utf16 import Utf16Index

CHUNK_CHARS = 1200  # the size budget of one chunk, in characters
Format = Literal["markdown", "text"]

_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_NOT_SETEXT_TEXT = re.compile(r"^(?: {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)| {0,3}>| {4}|\t)")
_HTML_OPEN = (
    (re.compile(r"^ {0,3}<!--"), re.compile(r"-->")),
    (re.compile(r"^ {0,3}<(?:pre|script|style|textarea)(?:[\s>]|$)", re.I),
     re.compile(r"</(?:pre|script|style|textarea)>", re.I)),
)
# after . ! ? followed by a space; after an ideographic full stop, fullwidth ! ? ; or a line break
_SENTENCE_END = re.compile(r"(?<=[.!?])(?=\s)|(?<=[\u3002\uff01\uff1f\uff1b\n])")


@dataclass(frozen=True)
class Chunk:
    """One citable passage: ``[doc:ordinal]``. Offsets are UTF-16 code units."""

    ordinal: int
    start: int
    end: int
    heading_path: tuple[str, ...]
    text: str


@dataclass
class _Block:
    kind: Literal["heading", "opaque", "para"]
    start: int  # code-point offsets; end includes the line break
    end: int
    level: int = 0
    title: str = ""
    first_line: str = ""


@dataclass
class _Section:
    start: int
    level: int
    path: tuple[str, ...]
    blocks: list[_Block] = field(default_factory=list)

    @property
    def heading_only(self) -> bool:
        return len(self.blocks) == 1 and self.blocks[0].kind == "heading"


def chunk_document(text: str, fmt: Format = "markdown", budget: int = CHUNK_CHARS) -> list[Chunk]:
    """The chunks of ``text``, numbered from 1."""
    blocks = _scan(text, markdown=fmt == "markdown")
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    for section in _sections(blocks):
        for start, end in _pack(text, section.blocks, budget):
            spans.append((start, end, section.path))
    index = Utf16Index(text)
    return [Chunk(n, index.offset(s), index.offset(e), path, text[s:e])
            for n, (s, e, path) in enumerate(spans, start=1)]


# ------------------------------------------------------------------ scanning lines into blocks


def _scan(text: str, *, markdown: bool) -> list[_Block]:
    lines = [(m.start(), m.end(), m.group().rstrip("\r\n")) for m in _LINE.finditer(text)]
    blocks: list[_Block] = []
    i, blank_before = 0, True
    if markdown:
        end = _front_matter_end(lines)
        if end is not None:
            blocks.append(_Block("opaque", 0, lines[end][1]))
            i = end + 1
    while i < len(lines):
        start, end, line = lines[i]
        if not line.strip():
            blank_before, i = True, i + 1
            continue
        last = blocks[-1] if blocks else None
        if markdown:
            closing = _opaque_end(lines, i)
            if closing is not None:
                blocks.append(_Block("opaque", start, lines[closing][1]))
                blank_before, i = False, closing + 1
                continue
            atx = _ATX.match(line)
            if atx:
                blocks.append(_Block("heading", start, end, len(atx.group(1)), (atx.group(2) or "").strip()))
                blank_before, i = False, i + 1
                continue
            underline = _SETEXT.match(line)
            if (underline and last is not None and last.kind == "para" and not blank_before
                    and not _NOT_SETEXT_TEXT.match(last.first_line)):
                last.kind, last.end = "heading", end
                last.level = 1 if underline.group(1)[0] == "=" else 2
                last.title = " ".join(text[last.start:start].split())
                blank_before, i = False, i + 1
                continue
        if last is not None and last.kind == "para" and not blank_before:
            last.end = end
        else:
            blocks.append(_Block("para", start, end, first_line=line))
        blank_before, i = False, i + 1
    return blocks


def _front_matter_end(lines: list[tuple[int, int, str]]) -> int | None:
    """The index of the line closing YAML front matter at the very top, if any."""
    if not lines or lines[0][2].rstrip() != "---":
        return None
    for j in range(1, len(lines)):
        if lines[j][2].rstrip() in ("---", "..."):
            return j
    return None


def _opaque_end(lines: list[tuple[int, int, str]], i: int) -> int | None:
    """If line ``i`` opens a fence or an HTML block, the index of its last line (the end of
    the document when it never closes); otherwise None."""
    line = lines[i][2]
    fence = _FENCE_OPEN.match(line)
    if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
        char, length = fence.group(1)[0], len(fence.group(1))
        for j in range(i + 1, len(lines)):
            close = _FENCE_CLOSE.match(lines[j][2])
            if close and close.group(1)[0] == char and len(close.group(1)) >= length:
                return j
        return len(lines) - 1
    for opener, closer in _HTML_OPEN:
        opened = opener.match(line)
        if opened:
            for j in range(i, len(lines)):
                if closer.search(lines[j][2], opened.end() if j == i else 0):
                    return j
            return len(lines) - 1
    return None


# ------------------------------------------------------------------ blocks into sections


def _sections(blocks: list[_Block]) -> list[_Section]:
    stack: list[tuple[int, str]] = []
    sections = [_Section(0, 0, ())]
    for b in blocks:
        if b.kind == "heading":
            while stack and stack[-1][0] >= b.level:
                stack.pop()
            stack.append((b.level, b.title))
            sections.append(_Section(b.start, b.level, tuple(t for _, t in stack if t), [b]))
        else:
            sections[-1].blocks.append(b)
    # A heading directly followed by a deeper one rides along with it: no chunk is only a title.
    for k in range(len(sections) - 2, 0, -1):
        here, after = sections[k], sections[k + 1]
        if here.heading_only and after.level > here.level:
            after.blocks[:0] = here.blocks
            after.start = here.start
            del sections[k]
    return [s for s in sections if s.blocks]


# ------------------------------------------------------------------ sections into chunks


def _pack(text: str, blocks: list[_Block], budget: int) -> list[tuple[int, int]]:
    """Greedy packing of a section's blocks (long paragraphs pre-split) into spans of at
    most ``budget`` characters; a heading always travels with what follows it."""
    units: list[tuple[int, int, bool]] = []
    for b in blocks:
        if b.kind == "para" and b.end - b.start > budget:
            units += [(s, e, False) for s, e in _split_paragraph(text, b.start, b.end, budget)]
        else:
            units.append((b.start, b.end, b.kind == "heading"))
    spans: list[tuple[int, int]] = []
    cur: list[int] | None = None
    only_heading = False
    for start, end, is_heading in units:
        if cur is not None and (only_heading or end - cur[0] <= budget):
            cur[1], only_heading = end, False
            continue
        if cur is not None:
            spans.append((cur[0], cur[1]))
        cur, only_heading = [start, end], is_heading
    if cur is not None:
        spans.append((cur[0], cur[1]))
    return [trimmed for s, e in spans if (trimmed := _trim(text, s, e)) is not None]


def _split_paragraph(text: str, start: int, end: int, budget: int) -> list[tuple[int, int]]:
    """Pieces of at most ``budget`` characters: cut at the last sentence end that fits,
    else at the last space, else (one unbroken run) at the budget."""
    ends = [m.start() for m in _SENTENCE_END.finditer(text, start, end)]
    pieces = []
    while end - start > budget:
        limit = start + budget
        k = bisect_right(ends, limit) - 1
        if k >= 0 and ends[k] > start:
            cut = ends[k]
        else:
            cut = max(text.rfind(" ", start + 1, limit + 1), text.rfind("\t", start + 1, limit + 1))
            if cut <= start:
                cut = limit
        pieces.append((start, cut))
        start = cut
        while start < end and text[start].isspace():
            start += 1
    pieces.append((start, end))
    return pieces


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None
