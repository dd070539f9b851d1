"""The CLI's "Citations" list after a synthesis: each passage cited once, resolved to its
document and heading path, and a citation of a passage that does not exist flagged."""

from __future__ import annotations

from dataclasses import asdict

from orchestrator.briefing.citations import find_citations, resolve_citations
from orchestrator.briefing.documents import CitationView
from orchestrator.client.console import citation_lines
from storage.read_models import ChunkRecord


def test_the_list_resolves_each_passage_once_and_flags_the_unresolved() -> None:
    risks = ChunkRecord("memo", 2, "pack/memo.md", ["Pricing memo", "Risks"], 40, 90, "Heavy users leave.", 5)
    text = "Heavy users leave [memo:2]. Margins rise [memo:2, ghost:7]."
    cited = [CitationView.of(c) for c in resolve_citations(find_citations(text), {("memo", 2): risks})]
    assert [asdict(c) for c in cited] == [c.to_dict() for c in resolve_citations(find_citations(text),
                                                                                 {("memo", 2): risks})]
    lines = [line.plain for line in citation_lines(cited)]
    assert lines == ["Citations (2 passage(s) cited, 1 unresolved)",
                     "  [memo:2] → pack/memo.md \u203a Pricing memo \u203a Risks  \u00d72",
                     "  [ghost:7] → unresolved: no such passage in the briefing"]
    assert citation_lines([]) == []
    only = [line.plain for line in citation_lines(cited[:1])]
    assert only[0] == "Citations (1 passage(s) cited, all resolved to passages of the briefing)"
