"""The core pipeline end to end on real Postgres, Redis and a worker subprocess."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text

from orchestrator.client.conclave import Conclave
from tests.llm_server import LLMServer

BOARD = {
    "kind": "board", "title": "Pricing board", "question": "Should we move to usage-based pricing?",
    "rounds": 2, "moderator": {"name": "Morgan", "role": "Chair of the board"},
    "experts": [{"name": "Dana", "role": "Chief Financial Officer"},
                {"name": "Ravi", "role": "Chief Technology Officer"},
                {"name": "Sofia", "role": "Head of Sales"}],
}


def rows(url: str, sql: str, **params: Any) -> list[Any]:
    engine = create_engine(url)
    with engine.connect() as c:
        out = list(c.execute(text(sql), params))
    engine.dispose()
    return out


def assert_exactly_once(url: str, plan_id: str) -> None:
    """Every phase completed on its first attempt, one content row and one counted usage row each."""
    phases = rows(url, "select id, key, status, attempt from phases where plan_id = :p", p=plan_id)
    assert phases and all(r.status == "completed" for r in phases), phases
    assert all(r.attempt == 1 for r in phases), phases
    contents = rows(url, "select p.id, count(c.id) n from phases p left join contents c on c.id = p.content_id "
                         "where p.plan_id = :p group by p.id", p=plan_id)
    assert {r.id: r.n for r in contents} == {r.id: 1 for r in phases}
    assert rows(url, "select count(*) n from contents c where not exists "
                     "(select 1 from phases p where p.content_id = c.id)")[0].n == 0  # nothing written unreferenced
    # a usage row is its phase's cost iff its attempt completed the phase (derived, not stored)
    usage = rows(url, "select u.phase_id, count(*) n, bool_and(p.status = 'completed' and p.attempt = u.attempt) c "
                      "from usage u join phases p on p.id = u.phase_id where u.plan_id = :p "
                      "group by u.phase_id", p=plan_id)
    assert {r.phase_id: (r.n, r.c) for r in usage} == {r.id: (1, True) for r in phases}


def test_board_runs_to_completion_exactly_once(settings: Any, workers: Any, client: Any) -> None:
    workers(beat=True)
    plan_id = client.submit(BOARD)
    view = client.wait(plan_id, timeout=90)
    assert view.status == "completed", view.error
    assert [p.key for p in view.phases] == [
        "opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary",
        "r2.dana", "r2.ravi", "r2.sofia", "r2.summary", "final"]
    assert_exactly_once(settings.database_url, plan_id)
    final = client.result(plan_id)
    assert "Recommendation:" in final and "Who holds which view" in final
    assert view.usage.total_tokens > 0 and view.usage.estimated  # the offline model estimates
    events = [e.type for e in client.events(plan_id)]
    assert events[0] == "plan_submitted" and events[-1] == "plan_finished"
    assert events.count("phase_completed") == 10


def test_team_plan_with_a_200kb_result_is_offloaded_and_read_in_full(settings: Any, workers: Any,
                                                                      client: Any) -> None:
    with LLMServer(reply="Synthesis: go ahead [research].") as server:
        plan = {
            "kind": "team", "title": "Big input", "question": "What does the research say?",
            "max_debates": 0,
            "models": {
                "default": {"provider": "offline"},
                "big": {"provider": "offline", "options": {"words": 42000, "chunk_chars": 8000, "latency": 0}},
                "probe": {"provider": "openai", "model": "normal", "base_url": server.url,
                          "context_window": 2_000_000, "max_output_tokens": 256},
            },
            "experts": [{"name": "Ana", "role": "Research analyst", "model": "big"},
                        {"name": "Lee", "role": "Strategy lead", "model": "probe"},
                        {"name": "Kim", "role": "Chief Financial Officer"}],
            "phases": [{"id": "research", "expert": "Ana", "prompt": "Write the full research report."},
                       {"id": "costs", "expert": "Kim", "prompt": "Estimate the costs."}],
            "synthesis": {"expert": "Lee"},
        }
        trusting = settings.model_copy(update={"allowed_base_urls": [server.url]})  # the operator lists it
        workers(settings=trusting)
        with Conclave(trusting, worker=False) as submitter:
            plan_id = submitter.submit(plan)
        view = client.wait(plan_id, timeout=90)
        assert view.status == "completed", view.error
        assert_exactly_once(settings.database_url, plan_id)

        research = client.phase_text(plan_id, "research")
        assert len(research.encode()) >= 200_000
        stored = view.phase("research")
        assert stored.summary is not None and len(stored.summary) < 1000  # the phase keeps a short summary
        sent = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
        assert len(sent) == 1
        prompt = "\n".join(m["content"] for m in sent[0]["messages"])
        assert research in prompt  # the synthesis read the offloaded result whole
        assert client.result(plan_id) == "Synthesis: go ahead [research]."
        synthesis_usage = view.phase("synthesis").usage
        assert not synthesis_usage.estimated and synthesis_usage.total_tokens == 17 + 42  # as reported


def test_a_failed_head_of_a_chain_skips_what_depends_on_it(settings: Any, workers: Any, client: Any) -> None:
    """``research`` and ``report`` are chained (report's only input is research). When research
    fails, the chained step finds its input missing, does nothing and releases its enqueue mark;
    advance then skips report and the synthesis, and the plan ends failed — nothing left pending."""
    plan = {
        "kind": "team", "title": "Failing chain", "question": "What does the research say?", "max_debates": 0,
        "models": {"default": {"provider": "offline", "max_retries": 0, "options": {"latency": 0, "fail": ["Ana"]}}},
        "experts": [{"name": "Ana", "role": "Research analyst"}, {"name": "Lee", "role": "Strategy lead"}],
        "phases": [{"id": "research", "expert": "Ana", "prompt": "Research it."},
                   {"id": "report", "expert": "Lee", "prompt": "Report on it.", "depends_on": ["research"]}],
        "synthesis": {"expert": "Lee", "depends_on": ["report"]},
    }
    workers()
    plan_id = client.submit(plan)
    view = client.wait(plan_id, timeout=60)
    assert view.status == "failed" and view.error_code == "llm.unavailable"
    assert {p.key: (p.status, p.attempt) for p in view.phases} == {
        "research": ("failed", 1), "report": ("skipped", 0), "synthesis": ("skipped", 0)}
    enqueued = rows(settings.database_url, "select key from phases where plan_id = :p and enqueued_at is not null",
                    p=plan_id)
    assert enqueued == []
    assert rows(settings.database_url, "select count(*) n from contents")[0].n == 0
