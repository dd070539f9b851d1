"""The pure half of retrieval and citations: the query an expert's call searches with,
the passages that fit a token budget, and ``[doc:chunk]`` citations found and resolved."""

from __future__ import annotations

from orchestrator.briefing.citations import find_citations, find_phase_citations, resolve_citations
from orchestrator.briefing.retrieval import build_query, merge_rankings, passage_tokens, pick_passages, render
from storage.read_models import ChunkRecord


def chunk(doc: str, n: int, text: str, score: float = 1.0) -> ChunkRecord:
    return ChunkRecord(doc, n, doc.title(), ["Pricing", "Risks"], 10 * n, 10 * n + len(text), text,
                       len(text) // 4, score)


def test_the_query_has_tiers_prompt_then_role_then_question_without_stop_words() -> None:
    q = build_query("Chief Financial Officer", "Assess the churn risk of the price change",
                    "Should we move to usage-based pricing next quarter? What is the risk?")
    assert q.tiers == ("assess churn risk price change", "financial",  # a title's rank words say nothing
                       "move usage based pricing next quarter risk")
    assert q.sentence.startswith("Chief Financial Officer Assess the churn")
    assert build_query("", "", "").tiers == ()
    assert build_query("CFO", "", "").tiers == ("cfo",)
    assert build_query("Head of Customer Success", "", "").tiers == ("customer success",)
    many = build_query("role words here", " ".join(f"w{i}x" for i in range(100)), "question")
    assert len(many.tiers) == 1 and len(many.tiers[0].split()) == 48  # at most 48 words in all
    assert build_query("", "价格 Q2 的 risk x AI", "").tiers == ("价格 q2 的 risk ai",)  # only one Latin letter goes


def test_rankings_are_merged_tier_by_tier_without_repeats() -> None:
    a, b, c = chunk("a", 1, "a"), chunk("b", 1, "b"), chunk("c", 1, "c")
    assert [x.ref for x in merge_rankings([[b, a], [a, c], [c]])] == ["b:1", "a:1", "c:1"]


def test_passages_are_picked_in_rank_order_within_the_budget() -> None:
    big = chunk("a", 1, "x" * 800)          # ~ 210 tokens once rendered
    small = [chunk("b", i, f"short passage {i}") for i in range(1, 5)]
    ranked = [small[0], big, *small[1:]]
    cost = passage_tokens(small[0])
    picked = pick_passages(ranked, budget_tokens=4 * cost)
    assert [c.ref for c in picked] == ["b:1", "b:2", "b:3", "b:4"]  # the big one does not fit; later ones do
    assert sum(passage_tokens(c) for c in picked) <= 4 * cost
    assert [c.ref for c in pick_passages(ranked, 10_000)] == [c.ref for c in ranked]
    assert pick_passages(ranked, 10_000, max_passages=2) == ranked[:2]
    assert pick_passages(ranked, 0) == []
    assert render(small[0]).startswith("[b:1] (B > Pricing > Risks)\nshort passage 1")


def test_citations_are_found_in_order_and_phase_citations_are_not_briefing_citations() -> None:
    text = "Margins fall [pricing-memo:2]; see [r1.dana] and [synthesis]. Also [Risks:1, notes:3] [ note:x ]."
    refs = find_citations(text)
    assert [(r.doc, r.chunk) for r in refs] == [("pricing-memo", 2), ("risks", 1), ("notes", 3)]
    assert [text[r.start:r.end] for r in refs] == ["pricing-memo:2", "Risks:1", "notes:3"]  # all BMP here
    assert find_phase_citations(text) == ["r1.dana", "synthesis"]


def test_a_citation_to_a_missing_passage_is_flagged_never_dropped() -> None:
    text = "A [memo:1] B [memo:9] C [ghost:1] D [memo:1]"
    known = {("memo", 1): chunk("memo", 1, "the passage")}
    cited = resolve_citations(find_citations(text), known)
    assert [(c.ref.doc, c.ref.chunk, c.unresolved) for c in cited] == [
        ("memo", 1, False), ("memo", 9, True), ("ghost", 1, True), ("memo", 1, False)]
    first, missing = cited[0].to_dict(), cited[1].to_dict()
    assert first == {"ref": "memo:1", "doc": "memo", "chunk": 1, "start": 3, "end": 9, "unresolved": False,
                     "title": "Memo", "heading_path": ["Pricing", "Risks"], "passage_start": 10, "passage_end": 21}
    assert missing["unresolved"] is True and missing["title"] is None and missing["start"] == 14
