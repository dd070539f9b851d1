"""The briefing of a plan: its documents, their chunks, citations and search.

Documents and chunks are written only by :func:`storage.plans.create_plan`, in the
transaction that stores the plan (:func:`add_briefing`), so a plan is never visible
with half a briefing (failure report R-01). They are immutable afterwards.

Search is one function over two dialects, each with its own index kept in step with
``chunks`` by the database itself (migration ``0003``):

- Postgres: a generated ``tsvector`` column (``english`` configuration: stemming and
  English stop words; heading path weighted above the text) with a GIN index, queried
  with ``websearch_to_tsquery`` on the query's words joined by ``or``, ranked by
  ``ts_rank`` normalised by length;
- SQLite: an FTS5 table (``porter unicode61`` tokenizer: the same stemming idea) filled
  by triggers in the inserting transaction, queried with the words OR-ed, ranked by
  ``bm25`` (heading path weighted 2:1).

Both use OR semantics, so a long question matches a passage that shares a few of its
words. Query text never reaches either query language unescaped: it is reduced to
words first.

:func:`candidates` is what a phase runs: every search tier of one expert's call, the
passages its inputs cite and (when no tier finds anything) the opening passages, in ONE
statement — a plan with a briefing costs a phase one read, whatever the number of tiers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import JSON, TextualSelect, func, insert, select, text
from sqlalchemy.orm import Session

from storage.db import Database
from storage.exceptions import NotFound
from storage.models import Chunk, Document
from storage.read_models import ChunkRecord, DocumentRecord, NewDocument

MAX_QUERY_TERMS = 64
_WORD = re.compile(r"\w+")
_OPERATORS = frozenset({"or", "and", "not"})


def add_briefing(s: Session, plan_id: str, documents: Sequence[NewDocument]) -> int:
    """Insert documents and their chunks in the caller's transaction. Returns the number
    of chunks. Only :func:`storage.plans.create_plan` calls it."""
    n = 0
    for d in documents:
        row = Document(plan_id=plan_id, doc_id=d.doc_id, position=d.position, title=d.title, format=d.format,
                       text=d.text, length=d.length, sha256=d.sha256)
        s.add(row)
        s.flush()
        if d.chunks:
            s.execute(insert(Chunk), [
                {"plan_id": plan_id, "document_id": row.id, "doc_id": d.doc_id, "ordinal": c.ordinal,
                 "start_utf16": c.start, "end_utf16": c.end, "heading_path": list(c.heading_path),
                 "text": c.text, "tokens": c.tokens} for c in d.chunks])
        n += len(d.chunks)
    return n


def documents(db: Database, plan_id: str, *, with_text: bool = False) -> list[DocumentRecord]:
    """The plan's documents in briefing order, with their chunk counts."""
    counts = (select(Chunk.document_id, func.count().label("n")).where(Chunk.plan_id == plan_id)
              .group_by(Chunk.document_id).subquery())
    with db.transaction() as s:
        rows = s.execute(select(Document, func.coalesce(counts.c.n, 0))
                         .outerjoin(counts, counts.c.document_id == Document.id)
                         .where(Document.plan_id == plan_id).order_by(Document.position)).all()
        return [DocumentRecord(d.doc_id, d.position, d.title, d.format, d.text if with_text else None,
                               d.length, d.sha256, int(n)) for d, n in rows]


def document(db: Database, plan_id: str, doc_id: str) -> DocumentRecord:
    """One document with its text (what a page shows when a citation is clicked)."""
    with db.transaction() as s:
        d = s.scalar(select(Document).where(Document.plan_id == plan_id, Document.doc_id == doc_id))
        if d is None:
            raise NotFound(f"no document {doc_id!r} in plan {plan_id!r}")
        n = s.scalar(select(func.count()).select_from(Chunk).where(Chunk.document_id == d.id)) or 0
        return DocumentRecord(d.doc_id, d.position, d.title, d.format, d.text, d.length, d.sha256, int(n))


def chunks(db: Database, plan_id: str, doc_id: str | None = None) -> list[ChunkRecord]:
    """Every chunk of the plan (or of one document), in document then chunk order."""
    q = _chunk_query().where(Chunk.plan_id == plan_id)
    if doc_id is not None:
        q = q.where(Chunk.doc_id == doc_id)
    with db.transaction() as s:
        return [_record(r) for r in s.execute(q.order_by(Document.position, Chunk.ordinal))]


def citable(db: Database, plan_id: str, refs: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ChunkRecord]:
    """The stored chunks among ``refs`` (``(doc_id, ordinal)`` pairs); refs to passages
    that do not exist are simply absent from the answer."""
    wanted = set(refs)
    if not wanted:
        return {}
    q = _chunk_query().where(Chunk.plan_id == plan_id, Chunk.doc_id.in_({d for d, _ in wanted}),
                             Chunk.ordinal.in_({o for _, o in wanted}))
    with db.transaction() as s:
        found = [_record(r) for r in s.execute(q)]
    return {(c.doc_id, c.ordinal): c for c in found if (c.doc_id, c.ordinal) in wanted}


def openings(db: Database, plan_id: str, limit: int) -> list[ChunkRecord]:
    """The first chunk of each document, in briefing order (what to show when a search
    finds nothing)."""
    q = _chunk_query().where(Chunk.plan_id == plan_id, Chunk.ordinal == 1).order_by(Document.position)
    with db.transaction() as s:
        return [_record(r) for r in s.execute(q.limit(limit))]


def search(db: Database, plan_id: str, query: str, limit: int = 20) -> list[ChunkRecord]:
    """The plan's chunks that share words with ``query``, most relevant first (``score``
    set, higher is better). An empty answer when no word of the query occurs."""
    terms = query_terms(query)
    if not terms or limit < 1:
        return []
    with db.transaction() as s:
        if db.dialect == "postgresql":
            ranked = s.execute(_PG_SEARCH, {"plan_id": plan_id, "q": " or ".join(terms), "limit": limit}).all()
        else:
            match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
            ranked = s.execute(_SQLITE_SEARCH, {"plan_id": plan_id, "q": match, "limit": limit}).all()
        if not ranked:
            return []
        score = {chunk_id: float(sc) for chunk_id, sc in ranked}
        rows = s.execute(_chunk_query().where(Chunk.id.in_(score)).add_columns(Chunk.id))
        found = {r.id: _record(r, score[r.id]) for r in rows}
    return [found[chunk_id] for chunk_id, _ in ranked if chunk_id in found]


@dataclass(frozen=True)
class Candidates:
    """What :func:`candidates` found: each search tier's ranking (best first, ``score``
    set), the cited passages that exist (in the order asked), and the opening passage of
    each document — only when no tier found anything."""

    tiers: list[list[ChunkRecord]]
    cited: list[ChunkRecord]
    openings: list[ChunkRecord]


def candidates(db: Database, plan_id: str, tiers: Sequence[str], cited: Sequence[tuple[str, int]] = (),
               limit: int = 20) -> Candidates:
    """The passages one call may see, in one statement: up to ``limit`` chunks per search
    tier (each tier's words OR-ed, as :func:`search` ranks them), the stored chunks among
    ``cited``, and — when no tier matched — the first chunk of each document (at most
    ``limit``, in briefing order)."""
    queries = [terms for terms in (query_terms(t) for t in tiers) if terms]
    refs = list(dict.fromkeys(f"{d}:{o}" for d, o in cited))
    statement: TextualSelect
    if db.dialect == "postgresql":
        statement = _PG_CANDIDATES
        params: dict[str, Any] = {"queries": [" or ".join(t) for t in queries], "cited": refs}
    else:
        statement = _sqlite_candidates(len(queries))
        params = {f"q{i}": " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
                  for i, terms in enumerate(queries, 1)}
        params["cited"] = json.dumps(refs)
    with db.statement() as conn:
        rows = conn.execute(statement, {"plan_id": plan_id, "limit": max(1, limit), **params}).all()
    found = Candidates([[] for _ in queries], [], [])
    for r in rows:
        chunk = _record(r, float(r.score or 0.0))
        if r.tier > 0:
            found.tiers[r.tier - 1].append(chunk)
        elif r.tier == 0:
            found.cited.append(chunk)
        else:
            found.openings.append(chunk)
    order = {ref: i for i, ref in enumerate(refs)}
    found.cited.sort(key=lambda c: order[c.ref])
    return found


def query_terms(query: str) -> list[str]:
    """The distinct words of ``query``, lower-cased, at most :data:`MAX_QUERY_TERMS`."""
    words = (w for w in _WORD.findall(query.lower()) if w not in _OPERATORS and w.strip("_"))
    return list(dict.fromkeys(words))[:MAX_QUERY_TERMS]


_PG_SEARCH = text("""
    SELECT c.id, ts_rank(c.search, q, 1) AS score
    FROM chunks c, websearch_to_tsquery('english', :q) q
    WHERE c.plan_id = :plan_id AND c.search @@ q
    ORDER BY score DESC, c.document_id, c.ordinal
    LIMIT :limit""")

_SQLITE_SEARCH = text("""
    SELECT c.id, -bm25(chunks_fts, 2.0, 1.0) AS score
    FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid
    WHERE chunks_fts MATCH :q AND c.plan_id = :plan_id
    ORDER BY score DESC, c.document_id, c.ordinal
    LIMIT :limit""")


# tier > 0: a search tier; 0: a cited passage; -1: an opening (only when no tier matched)
_CANDIDATE_COLUMNS = """p.tier, p.score, c.doc_id, c.ordinal, d.title, c.heading_path, c.start_utf16, c.end_utf16,
           c.text, c.tokens"""

_PG_CANDIDATES = text(f"""
    WITH q AS (
        SELECT t.tier, websearch_to_tsquery('english', t.words) AS query
        FROM unnest(CAST(:queries AS text[])) WITH ORDINALITY AS t(words, tier)
    ), found AS (
        SELECT q.tier, r.id, r.score
        FROM q CROSS JOIN LATERAL (
            SELECT c.id, ts_rank(c.search, q.query, 1) AS score
            FROM chunks c WHERE c.plan_id = :plan_id AND c.search @@ q.query
            ORDER BY score DESC, c.document_id, c.ordinal LIMIT :limit) r
    ), picked AS (
        SELECT tier, id, score FROM found
        UNION ALL
        SELECT 0, c.id, 0.0 FROM chunks c
        WHERE c.plan_id = :plan_id AND c.doc_id || ':' || c.ordinal = ANY(CAST(:cited AS text[]))
        UNION ALL
        SELECT -1, o.id, 0.0 FROM (
            SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
            WHERE c.plan_id = :plan_id AND c.ordinal = 1 AND NOT EXISTS (SELECT 1 FROM found)
            ORDER BY d.position LIMIT :limit) o
    )
    SELECT {_CANDIDATE_COLUMNS}
    FROM picked p JOIN chunks c ON c.id = p.id JOIN documents d ON d.id = c.document_id
    ORDER BY p.tier, p.score DESC, c.document_id, c.ordinal""").columns(heading_path=JSON)


@cache
def _sqlite_candidates(tiers: int) -> TextualSelect:
    """The SQLite statement for ``tiers`` search tiers (FTS5 has no arrays: one MATCH each)."""
    searches = [f"""SELECT * FROM (
            SELECT {i} AS tier, c.id, -bm25(chunks_fts, 2.0, 1.0) AS score
            FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid
            WHERE chunks_fts MATCH :q{i} AND c.plan_id = :plan_id
            ORDER BY score DESC, c.document_id, c.ordinal LIMIT :limit)""" for i in range(1, tiers + 1)]
    found = " UNION ALL ".join(searches) or "SELECT 1 AS tier, NULL AS id, 0.0 AS score WHERE 0"
    return text(f"""
    WITH found AS ({found}
    ), picked AS (
        SELECT tier, id, score FROM found
        UNION ALL
        SELECT 0, c.id, 0.0 FROM chunks c
        WHERE c.plan_id = :plan_id AND c.doc_id || ':' || c.ordinal IN (SELECT value FROM json_each(:cited))
        UNION ALL
        SELECT * FROM (
            SELECT -1, c.id, 0.0 FROM chunks c JOIN documents d ON d.id = c.document_id
            WHERE c.plan_id = :plan_id AND c.ordinal = 1 AND NOT EXISTS (SELECT 1 FROM found)
            ORDER BY d.position LIMIT :limit)
    )
    SELECT {_CANDIDATE_COLUMNS}
    FROM picked p JOIN chunks c ON c.id = p.id JOIN documents d ON d.id = c.document_id
    ORDER BY p.tier, p.score DESC, c.document_id, c.ordinal""").columns(heading_path=JSON)


def _chunk_query() -> Any:
    return (select(Chunk.doc_id, Chunk.ordinal, Document.title, Chunk.heading_path, Chunk.start_utf16,
                   Chunk.end_utf16, Chunk.text, Chunk.tokens)
            .join(Document, Document.id == Chunk.document_id))


def _record(r: Any, score: float = 0.0) -> ChunkRecord:
    return ChunkRecord(r.doc_id, r.ordinal, r.title, list(r.heading_path), r.start_utf16, r.end_utf16, r.text,
                       r.tokens, score)
