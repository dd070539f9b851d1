"""A model's Markdown as the page shows it: rendered on the server, with its citations as
links, and never a tag or an attribute the model wrote.

Rendered with markdown-it-py (the CommonMark reference's port) with raw HTML off: a
``<script>``, an ``<img onerror=…>`` or any other tag a model writes is text, escaped;
a link's URL passes markdown-it's ``validateLink`` (no ``javascript:``, ``vbscript:``,
``file:``, ``data:``) and carries ``rel="nofollow noopener noreferrer"``; images are not
rendered (the page loads nothing from elsewhere). Single line breaks are kept
(``breaks``), as the experts write one point a line.

A text that ends with a verdict line (``Verdict: {"answer": …, "confidence": …, "reason": …}``,
the machine-readable line every expert and chair of a plan with an ``answer`` ends with) shows
it as a sentence — the answer, its confidence, the reason (and a review's ranking) — not as
JSON; the stored text keeps the line (copy and download give it as written).

Citations are found before Markdown sees the text and stand in it as private-use
placeholders, so no Markdown construct can split or swallow one: a phase citation
(``[r1.dana]``) becomes a link to the phase's card, a briefing citation (``[memo:2]``, as
:mod:`orchestrator.briefing.citations` found and resolved it) a button that opens the
passage. Only placeholders in running text become citations; one that lands anywhere
else (a code span, a link's URL or title) is put back as the text it stood for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup

from orchestrator.briefing.citations import PHASE_CITATION
from orchestrator.briefing.documents import CitationView
from orchestrator.briefing.utf16 import Utf16Index

_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f"{_OPEN}([0-9]+){_CLOSE}")

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True})
_md.enable(["table", "strikethrough"]).disable(["image"])

LINK_REL = "nofollow noopener noreferrer"


_VERDICT_LINE = re.compile(r"\n?[ \t]*Verdict:[ \t]*(\{.*\})[ \t]*\s*\Z")


def render(text: str, *, phases: Collection[str] = (), citations: Sequence[CitationView] = (),
           heading_base: int = 2) -> Markup:
    """``text`` (Markdown) as safe HTML; headings start at ``<h{heading_base + 1}>``."""
    text, verdict = split_verdict(text)
    source, cites = _stand_in(text, phases, citations)
    tokens = _md.parse(source)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1:]) + heading_base)}"
        if token.children:
            token.children = _cited(token.children, cites)
        _put_back(token, cites)
    html = Markup(_md.renderer.render(tokens, _md.options, {}))
    return html + _verdict(verdict) if verdict is not None else html


def split_verdict(text: str) -> tuple[str, dict[str, Any] | None]:
    """``text`` without its final verdict line, and the line's JSON object; the text as it
    is (and None) when it does not end with one that parses."""
    found = _VERDICT_LINE.search(text)
    if found is None:
        return text, None
    try:
        data = json.loads(found.group(1))
    except ValueError:
        return text, None
    if not isinstance(data, dict) or "answer" not in data:
        return text, None
    return text[:found.start()].rstrip(), data


def _verdict(data: dict[str, Any]) -> Markup:
    confidence = data.get("confidence")
    sure = (Markup(" · confidence {}").format(f"{confidence:.2f}")
            if isinstance(confidence, int | float) and not isinstance(confidence, bool) else Markup(""))
    ranking = data.get("ranking")
    ranked = (Markup(" · ranked {}").format(", ".join(str(r) for r in ranking))
              if isinstance(ranking, list) and ranking else Markup(""))
    reason = data.get("reason")
    why = Markup(" — {}").format(reason) if isinstance(reason, str) and reason.strip() else Markup("")
    return Markup('<p class="verdict-line"><span class="label">Verdict</span> <b>{answer}</b>{sure}{ranked}{why}'
                  '</p>').format(answer=str(data.get("answer")), sure=sure, ranked=ranked, why=why)


def _stand_in(text: str, phases: Collection[str],
              citations: Sequence[CitationView]) -> tuple[str, list[tuple[str, Markup]]]:
    """``text`` with each citation replaced by a placeholder, and what each stands for:
    (the text it replaced, the markup it becomes)."""
    text = text.replace(_OPEN, "\ufffd").replace(_CLOSE, "\ufffd")  # no placeholder a model wrote
    spans: list[tuple[int, int, Markup]] = []
    to_index = _CodePoints(text)
    for c in citations:
        start, end = to_index(c.start), to_index(c.end)
        if 0 <= start < end <= len(text):
            spans.append((start, end, _briefing(c, text[start:end])))
    for m in PHASE_CITATION.finditer(text):
        if m.group(1) in phases:
            spans.append((m.start(), m.end(), _phase(m.group(1), m.group(0))))
    spans.sort(key=lambda s: s[0])
    out: list[str] = []
    cites: list[tuple[str, Markup]] = []
    at = 0
    for start, end, markup in spans:
        if start < at:
            continue  # overlapping: the earlier one wins
        out.append(text[at:start])
        out.append(f"{_OPEN}{len(cites)}{_CLOSE}")
        cites.append((text[start:end], markup))
        at = end
    out.append(text[at:])
    return "".join(out), cites


class _CodePoints:
    """UTF-16 offsets (what citations carry) back to code-point indices of one text."""

    def __init__(self, text: str) -> None:
        self._index = Utf16Index(text)
        self._n = len(text)

    def __call__(self, unit: int) -> int:
        lo, hi = 0, self._n
        while lo < hi:  # the first index whose UTF-16 offset is at least ``unit``
            mid = (lo + hi) // 2
            if self._index.offset(mid) < unit:
                lo = mid + 1
            else:
                hi = mid
        return lo if self._index.offset(lo) == unit else -1


def _phase(key: str, label: str) -> Markup:
    return Markup('<a class="cite cite-phase" href="#phase-{k}" title="the phase {k}">{label}</a>').format(
        k=key, label=label)


def _briefing(c: CitationView, label: str) -> Markup:
    if c.unresolved:
        return Markup('<span class="cite unresolved" title="no such passage in the briefing">{}</span>').format(label)
    return Markup('<button type="button" class="cite cite-doc" data-doc="{d}" data-chunk="{n}" title="{t}">'
                  '{label}</button>').format(d=c.doc, n=c.chunk, t=c.where, label=label)


def _cited(children: list[Token], cites: list[tuple[str, Markup]]) -> list[Token]:
    """Inline tokens with each placeholder in running text made its citation's markup."""
    out: list[Token] = []
    for child in children:
        if child.type != "text" or _OPEN not in child.content:
            out.append(child)
            continue
        at = 0
        for m in _PLACEHOLDER.finditer(child.content):
            if m.start() > at:
                out.append(_token("text", child.content[at:m.start()]))
            out.append(_token("html_inline", str(cites[int(m.group(1))][1])))
            at = m.end()
        if at < len(child.content):
            out.append(_token("text", child.content[at:]))
    return out


def _token(kind: str, content: str) -> Token:
    return Token(type=kind, tag="", nesting=0, content=content)


def _put_back(token: Token, cites: list[tuple[str, Markup]]) -> None:
    """Any placeholder left (a code span, a URL, a title) is the text it stood for; a link
    gets its ``rel``."""
    def back(value: Any) -> Any:
        if isinstance(value, str) and _OPEN in value:
            return _PLACEHOLDER.sub(lambda m: cites[int(m.group(1))][0], value)
        return value

    for t in [token, *(token.children or [])]:
        if t.type == "html_inline":
            continue
        t.content = back(t.content)
        t.attrs = {k: back(v) for k, v in t.attrs.items()}
        if t.type == "link_open":
            t.attrSet("rel", LINK_REL)
