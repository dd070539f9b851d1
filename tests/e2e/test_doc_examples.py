"""The documented commands and requests, run verbatim, so the docs cannot drift from the code.

The README's cluster section and its program, every shell and Python block of ``docs/*.md``, and
those of the examples' READMEs (``examples/**/README.md``, embedded, as they say), are extracted
from the Markdown (:mod:`tests.doc_blocks`) and run in order, one bash session per document,
as a reader types them (:mod:`tests.doc_session`): the README's against an empty Postgres
database and a Redis database of the test's own (the section creates, migrates and starts
the rest itself), the docs' in the shell that section leaves — its variables set — against a
real cluster the test starts (a ``conclave api`` and a Celery worker subprocess on the
example registry, ``examples/models.yaml``). Only the test cluster's database, Redis database
and port are substituted for the defaults the documents show. A block that is not meant to
run says so in the Markdown (``<!-- not-run: why -->``), and that is the only way one is
left out; the test prints what it left out and why.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import PG_ADMIN, ROOT, WorkerProcess
from tests.doc_blocks import Block, blocks, section
from tests.doc_session import Session, run
from tests.e2e.test_api import ApiServer

REGISTRY = ROOT / "examples" / "models.yaml"
BIN = Path(sys.executable).parent  # the venv `make install` built: conclave, python
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if any(b.runnable for b in blocks(p)))
# the examples' READMEs (a briefing pack's documents are material for the experts, not docs)
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("README.md") if any(b.runnable for b in blocks(p)))
DB_DEFAULT, REDIS_DEFAULT, API_DEFAULT = "conclave", "redis://127.0.0.1:6379/0", "http://127.0.0.1:8000"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def chosen(found: list[Block], capsys: pytest.CaptureFixture[str], name: str) -> list[Block]:
    """The runnable blocks; the ones a marker leaves out are reported, with the marker's reason."""
    left_out = [b for b in found if b.runnable and b.not_run]
    with capsys.disabled():
        for b in left_out:
            print(f"\n{name}: not run, by its marker: {b.where}: {b.not_run}", end="")
    return [b for b in found if b.runnable and not b.not_run]


def shell_env(**extra: str) -> dict[str, str]:
    """A user's shell: no CONCLAVE_* settings but those given, the venv's tools first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "PYTHONUNBUFFERED": "1", **extra})
    return env


def a_clone(tmp_path: Path) -> Path:
    """A working directory that holds what a clone holds for these blocks (the venv and the
    examples), so what they write (``worker.log``, ``api.log``) stays out of the repository."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in (".venv", "examples"):
        (clone / name).symlink_to(ROOT / name)
    return clone


def rows(url: str, sql: str, **params: Any) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return list(c.execute(text(sql), params))
    finally:
        engine.dispose()


def phases_of(url: str, title_like: str) -> dict[str, tuple[str, str]]:
    """Key -> (kind, status) of the one plan whose title matches."""
    [plan] = rows(url, "select id from plans where title like :t", t=title_like)
    return {r.key: (r.kind, r.status) for r in rows(url, "select key, kind, status from phases where plan_id = :p",
                                                     p=plan.id)}


@pytest.fixture()
def empty_database() -> Iterator[str]:
    """A name no database has yet: the README's section creates it (``createdb``)."""
    name = f"conclave_docs_{uuid.uuid4().hex[:8]}"
    yield name
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


def test_the_readme_cluster_section_runs_verbatim(empty_database: str, redis_url: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    readme = ROOT / "README.md"
    found = section(readme, "Running a cluster")
    todo = chosen(found, capsys, "README.md")
    clone = a_clone(tmp_path)
    session = run(todo, cwd=clone, env=shell_env(), out=tmp_path / "readme", substitutions={
        f"127.0.0.1:5432/{DB_DEFAULT}": f"127.0.0.1:5432/{empty_database}",
        f"-U postgres {DB_DEFAULT}": f"-U postgres {empty_database}",
        REDIS_DEFAULT: redis_url,
    })
    assert session.returncode == 0, session.failure()

    url = f"postgresql://postgres@127.0.0.1:5432/{empty_database}"
    board = phases_of(url, "Usage-based pricing for Ledgerly")
    assert len(board) == 12 and {s for _, s in board.values()} == {"completed"}
    team = phases_of(url, "%team study")  # examples/team.yaml, on the registry's stances: with its debate
    assert set(team) == {"growth", "finance", "check-1", "debate-check-1.priya", "debate-check-1.marcus",
                         "rollout", "synthesis"}
    assert {s for _, s in team.values()} == {"completed"}
    assert team["debate-check-1.priya"][0] == team["debate-check-1.marcus"][0] == "debate"
    [principal] = rows(url, "select name, revoked_at from principals")
    assert principal.name == "acme ci" and principal.revoked_at is not None  # created, listed, revoked

    # one terminal: the worker started with `&` logged into its file, never over the live display
    cluster = next(b for b in todo if "conclave worker" in b.text)
    shown = session.output(cluster)
    assert "Final summary" in shown and "synthesis" in shown
    assert not _log_lines(shown), _log_lines(shown)[:5]
    log = (clone / "worker.log").read_text()
    assert " ready." in log and "conclave.run_phase" in log


def _log_lines(shown: str) -> list[str]:
    """The lines of a terminal's output that are a worker's log lines (JSON or Celery's text) —
    the warning Celery prints before its logging exists when a worker starts as root (the
    only user where the tests run) included: with --logfile it goes to the file too."""
    return [line for line in shown.splitlines()
            if line.startswith('{"timestamp"') or re.search(r"\] (Task|celery@|Connected to)|SecurityWarning", line)]


@pytest.fixture()
def cluster(clean_db: str, redis_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    """The README's cluster, as the test runs it: a worker and an API (tokens required, webhooks
    on) on the example registry."""
    from orchestrator.core.settings import Settings

    settings = Settings(database_url=clean_db, broker_url=redis_url, models=REGISTRY)
    worker = WorkerProcess(settings, tmp_path).start()
    # the operator enabled webhooks to the receiver docs/api.md registers ("Webhooks")
    api = ApiServer(settings, tmp_path, env={"CONCLAVE_AUTH": "tokens", "CONCLAVE_WEBHOOK_URLS": "https://hooks.example.com",
                                             "CONCLAVE_WEBHOOK_SECRET_KEY": "docs-" + "0" * 59})
    try:
        yield api
    finally:
        api.stop()
        worker.stop()
    assert "Traceback" not in api.log(), api.log()[-3000:]


@pytest.mark.parametrize("doc", DOCS, ids=[p.name for p in DOCS])
def test_the_docs_examples_run_verbatim(doc: Path, cluster: ApiServer, clean_db: str, redis_url: str,
                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    todo = chosen(blocks(doc), capsys, doc.name)
    if not todo:
        return
    readers_shell = shell_env(CONCLAVE_DATABASE_URL=clean_db.replace("+psycopg", ""), CONCLAVE_BROKER_URL=redis_url,
                              CONCLAVE_MODELS=str(REGISTRY))  # what the README's cluster section exports
    text_ = "".join(b.text for b in todo)
    substitutions = {API_DEFAULT: cluster.url} if API_DEFAULT in text_ else {}
    session = run(todo, cwd=a_clone(tmp_path), env=readers_shell, out=tmp_path / doc.stem,
                  substitutions=substitutions)
    assert session.returncode == 0, session.failure()
    CHECKS.get(doc.name, lambda *_: None)(session, clean_db)


def _check_api(session: Session, url: str) -> None:
    """What the page's requests did, in stored state, and what its Python client printed."""
    plans = rows(url, "select id, tenant, title, labels, status from plans order by created_at")
    assert plans and {p.tenant for p in plans} == {"acme"}  # every request was acme's token
    first = plans[0]
    assert first.status == "completed" and first.labels == ["q3", "pricing"]  # the PATCH
    audited = rows(url, "select type, data from events where plan_id = :p and type in "
                        "('resume_requested', 'cancel_requested') order by id", p=first.id)
    assert [(e.type, e.data.get("retry_failed"), e.data["actor"]["name"]) for e in audited] == [
        ("resume_requested", False, "docs"), ("resume_requested", True, "docs")]  # cancel of an ended plan: no event
    briefed = [p for p in plans if "briefing" in p.title]
    assert briefed and rows(url, "select count(*) n from documents where plan_id = :p", p=briefed[0].id)[0].n == 5

    python = next(r for r in session.ran if r.block.lang == "python")
    printed = python.output
    plan_id = re.match(r"plan ([0-9a-f-]{36})\n", printed)
    assert plan_id, printed[:500]
    stored = {r.key: (r.expert, r.text) for r in rows(
        url, "select p.key, p.expert, c.text from phases p join contents c on c.id = p.content_id "
             "where p.plan_id = :p", p=plan_id.group(1))}
    assert len(stored) == 12
    for key, (expert, spoken) in stored.items():  # each expert's words, whole, under their name
        assert f"\n── {key} · {expert} ──\n{spoken}\n" in printed, key
    assert printed.rstrip().endswith("tokens") and "\ncompleted: " in printed
    # "Webhooks": a token of the webhooks scope registered, listed, rotated and deleted an endpoint
    assert rows(url, "select scopes from principals where name = 'acme hooks'")[0].scopes == ["webhooks"]
    assert rows(url, "select count(*) n from webhook_endpoints")[0].n == 0


def _check_briefing(session: Session, url: str) -> None:
    printed = next(r for r in session.ran if r.block.lang == "python").output
    submitted = [p for p in rows(url, "select id, status from plans") if p.id in printed]
    assert submitted, printed  # the Python block printed the id of the plan it submitted
    assert rows(url, "select count(*) n from documents where plan_id = :p", p=submitted[0].id)[0].n == 5


CHECKS = {"api.md": _check_api, "briefing.md": _check_briefing}


def test_every_marker_names_a_reason_and_a_runnable_block() -> None:
    """A marker with no reason, or on a block that would not run anyway, is a mistake."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *EXAMPLES]:
        for b in blocks(path):
            if b.not_run is not None:
                assert b.not_run and b.runnable, f"{b.where}: not-run marker on a {b.lang or 'plain'} block"
    assert "api.md" in [p.name for p in DOCS]  # the docs with runnable blocks were found
    assert ROOT / "examples" / "eval" / "README.md" in EXAMPLES


@pytest.mark.timeout(900)
@pytest.mark.parametrize("doc", EXAMPLES, ids=[str(p.relative_to(ROOT / "examples")) for p in EXAMPLES])
def test_the_examples_readmes_run_verbatim_embedded(doc: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An example's README, as a reader on a fresh machine runs it from the clone: no CONCLAVE_*
    settings (embedded: its database is the clone's new ``.conclave/conclave.db``), a home of its
    own, every block in order."""
    todo = chosen(blocks(doc), capsys, str(doc.relative_to(ROOT)))
    home = tmp_path / "home"
    home.mkdir()
    clone = a_clone(tmp_path)
    session = run(todo, cwd=clone, env=shell_env(HOME=str(home)), out=tmp_path / "out", substitutions={},
                  timeout=800)
    assert session.returncode == 0, session.failure()
    if doc.parent.name == "eval":  # the simulated eval: its plans stored, its report printed twice
        stored = rows(f"sqlite:///{clone}/.conclave/conclave.db",
                      "select status, count(*) n from plans group by status")
        assert {(r.status, r.n) for r in stored} == {("completed", 900)}  # 300 items x 3 arms
        [eval_block] = [r for r in session.ran if "conclave eval run" in r.block.text]
        shown = eval_block.output
        assert shown.count("eval arithmetic (* baseline") == 2 and "panel" in shown, shown[-2000:]


def test_the_readme_program_runs_as_written_embedded(tmp_path: Path) -> None:
    """The README's "Using it from a program" block, run verbatim with the venv's python in a
    shell with no CONCLAVE_* settings: embedded, it runs the team example to its end and
    prints its status and the synthesis."""
    [program] = [b for b in section(ROOT / "README.md", "Using it from a program") if b.lang == "python"]
    session = run([program], cwd=a_clone(tmp_path), env=shell_env(), out=tmp_path / "out", substitutions={})
    assert session.returncode == 0, session.failure()
    printed = session.output(program)
    assert printed.startswith("completed ") and "Synthesis" in printed, printed[:500]
    assert "Traceback" not in printed
