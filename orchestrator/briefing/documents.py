"""What users see of a plan's briefing: its documents, one document with its chunks'
spans, and the citations of a text — the shapes the Python API returns and the HTTP API
serves (``GET /v1/plans/{id}/documents[/{doc_id}]``, ``citations`` in a phase's content
and the result; docs/api.md). Every offset is in UTF-16 code units, so a page can
``text.slice(start, end)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.briefing.citations import Citation
from storage.read_models import ChunkRecord, DocumentRecord

PATH_SEPARATOR = " \u203a "  # a single right-pointing angle quotation mark between title and headings


@dataclass(frozen=True)
class DocumentSummary:
    id: str
    title: str
    format: str  # markdown | text
    length: int  # UTF-16 code units
    chunks: int

    @classmethod
    def of(cls, d: DocumentRecord) -> DocumentSummary:
        return cls(d.doc_id, d.title, d.format, d.length, d.chunks)


@dataclass(frozen=True)
class ChunkSpan:
    """Where chunk ``chunk`` (cited as ``[doc:chunk]``) lies in its document's text."""

    chunk: int
    heading_path: list[str]
    start: int
    end: int


@dataclass(frozen=True)
class DocumentView:
    id: str
    title: str
    format: str
    text: str
    chunks: list[ChunkSpan]

    @classmethod
    def of(cls, d: DocumentRecord, chunks: Sequence[ChunkRecord]) -> DocumentView:
        return cls(d.doc_id, d.title, d.format, d.text or "",
                   [ChunkSpan(c.ordinal, list(c.heading_path), c.start, c.end) for c in chunks])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CitationView:
    """A ``[doc:chunk]`` citation in a text: ``start``/``end`` are the reference's place in
    the citing text; ``title``, ``heading_path``, ``passage_start``/``passage_end`` locate
    the passage in its document — all None when ``unresolved`` (no such passage)."""

    ref: str
    doc: str
    chunk: int
    start: int
    end: int
    unresolved: bool
    title: str | None
    heading_path: list[str] | None
    passage_start: int | None
    passage_end: int | None

    @classmethod
    def of(cls, c: Citation) -> CitationView:
        return cls(**c.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def where(self) -> str:
        """The document's title and the passage's headings, joined by :data:`PATH_SEPARATOR`
        (``Pricing memo > Risks``, with an angle quote), or ``unresolved``."""
        if self.unresolved:
            return "unresolved"
        return PATH_SEPARATOR.join([self.title or self.doc, *(self.heading_path or [])])
