"""Briefing citations in a text: ``[doc:chunk]`` — found, located and resolved.

Pure: resolution takes the stored chunks it may point to (``storage.briefings.citable``
fetches them). Two kinds of citation appear in Conclave texts and stay distinct:

- a **briefing** citation names a passage: ``[pricing-memo:3]`` — a document id, a
  colon, a chunk ordinal. Several may share brackets: ``[pricing-memo:3, risks:1]``;
- a **phase** citation names a phase's output: ``[r1.dana]``, ``[market]`` — never a
  colon (phase keys cannot hold one), so it is never taken for a briefing citation.

Every briefing citation found is returned, in text order: one pointing at a passage
that does not exist is kept and flagged ``unresolved`` — never dropped, never guessed.
Positions (of the citation in the citing text, and of the passage in its document)
are UTF-16 code units, what a browser's ``slice`` takes (R-03).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.briefing.utf16 import Utf16Index
from storage.read_models import ChunkRecord

_REF = r"[A-Za-z0-9][A-Za-z0-9_-]{0,59}:[0-9]{1,6}"
BRIEFING_CITATION = re.compile(rf"\[\s*({_REF}(?:\s*[,;]\s*{_REF})*)\s*\]")
PHASE_CITATION = re.compile(r"\[([a-z0-9][a-z0-9_-]*(?:\.[a-z0-9][a-z0-9_-]*)*)\]")
_ONE_REF = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]{0,59}):([0-9]{1,6})")


@dataclass(frozen=True)
class CitationRef:
    """A briefing citation as written: ``doc``/``chunk`` and where the reference itself
    (``pricing-memo:3``, without brackets) sits in the citing text, in UTF-16 units."""

    doc: str
    chunk: int
    start: int
    end: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.doc, self.chunk)


@dataclass(frozen=True)
class Citation:
    """A citation resolved against a plan's stored chunks (or flagged ``unresolved``)."""

    ref: CitationRef
    passage: ChunkRecord | None

    @property
    def unresolved(self) -> bool:
        return self.passage is None

    def to_dict(self) -> dict[str, Any]:
        p = self.passage
        return {
            "ref": f"{self.ref.doc}:{self.ref.chunk}", "doc": self.ref.doc, "chunk": self.ref.chunk,
            "start": self.ref.start, "end": self.ref.end, "unresolved": p is None,
            "title": p.title if p else None, "heading_path": list(p.heading_path) if p else None,
            "passage_start": p.start if p else None, "passage_end": p.end if p else None,
        }


def find_citations(text: str) -> list[CitationRef]:
    """Every briefing citation in ``text``, in order (phase citations are ignored)."""
    index = Utf16Index(text)
    found = []
    for group in BRIEFING_CITATION.finditer(text):
        for m in _ONE_REF.finditer(text, group.start(1), group.end(1)):
            found.append(CitationRef(m.group(1).lower(), int(m.group(2)), index.offset(m.start()),
                                     index.offset(m.end())))
    return found


def find_phase_citations(text: str) -> list[str]:
    """The phase keys cited in ``text`` (``[r1.dana]``), in order; never a briefing one."""
    return [m.group(1) for m in PHASE_CITATION.finditer(text)]


def resolve_citations(refs: list[CitationRef], known: Mapping[tuple[str, int], ChunkRecord]) -> list[Citation]:
    """Each reference with its passage, or flagged unresolved; same order, none dropped."""
    return [Citation(r, known.get(r.key)) for r in refs]
