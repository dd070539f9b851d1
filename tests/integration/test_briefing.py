"""Briefing packs on both databases: retrieval picks the relevant passage on a made-up pack
(Postgres full-text search and SQLite FTS5 behind one function), and ingestion is atomic —
a failure halfway through storing the chunks leaves no plan, no document and no chunk
(failure report R-01). The faults are real database triggers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from orchestrator.briefing.ingest import Limits
from orchestrator.briefing.passages import cite, retrieve
from orchestrator.client.local_briefing import read_briefing
from orchestrator.control.coordinator import Coordinator
from orchestrator.core.bus import MemoryBus
from orchestrator.core.errors import ConclaveError
from orchestrator.core.settings import Settings
from orchestrator.plan.canvas import Canvas
from orchestrator.plan.schema import load_plan
from storage import Database, briefings, connect
from tests.unit.stored import EXAMPLES

PACK = Path(__file__).parent / "briefing_pack"
TABLES = ("plans", "phases", "events", "documents", "chunks")


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Canvas] = []

    def send(self, canvas: Canvas) -> None:
        self.sent.append(canvas)


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest) -> Iterator[Database]:
    if request.param == "postgresql":
        url = request.getfixturevalue("clean_db")
    else:
        url = request.getfixturevalue("sqlite_url")
    database = connect(url, pool_size=2)
    yield database
    database.dispose()


def pack_plan(**changes: Any) -> Any:
    """The board example with the made-up pack attached (read as the CLI would)."""
    base = load_plan(EXAMPLES / "board.yaml").model_dump(mode="json")
    plan = load_plan({**base, "briefing": [{"path": PACK.name}], **changes})
    local = read_briefing(plan, PACK.parent, Limits(100, 200_000, 800_000, 2_000))
    assert local.skipped == []
    return local.plan


def submit(db: Database, plan: Any) -> str:
    coordinator = Coordinator(db, Settings(database_url=str(db.engine.url)), Recorder(), MemoryBus())
    return coordinator.submit(plan).plan_id


def counts(db: Database) -> dict[str, int]:
    with db.engine.connect() as c:
        return {t: int(c.execute(text(f"select count(*) from {t}")).scalar() or 0) for t in TABLES}


def search_index_ok(db: Database, word: str) -> int:
    """How many chunks the search index finds for ``word`` (SQLite: after an integrity check
    of the FTS index against the chunks table)."""
    with db.engine.begin() as c:
        if db.dialect == "sqlite":
            c.execute(text("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)"))
            return int(c.execute(text("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH :w"), {"w": word})
                       .scalar() or 0)
        return int(c.execute(text("SELECT count(*) FROM chunks WHERE search @@ plainto_tsquery('english', :w)"),
                             {"w": word}).scalar() or 0)


def test_retrieval_picks_the_relevant_passage(db: Database) -> None:
    plan_id = submit(db, pack_plan())
    assert [d.doc_id for d in briefings.documents(db, plan_id)] == [
        "churn-analysis", "office-move", "pricing-memo", "security-review"]

    def top(role: str, prompt: str, question: str, budget: int = 400) -> list[str]:
        return [c.ref for c in retrieve(db, plan_id, role=role, prompt=prompt, question=question,
                                        budget_tokens=budget)]

    question = "Should we move Ledgerly to usage-based pricing next quarter?"
    security = top("Chief Information Security Officer", "Assess our exposure after the breach and what "
                   "remediation must happen before a launch", question)
    assert security[0] == "security-review:2"  # "Exposure and remediation"
    churn = top("Head of Customer Success", "Which small accounts leave, and why?", question)
    assert churn[0] == "churn-analysis:1"
    risks = top("Chief Financial Officer", "What are the risks of charging per invoice?", question)
    assert risks[0] in ("pricing-memo:2", "pricing-memo:3") and "pricing-memo:3" in risks[:3]
    assert all(not ref.startswith("office-move") for ref in security[:2] + churn[:2] + risks[:2])
    # a long question sharing only a word or two with the pack still finds it (OR semantics)
    long = top("", "", "Thinking about everything the board discussed in the spring offsite, the hiring "
               "freeze, the roadmap, the partner programme, the rebrand and the kitchen, where do the bicycles go?")
    assert long[0] == "office-move:1"
    # nothing shared: the opening passage of each document stands in; the budget is honoured
    fallback = top("", "", "zyzzyva quux", budget=10_000)
    assert fallback == ["churn-analysis:1", "office-move:1", "pricing-memo:1", "security-review:1"]
    assert top("", "", "breach remediation exposure", budget=5) == []


def test_stored_chunks_are_citable_and_the_search_index_is_in_step(db: Database) -> None:
    plan_id = submit(db, pack_plan())
    chunks = briefings.chunks(db, plan_id)
    assert ("security-review:2", ["Security review, Q3", "Exposure and remediation"]) in [
        (c.ref, c.heading_path) for c in chunks]
    fence = next(c for c in chunks if "rotate tokens" in c.text)
    assert "# rotate tokens (runbook excerpt, not a heading)" in fence.text
    assert not any("rotate tokens" in " ".join(c.heading_path) for c in chunks)
    memo = briefings.document(db, plan_id, "pricing-memo")
    third = next(c for c in chunks if c.ref == "pricing-memo:3")
    assert memo.text is not None and memo.text[third.start:third.end] == third.text  # ASCII: code points = UTF-16
    cited = cite(db, plan_id, "Small accounts churn twice as often [churn-analysis:1]; [pricing-memo:9], [r1.dana].")
    assert [(c.ref.doc, c.ref.chunk, c.unresolved) for c in cited] == [("churn-analysis", 1, False),
                                                                      ("pricing-memo", 9, True)]
    assert cited[0].passage is not None and cited[0].passage.title == "briefing_pack/churn-analysis.md"
    assert search_index_ok(db, "remediation") == 1
    other = submit(db, pack_plan(title="Another board"))  # a second plan's chunks never leak into the first's
    assert {c.ref for c in briefings.search(db, plan_id, "remediation breach")} == {
        c.ref for c in briefings.search(db, other, "remediation breach")}
    with db.engine.begin() as c:
        c.execute(text("DELETE FROM plans WHERE id = :p"), {"p": other})
    assert search_index_ok(db, "remediation") == 1  # deleting a plan removes its chunks from the index too


def test_a_failure_halfway_through_storing_chunks_stores_nothing(db: Database) -> None:
    plan = pack_plan(task_id=f"briefing-{uuid.uuid4().hex[:6]}")
    n = 5  # the pack has more chunks than this; the first documents are already written when it fails
    name = f"fault_{uuid.uuid4().hex[:8]}"
    with db.engine.begin() as c:
        if db.dialect == "postgresql":
            c.execute(text(f"""
                CREATE FUNCTION {name}() RETURNS trigger AS $$
                BEGIN
                  IF (SELECT count(*) FROM chunks WHERE plan_id = NEW.plan_id) >= {n - 1} THEN
                    RAISE EXCEPTION 'injected fault storing chunk %', NEW.ordinal;
                  END IF;
                  RETURN NEW;
                END $$ LANGUAGE plpgsql"""))
            c.execute(text(f"CREATE TRIGGER {name} BEFORE INSERT ON chunks FOR EACH ROW EXECUTE FUNCTION {name}()"))
        else:
            c.execute(text(f"""
                CREATE TRIGGER {name} BEFORE INSERT ON chunks
                WHEN (SELECT count(*) FROM chunks WHERE plan_id = NEW.plan_id) >= {n - 1}
                BEGIN SELECT RAISE(ABORT, 'injected fault storing a chunk'); END"""))
    try:
        with pytest.raises(ConclaveError):
            submit(db, plan)
        assert counts(db) == dict.fromkeys(TABLES, 0)
        assert search_index_ok(db, "remediation") == 0
    finally:
        with db.engine.begin() as c:
            if db.dialect == "postgresql":
                c.execute(text(f"DROP TRIGGER IF EXISTS {name} ON chunks"))
                c.execute(text(f"DROP FUNCTION IF EXISTS {name}()"))
            else:
                c.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
    plan_id = submit(db, plan)  # the same task_id is free: nothing of the failed attempt remains
    assert counts(db)["documents"] == 4 and counts(db)["chunks"] == len(briefings.chunks(db, plan_id)) > n
    assert search_index_ok(db, "remediation") == 1
