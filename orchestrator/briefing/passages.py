"""The briefing at run time, over storage: the passages for one expert's call, and the
citations of a text resolved against the plan's stored chunks.

:func:`retrieve` is called by :class:`~tasks.briefer.Briefer` (the phase
runner's prepare step), :func:`cite` by the coordinator's read side; everything they
decide is in the pure modules (:mod:`~orchestrator.briefing.retrieval`,
:mod:`~orchestrator.briefing.citations`).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.briefing.citations import Citation, find_citations, resolve_citations
from orchestrator.briefing.rerank import Reranker
from orchestrator.briefing.retrieval import build_query, merge_rankings, pick_passages
from orchestrator.core.errors import storage_boundary
from storage import Database, briefings
from storage.read_models import ChunkRecord

CANDIDATES = 40  # chunks the search hands to the (optional) reranker and the pick


def retrieve(db: Database, plan_id: str, *, role: str, prompt: str, question: str, budget_tokens: int,
             reranker: Reranker | None = None, max_passages: int | None = None,
             cited: Sequence[tuple[str, int]] = (), cited_first: bool = False) -> list[ChunkRecord]:
    """The passages most relevant to this call that fit ``budget_tokens``, best first
    (see :mod:`~orchestrator.briefing.retrieval` for the order). When no word of the
    query occurs in the briefing, the opening passage of each document stands in (an
    expert still sees what the pack is about). A plan without a briefing gets none.

    ``cited`` are passages the call's inputs cite (``(doc, chunk)``; those that do not
    exist are ignored): after the search's passages, or before them with ``cited_first``
    — for a summary or a synthesis, which reports what the others drew on. One read
    (:func:`storage.briefings.candidates`)."""
    query = build_query(role, prompt, question)
    with storage_boundary():
        found = briefings.candidates(db, plan_id, query.tiers, cited, limit=CANDIDATES)
    ranked = merge_rankings(found.tiers) or found.openings
    if reranker is not None and len(ranked) > 1:
        ranked = reranker.rerank(query.sentence, ranked[:CANDIDATES])
    ordered = merge_rankings([found.cited, ranked] if cited_first else [ranked, found.cited])
    return pick_passages(ordered, budget_tokens, max_passages=max_passages)


def cite(db: Database, plan_id: str, text: str) -> list[Citation]:
    """Every briefing citation in ``text``, resolved against the plan's chunks; a
    citation of a passage that does not exist is returned flagged ``unresolved``."""
    refs = find_citations(text)
    with storage_boundary():
        known = briefings.citable(db, plan_id, [r.key for r in refs])
    return resolve_citations(refs, known)
