"""What a submission may carry in ``briefing:``: every rejection names the field, the
operator's limits hold, and a plan that still names a local path is refused where it
is submitted — the server never reads it. Ingestion is checked through a real
coordinator on a SQLite file (no services): a refused plan stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from orchestrator.briefing.ingest import Limits, ingest
from orchestrator.control.coordinator import Coordinator
from orchestrator.core.bus import MemoryBus
from orchestrator.core.errors import InvalidPlan
from orchestrator.core.settings import Settings
from orchestrator.plan.canvas import Canvas
from orchestrator.plan.schema import dump_plan, load_plan
from storage import Database, briefings, connect
from tests.unit.stored import EXAMPLES

MEMO = "# Pricing\n\nList price rises 8%.\n\n## Risks\n\nChurn 😀 may rise.\n"


class Recorder:
    """A dispatcher that keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[Canvas] = []

    def send(self, canvas: Canvas) -> None:
        self.sent.append(canvas)


def board(*entries: dict[str, Any], **changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = load_plan(EXAMPLES / "board.yaml").model_dump(mode="json")
    return {**plan, "briefing": list(entries), **changes}


def field_of(source: Any, **kwargs: Any) -> str:
    with pytest.raises(InvalidPlan) as exc:
        load_plan(source, **kwargs)
    field: str = exc.value.details[0]["field"]
    return field


@pytest.fixture()
def db(sqlite_url: str) -> Iterator[Database]:
    database = connect(sqlite_url)
    yield database
    database.dispose()


def coordinator(db: Database, **settings: Any) -> Coordinator:
    return Coordinator(db, Settings(database_url="sqlite://", **settings), Recorder(), MemoryBus())


def counts(db: Database) -> dict[str, int]:
    with db.engine.connect() as c:
        return {t: int(c.execute(text(f"select count(*) from {t}")).scalar() or 0)
                for t in ("plans", "phases", "events", "documents", "chunks", "chunks_fts")}


def test_schema_errors_name_the_field() -> None:
    assert field_of(board({"title": "A", "text": "a", "path": "x.md"})) == "briefing[0].text"
    assert field_of(board({"text": "untitled"})) == "briefing[0].title"
    assert field_of(board({"title": "A"})) == "briefing[0].text"
    assert field_of(board({"title": "A", "text": "  \n"})) == "briefing[0].text"
    assert field_of(board({"title": "A", "text": "nul\x00"})) == "briefing[0].text"
    assert field_of(board({"title": "A", "text": "lone \ud800 surrogate"})) == "briefing[0].text"
    assert field_of(board({"title": "A", "text": "a", "id": "Bad Id"})) == "briefing[0].id"
    assert field_of(board({"title": "A", "text": "a", "id": "x"}, {"title": "B", "text": "b", "id": "x"})) \
        == "briefing[1].id"
    assert field_of(board({"path": "pack", "format": "text"})) == "briefing[0].format"
    assert field_of(board({"title": "A", "text": "a", "url": "http://x"})) == "briefing[0].url"


def test_ids_are_derived_unique_and_kept_in_the_stored_spec() -> None:
    plan = load_plan(board({"title": "Pricing memo", "text": "a"}, {"title": "Pricing memo!", "text": "b"},
                           {"title": "x", "text": "c", "id": "pricing-memo-3"}, {"title": "Pricing memo", "text": "d"}))
    assert [d.id for d in plan.briefing] == ["pricing-memo", "pricing-memo-2", "pricing-memo-3", "pricing-memo-4"]
    spec = dump_plan(plan)
    assert spec["briefing"][1] == {"id": "pricing-memo-2", "title": "Pricing memo!", "text": "b", "format": "markdown"}
    assert load_plan(spec) == plan  # what the worker re-reads is what was submitted
    assert "briefing" not in dump_plan(load_plan(EXAMPLES / "board.yaml"))  # older specs unchanged


def test_limits_are_field_errors() -> None:
    limits = Limits(max_documents=3, max_document_bytes=1_000, max_bytes=1_500, max_chunks=6)
    docs = [{"title": f"D{i}", "text": f"# D{i}\n\nbody {i}\n"} for i in range(4)]

    def refused(*entries: dict[str, Any]) -> dict[str, str]:
        with pytest.raises(InvalidPlan) as exc:
            ingest(load_plan(board(*entries)).briefing, limits)
        detail: dict[str, str] = exc.value.details[0]
        return detail

    assert refused(*docs) == {"field": "briefing",
                              "message": "4 documents, the limit is 3 (CONCLAVE_BRIEFING_MAX_DOCUMENTS)"}
    big = {"title": "Big", "text": "é" * 501}  # 1002 bytes in UTF-8, 501 characters
    assert refused(docs[0], docs[1], big)["field"] == "briefing[2].text"
    assert "1002 bytes" in refused(docs[0], docs[1], big)["message"]
    halves = [{"title": f"H{i}", "text": "word " * 160} for i in range(2)]  # 800 bytes each
    assert refused(*halves)["field"] == "briefing[1].text"
    sections = {"title": "S", "text": "".join(f"# S{i}\n\ntext {i}\n\n" for i in range(7))}
    assert refused(sections) == {"field": "briefing[0].text", "message":
                                 "the documents up to this one make 7 chunks, the limit is 6 "
                                 "(CONCLAVE_BRIEFING_MAX_CHUNKS)"}
    assert len(ingest(load_plan(board(*docs[:3])).briefing, limits)) == 3


def test_submit_stores_documents_and_chunks_with_the_plan(db: Database) -> None:
    result = coordinator(db).submit(board({"title": "Pricing memo", "text": MEMO}, {"title": "Notes", "text":
                                                                                    "Plain.", "format": "text"}))
    docs = briefings.documents(db, result.plan_id, with_text=True)
    assert [(d.doc_id, d.title, d.format, d.chunks, d.text) for d in docs] == [
        ("pricing-memo", "Pricing memo", "markdown", 2, MEMO), ("notes", "Notes", "text", 1, "Plain.")]
    assert docs[0].length == len(MEMO) + 1  # UTF-16: the emoji is two code units
    chunks = briefings.chunks(db, result.plan_id)
    assert [(c.ref, c.heading_path) for c in chunks] == [
        ("pricing-memo:1", ["Pricing"]), ("pricing-memo:2", ["Pricing", "Risks"]), ("notes:1", [])]
    assert chunks[1].text == "## Risks\n\nChurn 😀 may rise." and chunks[1].end == len(MEMO.rstrip()) + 1
    assert counts(db)["chunks_fts"] == 3  # the search index was filled in the same transaction
    assert result.enqueued[0] == "opening"  # the whole board is one canvas from its opening


def test_a_plan_still_naming_a_path_is_refused_at_submit_and_nothing_is_read_or_stored(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "server-secret.md").write_text("# Secret\n\nnot for plans\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidPlan) as exc:
        coordinator(db).submit(board({"title": "Memo", "text": MEMO}, {"path": "server-secret.md"}))
    assert exc.value.details[0]["field"] == "briefing[1].path"
    assert "a server never reads a path" in exc.value.details[0]["message"]
    assert counts(db) == {"plans": 0, "phases": 0, "events": 0, "documents": 0, "chunks": 0, "chunks_fts": 0}


def test_a_plan_over_the_operators_limits_is_refused_at_submit_and_nothing_is_stored(db: Database) -> None:
    with pytest.raises(InvalidPlan) as exc:
        coordinator(db, briefing_max_chunks=2).submit(board({"title": "Memo", "text": MEMO},
                                                            {"title": "More", "text": "x"}))
    assert exc.value.details[0]["field"] == "briefing[1].text"
    assert counts(db)["plans"] == counts(db)["chunks"] == 0
