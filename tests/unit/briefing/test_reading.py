"""Local briefing paths are read on the user's side, inside the folder the user named
(failure report R-09): symbolic links that lead outside are skipped and reported, never
followed; hidden, non-text and oversized files are skipped and reported; a path that
leaves the plan's folder is refused naming the field."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.briefing.ingest import Limits
from orchestrator.client.local_briefing import LocalPlan, load_local_plan, read_briefing
from orchestrator.core.errors import InvalidPlan
from orchestrator.core.settings import Settings
from orchestrator.plan.schema import dump_plan, load_plan
from tests.unit.stored import EXAMPLES

SECRET = "TOP-SECRET outside the pack"
LIMITS = Limits(max_documents=10, max_document_bytes=2_000, max_bytes=5_000, max_chunks=100)


def plan_with(*entries: dict[str, Any]) -> Any:
    plan = load_plan(EXAMPLES / "board.yaml").model_dump(mode="json")
    return load_plan({**plan, "briefing": list(entries)})


def read(base: Path, *entries: dict[str, Any], limits: Limits = LIMITS) -> LocalPlan:
    return read_briefing(plan_with(*entries), base, limits)


def refused(base: Path, *entries: dict[str, Any], limits: Limits = LIMITS) -> dict[str, str]:
    with pytest.raises(InvalidPlan) as exc:
        read(base, *entries, limits=limits)
    detail: dict[str, str] = exc.value.details[0]
    return detail


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """``tmp_path/outside/secret.md`` and a plan folder ``tmp_path/plans`` with a pack."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text(f"# Secret\n\n{SECRET}\n")
    base = tmp_path / "plans"
    pack = base / "pack"
    (pack / "sub").mkdir(parents=True)
    (pack / "pricing.md").write_text("# Pricing\n\nList price rises 8%.\n")
    (pack / "sub" / "hiring.txt").write_text("Two engineers in Q2.\n")
    return base


def texts(local: LocalPlan) -> str:
    return "\n".join(d.text or "" for d in local.plan.briefing)


def test_a_folder_becomes_inline_documents_named_after_their_files(tree: Path) -> None:
    local = read(tree, {"path": "pack"}, {"title": "Memo", "text": "Decide by Friday."})
    docs = local.plan.briefing
    assert [(d.id, d.title, d.format) for d in docs] == [
        ("pricing", "pack/pricing.md", "markdown"), ("sub-hiring", "pack/sub/hiring.txt", "text"),
        ("memo", "Memo", "markdown")]
    assert all(d.path is None for d in docs) and local.skipped == []
    assert docs[0].text == "# Pricing\n\nList price rises 8%.\n"  # exactly the file, not stripped
    assert [set(d) for d in dump_plan(local.plan)["briefing"]] == [{"id", "title", "text", "format"}] * 3


def test_a_symlink_inside_the_folder_pointing_outside_is_skipped_and_reported(tree: Path) -> None:
    os.symlink(tree.parent / "outside" / "secret.md", tree / "pack" / "leak.md")
    os.symlink(tree.parent / "outside", tree / "pack" / "linked-dir")
    local = read(tree, {"path": "pack"})
    assert SECRET not in texts(local)
    reasons = {s.path: s.reason for s in local.skipped}
    assert "outside pack/" in reasons["pack/leak.md"] and "not followed" in reasons["pack/leak.md"]
    assert reasons["pack/linked-dir"] == "symbolic link to a folder: not followed"
    assert [d.id for d in local.plan.briefing] == ["pricing", "sub-hiring"]


def test_a_symlink_staying_inside_the_folder_is_read(tree: Path) -> None:
    os.symlink(tree / "pack" / "pricing.md", tree / "pack" / "alias.md")
    local = read(tree, {"path": "pack"})
    assert [d.id for d in local.plan.briefing] == ["alias", "pricing", "sub-hiring"]


def test_a_symlink_loop_and_a_broken_link_are_skipped_and_reported(tree: Path) -> None:
    os.symlink(tree / "pack" / "b.md", tree / "pack" / "a.md")
    os.symlink(tree / "pack" / "a.md", tree / "pack" / "b.md")
    os.symlink(tree / "pack" / "missing.md", tree / "pack" / "dangling.md")
    local = read(tree, {"path": "pack"})
    reasons = {s.path: s.reason for s in local.skipped}
    assert reasons["pack/a.md"] == reasons["pack/b.md"] == "symbolic link loop: not followed"
    assert reasons["pack/dangling.md"] == "broken symbolic link"
    assert [d.id for d in local.plan.briefing] == ["pricing", "sub-hiring"]


def test_dot_dot_paths_may_not_leave_the_plans_folder(tree: Path) -> None:
    assert refused(tree, {"path": "../outside"}) == {
        "field": "briefing[0].path",
        "message": "../outside leads outside the plan's folder; a briefing reads only files inside it"}
    assert refused(tree, {"path": "pack/../../outside/secret.md"})["field"] == "briefing[0].path"
    assert refused(tree, {"path": str(tree.parent / "outside")})["field"] == "briefing[0].path"  # absolute
    inside = read(tree, {"path": "pack/sub/../pricing.md"})  # '..' that stays inside is fine
    assert [d.id for d in inside.plan.briefing] == ["pricing"]


def test_a_named_folder_or_file_that_is_a_link_outside_is_refused(tree: Path) -> None:
    os.symlink(tree.parent / "outside", tree / "elsewhere")
    os.symlink(tree.parent / "outside" / "secret.md", tree / "secret.md")
    assert refused(tree, {"path": "elsewhere"})["field"] == "briefing[0].path"
    assert refused(tree, {"path": "secret.md"})["field"] == "briefing[0].path"
    os.symlink(tree / "pack" / "pricing.md", tree / "pack" / "sub" / "up.md")  # leaves its own folder
    assert "leading outside its folder" in refused(tree, {"path": "pack/sub/up.md"})["message"]


def test_hidden_non_text_binary_and_oversized_files_are_skipped_and_reported(tree: Path) -> None:
    pack = tree / "pack"
    (pack / ".env.md").write_text("API_KEY=xyz")
    (pack / ".git").mkdir()
    (pack / ".git" / "notes.md").write_text("hidden folder")
    (pack / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (pack / "data.md").write_bytes(b"# Data\n\x00\x01\x02")
    (pack / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (pack / "big.md").write_text("# Big\n\n" + "x" * 3_000)
    (pack / "empty.md").write_text("  \n")
    local = read(tree, {"path": "pack"})
    reasons = {s.path: s.reason for s in local.skipped}
    assert reasons == {
        "pack/.env.md": "hidden file: not read",
        "pack/.git": "hidden folder: not read",
        "pack/chart.png": "not a .md, .markdown or .txt file",
        "pack/data.md": "not text (binary content)",
        "pack/latin1.txt": "not UTF-8 text",
        "pack/big.md": "3007 bytes, over the limit of 2000 (CONCLAVE_BRIEFING_MAX_DOCUMENT_BYTES)",
        "pack/empty.md": "empty",
    }
    assert [d.id for d in local.plan.briefing] == ["pricing", "sub-hiring"]
    assert "xyz" not in texts(local)


def test_a_single_file_that_cannot_be_used_is_refused_not_skipped(tree: Path) -> None:
    (tree / "chart.png").write_bytes(b"\x89PNG")
    assert refused(tree, {"path": "chart.png"}) == {
        "field": "briefing[0].path", "message": "chart.png: not a .md, .markdown or .txt file"}
    assert refused(tree, {"path": "missing.md"})["message"] == "no such file or folder: missing.md"
    single = read(tree, {"path": "pack/pricing.md", "id": "memo", "title": "The memo"})
    assert [(d.id, d.title) for d in single.plan.briefing] == [("memo", "The memo")]


def test_folder_limits_and_ids_name_the_field(tree: Path) -> None:
    few = Limits(max_documents=1, max_document_bytes=2_000, max_bytes=5_000, max_chunks=100)
    assert "more than 1 documents" in refused(tree, {"path": "pack"}, limits=few)["message"]
    tight = Limits(max_documents=10, max_document_bytes=2_000, max_bytes=40, max_chunks=100)
    assert refused(tree, {"path": "pack"}, limits=tight)["field"] == "briefing[0].path"
    assert refused(tree, {"title": "A", "text": "a"}, {"path": "pack", "id": "x"})["field"] == "briefing[1].id"
    (tree / "none").mkdir()
    assert "no readable" in refused(tree, {"path": "none"})["message"]


def test_derived_ids_do_not_clash_with_given_ones(tree: Path) -> None:
    local = read(tree, {"title": "Pricing", "text": "given first", "id": "pricing"}, {"path": "pack"},
                 {"title": "Sub hiring", "text": "derived later"})
    # inline ids are settled when the plan is validated; files read later take the next free ones
    assert [d.id for d in local.plan.briefing] == ["pricing", "pricing-2", "sub-hiring-2", "sub-hiring"]


def test_relative_paths_resolve_beside_the_plan_file_not_the_working_directory(
        tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan_file = tree / "plan.yaml"
    plan_file.write_text((EXAMPLES / "board.yaml").read_text() + "briefing:\n  - path: pack\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    local = load_local_plan(str(plan_file), Settings())
    assert [d.id for d in local.plan.briefing] == ["pricing", "sub-hiring"]
    with pytest.raises(InvalidPlan) as exc:  # a mapping resolves against the working directory
        load_local_plan(plan_with({"path": "pack"}).model_dump(mode="json"), Settings())
    assert exc.value.details[0]["field"] == "briefing[0].path"
