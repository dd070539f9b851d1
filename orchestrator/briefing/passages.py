"""The briefing at run time, over storage: the passages for one expert's call, and the
citations of a text resolved against the plan's stored chunks.

These are the two functions the prompt builder and the plan view call (wave 2 of
issue 11); everything they decide is in the pure modules
(:mod:`~orchestrator.briefing.retrieval`, :mod:`~orchestrator.briefing.citations`).
"""

from __future__ import annotations

from orchestrator.briefing.citations import Citation, find_citations, resolve_citations
from orchestrator.briefing.rerank import Reranker
from orchestrator.briefing.retrieval import build_query, merge_rankings, pick_passages
from orchestrator.errors import storage_boundary
from storage import Database, briefings
from storage.records import ChunkRecord

CANDIDATES = 40  # chunks the search hands to the (optional) reranker and the pick


def retrieve(db: Database, plan_id: str, *, role: str, prompt: str, question: str, budget_tokens: int,
             reranker: Reranker | None = None, max_passages: int | None = None) -> list[ChunkRecord]:
    """The passages most relevant to this call that fit ``budget_tokens``, best first
    (see :mod:`~orchestrator.briefing.retrieval` for the order). When no word of the
    query occurs in the briefing, the opening passage of each document stands in (an
    expert still sees what the pack is about). A plan without a briefing gets none."""
    query = build_query(role, prompt, question)
    with storage_boundary():
        ranked = merge_rankings([briefings.search(db, plan_id, tier, limit=CANDIDATES) for tier in query.tiers])
        if not ranked:
            ranked = briefings.openings(db, plan_id, limit=CANDIDATES)
    if reranker is not None and len(ranked) > 1:
        ranked = reranker.rerank(query.sentence, ranked[:CANDIDATES])
    return pick_passages(ranked, budget_tokens, max_passages=max_passages)


def cite(db: Database, plan_id: str, text: str) -> list[Citation]:
    """Every briefing citation in ``text``, resolved against the plan's chunks; a
    citation of a passage that does not exist is returned flagged ``unresolved``."""
    refs = find_citations(text)
    with storage_boundary():
        known = briefings.citable(db, plan_id, [r.key for r in refs])
    return resolve_citations(refs, known)
