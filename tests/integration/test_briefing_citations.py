"""The briefing example on a cluster: real Postgres (full-text search), Redis and a worker
subprocess. The pack is read on the user's side and submitted as text; every expert's
turn and the final summary cite passages of it, and every citation the client's views
return resolves to a passage stored with the plan, at the offsets the document view gives
(what the plan page highlights)."""

from __future__ import annotations

from typing import Any

from orchestrator.briefing.utf16 import utf16_slice
from orchestrator.client.local_briefing import load_local_plan
from storage import briefings
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "board-briefing.yaml"


def test_the_briefing_example_on_a_cluster_ends_with_citations_of_stored_passages(
        workers: Any, client: Any, settings: Any) -> None:
    local = load_local_plan(EXAMPLE, settings)
    assert local.skipped == [] and all(d.path is None for d in local.plan.briefing)
    workers()
    plan_id = client.submit(local.plan)
    view = client.wait(plan_id, timeout=180)
    assert view.status == "completed", view.error

    stored = {c.ref: c for c in briefings.chunks(client.local.db, plan_id)}
    docs = {d.id: client.document(plan_id, d.id) for d in client.documents(plan_id)}
    assert {d.id: d.chunks for d in client.documents(plan_id)} == {
        doc: len([c for c in stored.values() if c.doc_id == doc]) for doc in docs}

    cited_anywhere = set()
    for key in [p.key for p in view.phases if p.kind in ("turn", "final_summary")]:
        text = client.phase_text(plan_id, key) or ""
        cited = client.citations(plan_id, key)
        assert cited, f"{key} cites no passage"
        for c in cited:
            assert not c.unresolved, (key, c)
            passage = stored[c.ref]  # a passage stored with the plan …
            doc = docs[c.doc]
            assert utf16_slice(doc.text, c.passage_start or 0, c.passage_end or 0) == passage.text  # … where it says
            assert (c.title, c.heading_path) == (doc.title, passage.heading_path)
            assert utf16_slice(text, c.start, c.end) == c.ref
            cited_anywhere.add(c.doc)
    assert client.citations(plan_id) == client.citations(plan_id, "final")  # the result is the final summary
    assert len(cited_anywhere) >= 4  # each expert works from the part of the pack about its role
