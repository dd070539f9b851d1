"""Ingestion at submit: a plan's briefing checked against the operator's limits and
chunked, ready to be stored with the plan in one transaction
(:func:`storage.plans.create_plan`).

This runs where the plan is submitted — possibly a server — so it never touches the
file system: an entry that still names a ``path`` is refused (``briefing[i].path``).
Local paths are read on the user's side by :mod:`orchestrator.client.local_briefing`.
Every refusal is an :class:`~orchestrator.core.errors.InvalidPlan` naming the field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from orchestrator.briefing.chunking import chunk_document
from orchestrator.briefing.entries import BriefingDocument
from orchestrator.briefing.utf16 import utf16_len
from orchestrator.core.errors import InvalidPlan
from orchestrator.core.settings import Settings
from orchestrator.gateway.tokens import estimate_tokens
from storage.read_models import NewChunk, NewDocument


@dataclass(frozen=True)
class Limits:
    """The operator's briefing limits (``CONCLAVE_BRIEFING_*``)."""

    max_documents: int
    max_document_bytes: int
    max_bytes: int
    max_chunks: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(settings.briefing_max_documents, settings.briefing_max_document_bytes,
                   settings.briefing_max_bytes, settings.briefing_max_chunks)


def ingest(entries: Sequence[BriefingDocument], settings: Settings | Limits) -> list[NewDocument]:
    """The documents to store, each with its chunks; raises :class:`InvalidPlan`."""
    limits = settings if isinstance(settings, Limits) else Limits.from_settings(settings)
    if len(entries) > limits.max_documents:
        _refuse("briefing", f"{len(entries)} documents, the limit is {limits.max_documents} "
                            "(CONCLAVE_BRIEFING_MAX_DOCUMENTS)")
    out: list[NewDocument] = []
    total_bytes = total_chunks = 0
    for i, d in enumerate(entries):
        if d.path is not None:
            _refuse(f"briefing[{i}].path",
                    "local paths are read where the plan is written (`conclave run`/`submit`, or the Python "
                    "client in embedded mode) and sent as text; a server never reads a path a plan names")
        if d.text is None or d.id is None or d.title is None:  # the schema guarantees all three
            _refuse(f"briefing[{i}].text", "a document needs a title and text")
        size = len(d.text.encode("utf-8"))
        if size > limits.max_document_bytes:
            _refuse(f"briefing[{i}].text", f"{size} bytes, the limit is {limits.max_document_bytes} "
                                           "(CONCLAVE_BRIEFING_MAX_DOCUMENT_BYTES)")
        total_bytes += size
        if total_bytes > limits.max_bytes:
            _refuse(f"briefing[{i}].text", f"the documents up to this one are {total_bytes} bytes, the limit for "
                                           f"all of them is {limits.max_bytes} (CONCLAVE_BRIEFING_MAX_BYTES)")
        chunks = chunk_document(d.text, d.format or "markdown")
        total_chunks += len(chunks)
        if total_chunks > limits.max_chunks:
            _refuse(f"briefing[{i}].text", f"the documents up to this one make {total_chunks} chunks, the limit is "
                                           f"{limits.max_chunks} (CONCLAVE_BRIEFING_MAX_CHUNKS)")
        out.append(NewDocument(
            doc_id=d.id, position=i, title=d.title, format=d.format or "markdown", text=d.text,
            length=utf16_len(d.text), sha256=hashlib.sha256(d.text.encode("utf-8")).hexdigest(),
            chunks=[NewChunk(c.ordinal, c.start, c.end, list(c.heading_path), c.text, estimate_tokens(c.text))
                    for c in chunks]))
    return out


def _refuse(field: str, message: str) -> NoReturn:
    raise InvalidPlan(f"invalid plan: {field}: {message}", details=[{"field": field, "message": message}])
