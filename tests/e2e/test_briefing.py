"""Briefing packs as a user meets them: the CLI reads a pack beside the plan file (and
says what it left out), a cluster receives contents and never a path, and the HTTP API
refuses a plan naming a path — the server never reads one — with the field named."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from storage import briefings, connect
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
