"""Briefing packs as a user meets them: the CLI reads a pack beside the plan file (and
says what it left out), a cluster receives contents and never a path, and the HTTP API
refuses a plan naming a path — the server never reads one — with the field named. Then
citations: the briefing example run from an empty directory ends with a synthesis whose
citations all resolve (and lists them), and the documents routes and the ``citations`` of
a phase's content and the result follow the contract, in the caller's tenant only."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from orchestrator.briefing.documents import CitationView, DocumentView
from orchestrator.briefing.utf16 import utf16_slice
from orchestrator.client.conclave import Conclave
from orchestrator.core.errors import DocumentNotFound
from orchestrator.core.settings import Settings
from storage import briefings, connect, principals
from tests.conftest import ROOT, settings_env
from tests.e2e.test_api import api, assert_error, board  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_cli import run_cli

SECRET = "TOP-SECRET-7f3a outside the pack"


def project(tmp_path: Path) -> Path:
    """``project/plan.yaml`` with ``briefing: [{path: pack}]``; the pack holds two documents
    and a symbolic link to a file outside the project."""
    (tmp_path / "outside.md").write_text(f"# Secret\n\n{SECRET}\n")
    work = tmp_path / "project"
    pack = work / "pack"
    pack.mkdir(parents=True)
    (pack / "pricing.md").write_text("# Pricing\n\n## Risks\n\nHeavy users may leave. 😀\n\n```\n# code\n```\n")
    (pack / "notes.txt").write_text("The board meets on Friday.\n")
    os.symlink(tmp_path / "outside.md", pack / "leak.md")
    plan = (ROOT / "examples" / "board.yaml").read_text().replace("rounds: 2", "rounds: 1")
    (work / "plan.yaml").write_text(plan + "briefing:\n  - path: pack\n  - title: Memo\n    text: Decide soon.\n")
    return work


def test_run_reads_the_pack_beside_the_plan_and_reports_what_it_left_out(tmp_path: Path) -> None:
    work = project(tmp_path)
    cwd = tmp_path / "empty"
    cwd.mkdir()
    out = run_cli(["run", str(work / "plan.yaml"), "--json"], cwd)
    assert out.returncode == 0, out.stderr
    assert "briefing: 1 file(s) left out" in out.stderr
    assert "pack/leak.md: symbolic link to" in out.stderr and "not followed" in out.stderr
    assert "Traceback" not in out.stderr
    plan_id = json.loads(out.stdout)["plan_id"]
    with sqlite3.connect(cwd / ".conclave" / "conclave.db") as db:
        docs = db.execute("SELECT doc_id, title, text FROM documents WHERE plan_id = ? ORDER BY position",
                          (plan_id,)).fetchall()
        spec = db.execute("SELECT spec FROM plans WHERE id = ?", (plan_id,)).fetchone()[0]
        chunks = db.execute("SELECT doc_id, ordinal, heading_path FROM chunks WHERE plan_id = ? ORDER BY id",
                            (plan_id,)).fetchall()
    assert [(d, t) for d, t, _ in docs] == [("notes", "pack/notes.txt"), ("pricing", "pack/pricing.md"),
                                            ("memo", "Memo")]
    assert SECRET not in spec and all(SECRET not in body for _, _, body in docs)
    assert '"path"' not in spec
    assert ("pricing", 1, '["Pricing", "Risks"]') in chunks


def test_submit_to_a_cluster_sends_contents_never_paths(settings: Any, tmp_path: Path) -> None:
    work = project(tmp_path)
    out = run_cli(["submit", str(work / "plan.yaml"), "--json"], tmp_path, env=settings_env(settings))
    assert out.returncode == 0, out.stderr
    assert "pack/leak.md" in out.stderr
    plan_id = json.loads(out.stdout)["plan_id"]
    db = connect(settings.database_url, pool_size=1)
    try:
        assert [d.doc_id for d in briefings.documents(db, plan_id)] == ["notes", "pricing", "memo"]
        with db.engine.connect() as c:
            spec = c.execute(text("SELECT spec FROM plans WHERE id = :p"), {"p": plan_id}).scalar()
        assert all(set(d) == {"id", "title", "text", "format"} for d in spec["briefing"])
        assert SECRET not in json.dumps(spec)
    finally:
        db.dispose()


def test_the_api_refuses_paths_and_limits_and_stores_inline_documents(api: Any, settings: Any) -> None:  # noqa: F811
    server = api(env={"CONCLAVE_BRIEFING_MAX_DOCUMENT_BYTES": "1000"})
    r = httpx.post(f"{server.url}/v1/plans", json=board(briefing=[{"path": "/etc"}]))
    err = assert_error(r, 422)
    assert err["details"][0]["field"] == "briefing[0].path"
    assert "a server never reads a path" in err["details"][0]["message"]
    r = httpx.post(f"{server.url}/v1/plans", json=board(briefing=[{"title": "Big", "text": "x" * 1001}]))
    assert assert_error(r, 422)["details"][0]["field"] == "briefing[0].text"
    r = httpx.post(f"{server.url}/v1/plans", json=board(briefing=[{"title": "Memo", "path": "memo.md", "text": "x"}]))
    assert assert_error(r, 422)["details"][0]["field"] == "briefing[0].text"
    db = connect(settings.database_url, pool_size=1)
    try:
        with db.engine.connect() as c:
            assert c.execute(text("SELECT count(*) FROM plans")).scalar() == 0
        memo = "# Pricing\n\n## Risks 😀\n\nChurn.\n"
        r = httpx.post(f"{server.url}/v1/plans", json=board(briefing=[{"title": "Pricing memo", "text": memo}]))
        assert r.status_code == 201, r.text
        plan_id = r.json()["plan_id"]
        [chunk] = briefings.chunks(db, plan_id)
        assert (chunk.ref, chunk.heading_path, chunk.start, chunk.end) == (
            "pricing-memo:1", ["Pricing", "Risks 😀"], 0, len(memo.rstrip()) + 1)
    finally:
        db.dispose()


# ---------------------------------------------------------------- citations: the example, the routes

EXAMPLE = ROOT / "examples" / "board-briefing.yaml"
ADMIN_TOKEN = "admin-token-for-the-briefing-0123456789"
GHOST = "00000000-0000-4000-8000-000000000000"  # a plan id no plan has
PARTNERS = ("# パートナーの声 🤝\n\n会計事務所のパートナー 🧾📈 は慎重です。\n\n## Reseller pricing\n\n"
            "Partners resell to 600 small businesses and ask for a fixed wholesale price per client.\n")
MEMO = ("# Pricing memo\n\n## Risks\n\nHeavy users would pay up to three times more; some will leave.\n\n"
        "```\n# not a heading\n```\n")


def assert_resolved(cited: list[CitationView], text: str, docs: dict[str, DocumentView]) -> None:
    """Every citation resolves to a passage of a stored document and sits where it says in ``text``."""
    assert cited, "no citation"
    for c in cited:
        assert not c.unresolved, c
        assert utf16_slice(text, c.start, c.end).lower() == c.ref  # the reference's place in the citing text
        doc = docs[c.doc]
        span = next(s for s in doc.chunks if s.chunk == c.chunk)
        assert (c.title, c.heading_path, c.passage_start, c.passage_end) == (
            doc.title, span.heading_path, span.start, span.end)


def test_the_briefing_example_run_from_an_empty_directory_lists_its_citations_resolved(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")} | {"COLUMNS": "200"}
    out = run_cli(["run", str(EXAMPLE)], tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "left out" not in out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Citations ("))
    assert "all resolved to passages of the briefing" in lines[at], lines[at]
    assert any("Final summary" in line for line in lines[:at])  # the list follows the synthesis
    listed = [line for line in lines[at + 1:] if line.startswith("  [")]

    settings = Settings(database_url=f"sqlite:///{tmp_path / '.conclave' / 'conclave.db'}")
    with Conclave(settings, worker=False) as client:
        [plan] = client.local.reads.list_plans().plans
        assert plan.status == "completed"
        docs = {d.id: client.document(plan.id, d.id) for d in client.documents(plan.id)}
        assert sorted(docs) == ["counsel-notes", "financial-outlook", "partner-feedback", "sales-and-customers",
                                "technology-review"]
        cited = client.citations(plan.id)
        assert_resolved(cited, client.result(plan.id), docs)
        assert [line.split("]")[0].strip() + "]" for line in listed] == [
            f"[{ref}]" for ref in dict.fromkeys(c.ref for c in cited)]
        assert all(f"[{c.ref}] → {c.where}" in out.stdout for c in cited)
        for p in client.get(plan.id).phases:
            if p.kind == "turn":  # every expert drew on the pack, and cited what exists
                assert_resolved(client.citations(plan.id, p.key), client.phase_text(plan.id, p.key) or "", docs)


def _principals(database_url: str) -> dict[str, str]:
    db = connect(database_url)
    try:
        return {tenant: principals.create(db, tenant=tenant, scopes=["plans:read", "plans:write"], name=tenant)[1]
                for tenant in ("acme", "globex")}
    finally:
        db.dispose()


def test_documents_and_citations_over_http_follow_the_contract_in_the_callers_tenant(
        api: Any, workers: Any, settings: Any) -> None:  # noqa: F811
    tokens = _principals(settings.database_url)
    server = api(env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_API_TOKEN": ADMIN_TOKEN})
    acme, globex = ({"Authorization": f"Bearer {tokens[t]}"} for t in ("acme", "globex"))
    plan = board(rounds=1, experts=board()["experts"][:2],
                 briefing=[{"title": "Pricing memo", "text": MEMO}, {"title": "Partner feedback", "text": PARTNERS}])
    r = httpx.post(f"{server.url}/v1/plans", json=plan, headers=acme)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    workers()
    base = f"{server.url}/v1/plans/{plan_id}"

    r = httpx.get(f"{base}/documents", headers=acme)
    assert r.status_code == 200, r.text
    assert r.json() == {"documents": [
        {"id": "pricing-memo", "title": "Pricing memo", "format": "markdown", "length": len(MEMO), "chunks": 1},
        {"id": "partner-feedback", "title": "Partner feedback", "format": "markdown", "length": len(PARTNERS) + 3,
         "chunks": 2}]}  # three emoji outside the BMP: two UTF-16 units each
    doc = httpx.get(f"{base}/documents/partner-feedback", headers=acme).json()
    assert set(doc) == {"id", "title", "format", "text", "chunks"} and doc["text"] == PARTNERS
    assert all(set(c) == {"chunk", "heading_path", "start", "end"} for c in doc["chunks"])
    reseller = doc["chunks"][1]
    assert reseller["heading_path"] == ["パートナーの声 🤝", "Reseller pricing"]
    passage = utf16_slice(PARTNERS, reseller["start"], reseller["end"])  # what a browser's slice() gives
    assert passage.startswith("## Reseller pricing") and passage.rstrip().endswith("per client.")
    assert PARTNERS[reseller["start"]:reseller["end"]] != passage  # code points would be off by three

    with Conclave.connect(server.url, token=tokens["acme"]) as remote:
        assert remote.wait(plan_id, timeout=120).status == "completed"
        docs = {d.id: remote.document(plan_id, d.id) for d in remote.documents(plan_id)}
        assert docs["partner-feedback"].to_dict() == doc
        result = httpx.get(f"{base}/result", headers=acme).json()
        assert all(set(c) == set(CitationView.__dataclass_fields__) for c in result["citations"])
        assert_resolved([CitationView(**c) for c in result["citations"]], result["text"], docs)
        assert remote.citations(plan_id) == [CitationView(**c) for c in result["citations"]]
        content = httpx.get(f"{base}/phases/r1.dana/content", headers=acme).json()
        assert_resolved([CitationView(**c) for c in content["citations"]], content["text"], docs)
        assert remote.citations(plan_id, "r1.dana") == [CitationView(**c) for c in content["citations"]]

        err = assert_error(httpx.get(f"{base}/documents/no-such-doc", headers=acme), 404)
        assert err["code"] == "document.not_found" and err["details"] == [
            {"field": "doc_id", "message": "no such document in this plan"}]
        with pytest.raises(DocumentNotFound):
            remote.document(plan_id, "no-such-doc")
    assert assert_error(httpx.get(f"{base}/documents/Not%20A%20Slug", headers=acme), 422)["details"][0][
        "field"] == "doc_id"

    # another tenant's plan: exactly what a plan that does not exist answers
    for path in ("/documents", "/documents/pricing-memo", "/documents/no-such-doc"):
        r = httpx.get(base + path, headers=globex)
        assert assert_error(r, 404)["code"] == "plan.not_found", (path, r.text)
        ghost = httpx.get(f"{server.url}/v1/plans/{GHOST}{path}", headers=globex)
        assert (ghost.status_code, ghost.text.replace(GHOST, plan_id)) == (404, r.text)
    # a plan without a briefing has no documents and no citations
    r = httpx.post(f"{server.url}/v1/plans", json=board(rounds=1, experts=board()["experts"][:1]), headers=acme)
    plain = r.json()["plan_id"]
    assert httpx.get(f"{server.url}/v1/plans/{plain}/documents", headers=acme).json() == {"documents": []}
