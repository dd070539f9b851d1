"""The HTTP backend's edges that a real server rarely shows, over ``httpx.MockTransport``:
a server that replays an event the client has seen, a stream that ends while the plan runs,
and error answers whose code the client does not know."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import httpx
import pytest

from orchestrator.client.conclave import Conclave
from orchestrator.core.errors import ConclaveError, Forbidden, InvalidRequest, PlanNotFound, ServiceUnavailable
from orchestrator.plan.views import PlanView


def stored(event_id: int, type_: str = "phase_completed") -> bytes:
    data = {"id": event_id, "type": type_, "phase": None, "data": {}, "created_at": "2025-01-01T00:00:00+00:00"}
    return f"id: {event_id}\nevent: {type_}\ndata: {json.dumps(data)}\n\n".encode()


def chunk(seq: int) -> bytes:
    data = {"type": "chunk", "phase": "opening", "expert": "Morgan", "seq": seq, "text": f"w{seq} "}
    return f"event: chunk\ndata: {json.dumps(data)}\n\n".encode()


def broken(*parts: bytes) -> Iterator[bytes]:
    yield from parts
    raise httpx.ReadError("connection reset by peer")


def view(status: str) -> dict[str, Any]:
    return {**{f.name: None for f in fields(PlanView)}, "id": "p1", "title": "t", "kind": "board", "labels": [],
            "status": status, "cancel_requested": False, "created_at": "2025-01-01T00:00:00+00:00",
            "usage": {}, "phases": []}


def remote(handler: Any) -> Conclave:
    return Conclave.connect("http://127.0.0.1:9", token="tok", transport=httpx.MockTransport(handler))


def test_watch_reconnects_from_the_last_event_and_skips_what_it_has_seen() -> None:
    asked: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer tok"
        asked.append(request.headers.get("last-event-id"))
        if len(asked) == 1:  # the connection breaks in the middle of an event
            return httpx.Response(200, content=broken(b"retry: 2000\n\n", stored(1), chunk(0), stored(2),
                                                      b"id: 3\nevent: phase_c"))
        return httpx.Response(200, content=stored(2) + stored(3) + chunk(1) + stored(4, "plan_finished"))

    with remote(handler) as client:
        got = list(client.watch("p1"))
    assert asked == [None, "2"]
    assert [(m.get("id"), m["type"]) for m in got] == [
        (1, "phase_completed"), (None, "chunk"), (2, "phase_completed"), (3, "phase_completed"), (None, "chunk"),
        (4, "plan_finished")]


def test_a_stream_that_ends_while_the_plan_runs_is_opened_again() -> None:
    streams = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal streams
        if request.url.path.endswith("/events"):
            streams += 1
            return httpx.Response(200, content=stored(1) if streams == 1 else stored(2, "plan_finished"))
        return httpx.Response(200, json=view("running"))

    with remote(handler) as client:
        assert [m["id"] for m in client.watch("p1")] == [1, 2]
    assert streams == 2


def test_error_answers_become_the_classes_of_their_codes() -> None:
    answers = {
        "/v1/plans/a": httpx.Response(404, json={"error": {"code": "plan.not_found", "message": "no plan 'a'",
                                                           "details": [{"field": "plan_id", "message": "no plan"}]}}),
        "/v1/plans/b": httpx.Response(403, json={"error": {"code": "auth.forbidden", "message": "needs a scope",
                                                           "details": [{"field": "Authorization", "message": "x"}]}}),
        "/v1/plans/c": httpx.Response(404, json={"error": {"code": "http.not_found", "message": "no such route",
                                                           "details": [{"field": "path", "message": "x"}]}}),
        "/v1/plans/d": httpx.Response(502, text="<html>bad gateway</html>"),
        "/v1/plans/e": httpx.Response(500, json={"error": {"code": "internal", "message": "internal error",
                                                           "details": {"request_id": "r1"}}},
                                      headers={"X-Request-ID": "r1"}),
    }
    with remote(lambda request: answers[request.url.path]) as client:
        raised = {}
        for ref in "abcde":
            with pytest.raises(ConclaveError) as exc:
                client.get(ref)
            raised[ref] = exc.value
    assert type(raised["a"]) is PlanNotFound and raised["a"].details[0]["field"] == "plan_id"
    assert type(raised["b"]) is Forbidden
    assert type(raised["c"]) is InvalidRequest and raised["c"].code == "http.not_found"
    assert type(raised["d"]) is ServiceUnavailable and "http://127.0.0.1:9" in raised["d"].message
    assert type(raised["e"]) is ConclaveError and raised["e"].code == "internal" and "r1" in raised["e"].message
