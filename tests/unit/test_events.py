"""One shape per event type: the builders in ``storage.event_shapes`` make exactly the keys
``docs/api.md`` documents, and a stored event's bus message is the event itself."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from storage import event_shapes
from storage.event_shapes import NewEvent
from storage.read_models import EventRecord
from tests.conftest import ROOT
from tests.unit.stored import example, stored


def _documented() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "api.md").read_text()
    rows = re.findall(r"^  \| `([a-z_]+)` \| (.+) \|$", text, re.MULTILINE)
    return {kind: set(re.findall(r"`([a-z_]+)`", keys)) for kind, keys in rows}


def _built() -> list[NewEvent]:
    phase = stored(example("board"))[1]
    return [
        event_shapes.plan_submitted(title="t", kind="board", phases=3, tenant="default"),
        event_shapes.plan_forked(source="p-1", from_phase="r2", reused=["opening"], rerun=[]),
        event_shapes.phase_started(phase, attempt=1, worker="w", k=0, n=3),
        event_shapes.phase_completed(phase, attempt=1, chars=3, truncated=False, fallback=False, offloaded=False,
                                 summary="s", k=1, n=3),
        event_shapes.phase_failed(phase, attempt=1, error_code="llm.unavailable", error="e", k=1, n=3),
        event_shapes.phase_cancelled(phase, attempt=1, reason="r", k=1, n=3),
        event_shapes.phases_skipped(["a"], "r"),
        event_shapes.debate_inserted(check="check-1", topic="t", participants=["A", "B"], phases=["d.a", "d.b"]),
        event_shapes.limit_reached("debate", limit=1, existing=1),
        event_shapes.cancel_requested(["a"]),
        event_shapes.retry_requested(["a"]),
        event_shapes.resume_requested(retry_failed=False, reset=[], actor=None),
        event_shapes.plan_updated({"title": "t2"}, actor=None),
        event_shapes.plan_finished("completed", error_code=None, error=None),
        event_shapes.input_requested(phase, attempt=1, role="r", due_at="2026-01-01T00:00:00+00:00",
                                     respond_within=60, prompt="p", inputs=["opening"]),
        event_shapes.input_received(phase, attempt=1, actor=None, chars=3),
        event_shapes.steered(n=1, note="n", actor=None),
        event_shapes.awaiting_approval(phase="final", revision=0, chars=3, summary="s"),
        event_shapes.sent_back(phase="final", revision="final.revised", note="n", actor=None),
        event_shapes.approved(phase="final", revision=0, actor=None),
    ]


def test_every_event_type_has_the_documented_keys() -> None:
    documented = _documented()
    built = {e.type: set(e.data) for e in _built()}
    assert built == documented


def test_phase_events_name_their_phase_and_plan_events_none() -> None:
    for event in _built():  # a seat's events are about its phase; an approval's about the plan (data names the draft)
        assert (event.phase_key is not None) == event.type.startswith(("phase_", "input_")), event.type


def test_the_bus_message_of_a_stored_event_is_the_event() -> None:
    record = EventRecord(id=7, plan_id="p", phase_key="opening", type="phase_started", data={"attempt": 1},
                         created_at=datetime.now(UTC))
    assert record.message() == {"id": 7, "type": "phase_started", "phase": "opening", "data": {"attempt": 1}}
