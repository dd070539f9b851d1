"""A user's session through a client generated from ``/openapi.json`` by
openapi-python-client, run as a script by ``test_generated_client.py`` with the generated
package ``conclave_client`` on ``sys.path`` (nothing is installed into the shared venv).

    python generated_session.py URL TOKEN PLAN.yaml     submit, list, get, events, result
    python generated_session.py URL TOKEN --unavailable  what a client sees while the database is down

It uses only the generated package's own calls and models, and prints one JSON document:
what the user saw, for the test to compare with the stored state.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml
from conclave_client import AuthenticatedClient
from conclave_client.api.operations import get_health, get_readiness
from conclave_client.api.plans import get_plan, get_result, list_plans, stream_events, submit_plan
from conclave_client.models import (
    BoardPlan,
    Chunk,
    ErrorResponse,
    EventType,
    PlanPage,
    PlanView,
    ResultText,
    StoredEvent,
    Submitted,
)

MISSING = "00000000-0000-4000-8000-000000000000"


def frames(text: str) -> list[dict[str, str]]:
    """The stream's frames as an SSE parser reads them (comments skipped)."""
    out = []
    for block in text.split("\n\n"):
        frame: dict[str, str] = {}
        for line in block.splitlines():
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            frame[name] = frame[name] + "\n" + value if name in frame else value
        if frame:
            out.append(frame)
    return out


def session(client: AuthenticatedClient, plan_file: str) -> dict[str, Any]:
    health = get_health.sync(client=client)
    plan = BoardPlan.from_dict(yaml.safe_load(Path(plan_file).read_text()) | {"task_id": "generated-client-1"})
    submitted = submit_plan.sync_detailed(client=client, body=plan)
    assert isinstance(submitted.parsed, Submitted), submitted.content
    plan_id = submitted.parsed.plan_id

    page = list_plans.sync(client=client, limit=10)
    assert isinstance(page, PlanPage), page

    stream = stream_events.sync(plan_id, client=client)  # the whole stream: it ends with the plan
    assert isinstance(stream, str), stream
    stored: list[StoredEvent] = []
    chunks: list[Chunk] = []
    for frame in frames(stream):
        if frame.get("event") == "chunk":
            chunks.append(Chunk.from_dict(json.loads(frame["data"])))
        elif "data" in frame:
            event = StoredEvent.from_dict(json.loads(frame["data"]))
            assert event.type_ == EventType(frame["event"]) and event.id == int(frame["id"]), frame
            stored.append(event)
    tail = stream_events.sync(plan_id, client=client, after=stored[-2].id)
    assert isinstance(tail, str), tail

    view = get_plan.sync(plan_id, client=client)
    assert isinstance(view, PlanView), view
    result = get_result.sync(plan_id, client=client)
    assert isinstance(result, ResultText), result
    missing = get_plan.sync_detailed(MISSING, client=client)
    assert isinstance(missing.parsed, ErrorResponse), missing.content
    return {
        "health": health.status if health else None,
        "submit": {"status": int(submitted.status_code), "plan_id": plan_id, "created": submitted.parsed.created,
                   "enqueued": submitted.parsed.enqueued},
        "listed": [p.id for p in page.plans],
        "events": [{"id": e.id, "type": e.type_.value, "phase": e.phase} for e in stored],
        "chunks": [{"phase": c.phase, "expert": c.expert, "seq": c.seq, "text": c.text} for c in chunks],
        "after": [int(f["id"]) for f in frames(tail) if "id" in f],
        "view": {"id": view.id, "status": view.status.value, "phases": [(p.key, p.status.value) for p in view.phases],
                 "total_tokens": view.usage.total_tokens},
        "result": {"status": result.status.value, "text": result.text},
        "missing": {"status": int(missing.status_code), "code": missing.parsed.error.code},
    }


def unavailable(client: AuthenticatedClient) -> dict[str, Any]:
    out = {}
    for name, call in (("list_plans", lambda: list_plans.sync_detailed(client=client)),
                       ("get_plan", lambda: get_plan.sync_detailed(MISSING, client=client)),
                       ("get_readiness", lambda: get_readiness.sync_detailed(client=client))):
        answer = call()
        assert isinstance(answer.parsed, ErrorResponse), answer.content
        out[name] = {"status": int(answer.status_code), "code": answer.parsed.error.code,
                     "message": answer.parsed.error.message}
    return out


def main() -> None:
    url, token, what = sys.argv[1:4]
    with AuthenticatedClient(base_url=url, token=token, timeout=httpx.Timeout(120, connect=5)) as client:
        print(json.dumps(unavailable(client) if what == "--unavailable" else session(client, what)))


if __name__ == "__main__":
    main()
