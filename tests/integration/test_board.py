"""Board meetings on real Postgres, Redis and worker subprocesses: the shape of a meeting,
live progress, and an expert who hangs (failure report 001: one stream without a first
chunk must not hold up the others, and the meeting must say who was missing)."""

from __future__ import annotations

import time
from typing import Any

BOARD: dict[str, Any] = {
    "kind": "board", "title": "Pricing board", "question": "Should we move to usage-based pricing?",
    "rounds": 2, "moderator": {"name": "Morgan", "role": "Chair of the board"},
    "experts": [{"name": "Dana", "role": "Chief Financial Officer"},
                {"name": "Ravi", "role": "Chief Technology Officer"},
                {"name": "Sofia", "role": "Head of Sales"}],
}
# Ravi's model never sends a first chunk (and its non-streaming fallback hangs too):
# the guard gives up after the deadline; no retries, so the turn fails in about 2.5 s.
HUNG_RAVI = {"default": {"provider": "offline", "first_chunk_timeout": 0.5, "idle_timeout": 1.0, "deadline": 2.5,
                         "max_retries": 0,
                         "options": {"hang": ["Ravi"], "hang_seconds": 8, "latency": 0.02, "chunk_chars": 16}}}


def test_three_experts_two_rounds_complete_in_order_and_shape(workers: Any, client: Any) -> None:
    workers(beat=True)
    plan_id = client.submit(BOARD)
    sub = client.subscribe(plan_id)
    messages: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(m.get("type") == "plan_finished" for m in messages):
            msg = sub.get(0.2)
            if msg is not None:
                messages.append(msg)
            elif client.get(plan_id).final:
                break
    finally:
        sub.close()
    view = client.wait(plan_id, timeout=30)
    assert view.status == "completed", view.error

    shape = [(p.key, p.kind, p.expert, p.round, p.depends_on) for p in view.phases]
    turns = {r: [f"r{r}.dana", f"r{r}.ravi", f"r{r}.sofia"] for r in (1, 2)}
    assert shape == [
        ("opening", "opening", "Morgan", 0, []),
        ("r1.dana", "turn", "Dana", 1, ["opening"]),
        ("r1.ravi", "turn", "Ravi", 1, ["opening"]),
        ("r1.sofia", "turn", "Sofia", 1, ["opening"]),
        ("r1.summary", "round_summary", "Morgan", 1, turns[1]),
        ("r2.dana", "turn", "Dana", 2, ["r1.summary"]),
        ("r2.ravi", "turn", "Ravi", 2, ["r1.summary"]),
        ("r2.sofia", "turn", "Sofia", 2, ["r1.summary"]),
        ("r2.summary", "round_summary", "Morgan", 2, turns[2]),
        ("final", "final_summary", "Morgan", 3, ["r2.summary"]),
    ]
    assert all(p.status == "completed" and p.attempt == 1 for p in view.phases)

    # stored order of events: a turn of round 2 never started before round 1's summary completed
    events = list(client.events(plan_id))
    order = [(e.type, e.phase_key) for e in events if e.type in ("phase_started", "phase_completed")]
    assert order.index(("phase_completed", "r1.summary")) < order.index(("phase_started", "r2.dana"))
    assert order.index(("phase_completed", "opening")) < min(order.index(("phase_started", k)) for k in turns[1])

    # progress: every stored completion carries k/N, counted under the plan's lock, so
    # parallel experts finishing together still report 1, 2, … N — each k exactly once
    completed = [e.data for e in events if e.type == "phase_completed"]
    assert all(d["n"] == 10 for d in completed)
    assert sorted(d["k"] for d in completed) == list(range(1, 11))
    # live progress names who is speaking, with k/N
    started = [m for m in messages if m.get("type") == "phase_started"]
    assert started and all({"k", "n", "expert", "kind", "round"} <= set(m["data"]) for m in started)
    assert all(isinstance(m["id"], int) and m["phase"] for m in started)  # the stored event itself
    assert {m["data"]["expert"] for m in started if m["data"]["kind"] == "turn"} <= {"Dana", "Ravi", "Sofia"}
    assert any(m.get("type") == "chunk" and m.get("expert") for m in messages)

    # the round summaries and the final summary read every turn in full and attribute views
    r2 = client.phase_text(plan_id, "r2.summary")
    assert all(name in r2 for name in ("Dana", "Ravi", "Sofia"))
    final = client.result(plan_id)
    for heading in ("Recommendation:", "Where we agree:", "Open disagreements:", "Who holds which view:"):
        assert heading in final
    assert all(f"[r2.{slug}]" in final for slug in ("dana", "ravi", "sofia"))
    assert "Morgan" not in final.split("Who holds which view:")[1]  # the chair is not a panellist


def test_a_hung_expert_does_not_block_the_others_and_is_reported_missing(workers: Any, client: Any) -> None:
    workers(beat=True)
    plan_id = client.submit({**BOARD, "models": HUNG_RAVI})
    sub = client.subscribe(plan_id)
    chunks: dict[str, int] = {}
    completed_while_ravi_hung: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = sub.get(0.2)
            if msg is None:
                if client.get(plan_id).final:
                    break
                continue
            phase = str(msg.get("phase"))
            if msg.get("type") == "chunk" and phase.startswith("r1."):
                chunks[phase] = chunks.get(phase, 0) + 1
            if (msg.get("type") == "phase_completed" and phase in ("r1.dana", "r1.sofia")
                    and client.get(plan_id).phase("r1.ravi").status == "running"):
                completed_while_ravi_hung.add(phase)
            if msg.get("type") == "plan_finished":
                break
    finally:
        sub.close()

    # the others streamed and finished while Ravi's call was still hanging
    assert chunks.get("r1.dana", 0) > 3 and chunks.get("r1.sofia", 0) > 3, chunks
    assert "r1.ravi" not in chunks
    assert completed_while_ravi_hung == {"r1.dana", "r1.sofia"}

    view = client.wait(plan_id, timeout=30)
    assert view.status == "completed", view.error  # the meeting went on
    status = {p.key: p for p in view.phases}
    for r in (1, 2):
        assert status[f"r{r}.ravi"].status == "failed"
        assert status[f"r{r}.ravi"].error_code == "llm.stream_stalled", status[f"r{r}.ravi"].error
        assert status[f"r{r}.dana"].status == status[f"r{r}.sofia"].status == "completed"
        assert status[f"r{r}.summary"].status == "completed"
        summary = client.phase_text(plan_id, f"r{r}.summary")
        assert "We did not hear from Ravi this round." in summary
    final = client.result(plan_id)
    missing = final.split("Missing:", 1)
    assert len(missing) == 2 and "Ravi" in missing[1]
    ravi = next(line for line in final.splitlines() if "Ravi" in line and "Chief Technology Officer" in line)
    assert "no position on record" in ravi


def test_missing_expert_fatal_fails_the_plan(workers: Any, client: Any) -> None:
    workers(beat=True)
    plan_id = client.submit({**BOARD, "rounds": 1, "missing_expert": "fatal", "models": HUNG_RAVI})
    view = client.wait(plan_id, timeout=60)
    assert view.status == "failed"
    by = {p.key: p for p in view.phases}
    assert by["r1.ravi"].status == "failed"
    assert by["r1.dana"].status == by["r1.sofia"].status == "completed"
    assert by["r1.summary"].status == "skipped" and by["final"].status == "skipped"
    assert view.error_code == "llm.stream_stalled" and "r1.ravi" in (view.error or "")
