"""What-if forks on real Postgres with real worker processes: a board forked from round 2 with
another model for one expert reuses the opening and round 1 — no new content row for them
(counted in the database), no claim, no ``phase_started``, no usage row — runs round 2 onwards
on the workers (whose claims read the copied inputs' texts through the shared contents), and its
usage is exactly its new phases' usage rows. A change upstream of ``from`` reruns what it reaches.
Deleting the source by retention keeps every content the fork still points at, readable; the
source's own go with it, and the fork's with the fork."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine, text

from storage import retention
from storage.models import utcnow

BOARD: dict[str, Any] = {
    "kind": "board", "title": "Pricing board", "question": "Should we move to usage-based pricing?",
    "rounds": 2, "moderator": {"name": "Morgan", "role": "Chair of the board"},
    "experts": [{"name": "Dana", "role": "Chief Financial Officer"},
                {"name": "Ravi", "role": "Chief Technology Officer"},
                {"name": "Sofia", "role": "Head of Sales"}],
}
# Ravi on another model from round 2: the offline model with a stance of its own for him
CONTRARIAN = {"models": {"contrarian": {"provider": "offline", "options": {"stances": {"Ravi": "oppose"}}}},
              "experts": [{}, {"model": "contrarian"}]}
BEFORE = ["opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary"]
FROM_R2 = ["r2.dana", "r2.ravi", "r2.sofia", "r2.summary", "final"]


def rows(url: str, sql: str, **params: Any) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return list(c.execute(text(sql), params))
    finally:
        engine.dispose()


def one(url: str, sql: str, **params: Any) -> Any:
    return rows(url, sql, **params)[0][0]


def test_a_fork_from_round_2_reuses_round_1_runs_the_rest_and_survives_its_source(settings: Any, workers: Any,
                                                                                  client: Any) -> None:
    url = settings.database_url
    workers()
    source = client.submit(BOARD)
    assert client.wait(source, timeout=90).status == "completed"
    contents_before = one(url, "select count(*) from contents")
    assert contents_before == 10  # one per phase of the source

    res = client.fork(source, "r2", CONTRARIAN)
    assert (res.reused, res.rerun, res.enqueued) == (BEFORE, [], FROM_R2)
    view = client.wait(res.plan_id, timeout=90)
    assert view.status == "completed", view.error
    fork = res.plan_id

    # the copies point at the source's content rows: only round 2 onwards wrote new ones
    assert one(url, "select count(*) from contents") == contents_before + len(FROM_R2)
    shared = rows(url, "select f.key, f.content_id = s.content_id same, f.attempt, f.reused_from "
                       "from phases f join phases s on s.plan_id = :s and s.key = f.key "
                       "where f.plan_id = :f and f.key = any(:keys) order by f.position",
                  s=source, f=fork, keys=BEFORE)
    assert [(r.key, r.same, r.attempt, r.reused_from) for r in shared] == [(k, True, 0, source) for k in BEFORE]
    # nothing before r2 was claimed or run in the fork, nor paid for
    started = [r.phase_key for r in rows(url, "select phase_key from events where plan_id = :f and "
                                              "type = 'phase_started' order by id", f=fork)]
    assert sorted(started) == sorted(FROM_R2)
    paid = rows(url, "select p.key, u.attempt = p.attempt counted, u.input_tokens + u.output_tokens tokens "
                     "from usage u join phases p on p.id = u.phase_id where u.plan_id = :f", f=fork)
    assert sorted(r.key for r in paid) == sorted(FROM_R2) and all(r.counted for r in paid)
    assert view.usage.total_tokens == sum(r.tokens for r in paid) > 0  # only the new phases'
    assert all(p.usage.calls == 0 and p.reused_from == source for p in view.phases if p.key in BEFORE)
    assert client.phase_text(fork, "r2.ravi") != client.phase_text(source, "r2.ravi")  # the other model spoke
    assert client.phase_text(fork, "r1.ravi") == client.phase_text(source, "r1.ravi")

    # a change upstream of r2: Dana's round-1 turn was sent her system prompt, so it and its summary rerun
    upstream = client.fork(source, "r2", {"experts": [{"system": "You are Dana. Answer in one short paragraph."}]})
    assert upstream.reused == ["opening", "r1.ravi", "r1.sofia"] and upstream.rerun == ["r1.dana", "r1.summary"]
    assert client.wait(upstream.plan_id, timeout=90).status == "completed"
    again = [r.phase_key for r in rows(url, "select phase_key from events where plan_id = :f and "
                                            "type = 'phase_started'", f=upstream.plan_id)]
    assert sorted(again) == sorted(["r1.dana", "r1.summary", *FROM_R2])

    # retention deletes the source: what the forks still point at stays, readable; the rest goes
    final_text = client.result(fork)
    engine = create_engine(url)
    with engine.begin() as c:
        c.execute(text("update plans set finished_at = :t where id = :s"),
                  {"t": (utcnow() - timedelta(days=30)).replace(tzinfo=None), "s": source})
    engine.dispose()
    now = utcnow()
    done = retention.prune(client.local.db, older_than=now - timedelta(days=60), max_events_per_plan=1000,
                           delete_before=now - timedelta(days=7))
    assert done.plans == 1 and one(url, "select count(*) from plans where id = :s", s=source) == 0
    referenced = one(url, "select count(distinct content_id) from phases where content_id is not null")
    assert one(url, "select count(*) from contents") == referenced  # nothing left that no phase points at
    # the source's 10 + the fork's 5 + the second fork's 7, less the source's round 2 and final, which
    # neither fork reused: they went with it; its opening and round 1 stay, the forks point at them
    assert one(url, "select count(*) from contents") == 10 + 5 + 7 - 5
    assert client.result(fork) == final_text
    assert client.phase_text(fork, "r1.ravi") and client.phase_text(upstream.plan_id, "opening")
    kept = client.get(fork)
    assert kept.forked_from == {"plan_id": source, "phase": "r2"} and kept.usage.total_tokens == view.usage.total_tokens
    c = client.diff(fork, upstream.plan_id)  # the source is gone; its forks still compare
    assert {r.key for r in c.phases if r.shared} == {"opening", "r1.ravi", "r1.sofia"}
