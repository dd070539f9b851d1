"""The ``briefing:`` entries of a plan: documents the experts work from.

An entry is either inline — ``title`` and ``text`` (optional ``id``, ``format``) — or a
local ``path`` (a file, or a folder of ``.md``/``.markdown``/``.txt`` files). Paths are
read on the user's side only (:mod:`orchestrator.client.local_briefing`), which turns them
into inline entries; a server refuses any entry that still holds a path
(:func:`orchestrator.briefing.ingest.ingest`).

Every document has a unique ``id`` slug — given, or derived here from its title — so
``[id:3]`` cites its third chunk. Size limits depend on the operator's settings and are
checked at ingestion, not here.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DOC_ID_RE = r"^[a-z0-9][a-z0-9_-]{0,59}$"
MARKDOWN_SUFFIXES = (".md", ".markdown")
TEXT_SUFFIXES = (".txt",)


class BriefingDocument(BaseModel):
    """One ``briefing:`` entry. Text is kept exactly as given (no whitespace stripping):
    chunk offsets index into it."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, pattern=DOC_ID_RE)
    title: str | None = Field(None, min_length=1, max_length=300)
    text: str | None = None
    path: str | None = Field(None, min_length=1, max_length=1000)
    format: Literal["markdown", "text"] | None = None

    @field_validator("title", "path")
    @classmethod
    def _stripped(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be blank")
        return None if v is None else v.strip()

    @field_validator("text")
    @classmethod
    def _storable(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.strip():
            raise ValueError("the document is empty")
        if "\x00" in v:
            raise ValueError("the document contains a NUL character")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the document is not valid Unicode (lone surrogate)") from None
        return v


def check_briefing(entries: list[BriefingDocument]) -> tuple[str, str] | None:
    """The first problem as ``(field, message)``, or None. Fills in derived ids and the
    default format of inline documents (so the stored plan carries both)."""
    for i, d in enumerate(entries):
        if d.path is not None:
            if d.text is not None:
                return f"briefing[{i}].text", "give either text or path, not both"
            if d.format is not None:
                return f"briefing[{i}].format", "the format of a file follows its suffix (.md, .markdown, .txt)"
        elif d.text is None:
            return f"briefing[{i}].text", "a document needs text (with a title), or a path"
        elif d.title is None:
            return f"briefing[{i}].title", "an inline document needs a title"
    taken: dict[str, int] = {}
    for i, d in enumerate(entries):
        if d.id is not None:
            if d.id in taken:
                return f"briefing[{i}].id", f"document id {d.id!r} is used twice (also briefing[{taken[d.id]}])"
            taken[d.id] = i
    for i, d in enumerate(entries):
        if d.path is None:
            if d.id is None:
                d.id = unique_slug(d.title or "document", taken)
                taken[d.id] = i
            if d.format is None:
                d.format = "markdown"
    return None


def unique_slug(name: str, taken: dict[str, int] | set[str]) -> str:
    """A document id from a title or file name, made unique with ``-2``, ``-3``, …"""
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:50].strip("-") or "document"
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    return slug
