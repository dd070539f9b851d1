"""The served OpenAPI document is one a client generator can use: every operation has the
stable id below (renaming one is a visible change of the contract: this snapshot fails),
the event stream is declared as ``text/event-stream`` text with its frames and every
stored event type in the components, and every route that reads the database or the
broker declares the 503 it answers when they are down. No services needed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from orchestrator.api import create_app
from orchestrator.api.stream_schema import EVENT_TYPES
from orchestrator.core.settings import Settings
from tests.conftest import ROOT

OPERATION_IDS = {
    ("post", "/v1/plans"): "submit_plan",
    ("get", "/v1/plans"): "list_plans",
    ("get", "/v1/plans/{plan_id}"): "get_plan",
    ("patch", "/v1/plans/{plan_id}"): "update_plan",
    ("get", "/v1/plans/{plan_id}/result"): "get_result",
    ("get", "/v1/plans/{plan_id}/phases/{key}/content"): "get_phase_content",
    ("get", "/v1/plans/{plan_id}/documents"): "list_documents",
    ("get", "/v1/plans/{plan_id}/documents/{doc_id}"): "get_document",
    ("post", "/v1/plans/{plan_id}/resume"): "resume_plan",
    ("post", "/v1/plans/{plan_id}/cancel"): "cancel_plan",
    ("get", "/v1/plans/{plan_id}/events"): "stream_events",
    ("post", "/v1/plans/{plan_id}/phases/{key}/input"): "answer_seat",
    ("post", "/v1/plans/{plan_id}/approve"): "approve_plan",
    ("post", "/v1/plans/{plan_id}/send-back"): "send_back_plan",
    ("post", "/v1/plans/{plan_id}/steer"): "steer_plan",
    ("post", "/v1/plans/{plan_id}/fork"): "fork_plan",
    ("get", "/v1/plans/{plan_id}/diff/{other}"): "diff_plans",
    ("post", "/v1/evals"): "create_eval",
    ("get", "/v1/evals"): "list_evals",
    ("get", "/v1/evals/{name}"): "get_eval",
    ("post", "/v1/webhooks"): "create_webhook",
    ("get", "/v1/webhooks"): "list_webhooks",
    ("get", "/v1/webhooks/{webhook_id}"): "get_webhook",
    ("delete", "/v1/webhooks/{webhook_id}"): "delete_webhook",
    ("post", "/v1/webhooks/{webhook_id}/rotate"): "rotate_webhook_secret",
    ("get", "/v1/webhooks/{webhook_id}/deliveries"): "list_webhook_deliveries",
    ("get", "/healthz"): "get_health",
    ("get", "/readyz"): "get_readiness",
    ("get", "/metrics"): "get_metrics",
}

ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    document: dict[str, Any] = create_app(Settings()).openapi()
    return document


def _operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method, path): op for path, ops in schema["paths"].items() for method, op in ops.items()}


def _resolve(schema: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = schema
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    assert isinstance(node, dict), ref
    return node


def test_every_operation_has_its_stable_id(schema: dict[str, Any]) -> None:
    ids = {key: op.get("operationId") for key, op in _operations(schema).items()}
    assert ids == OPERATION_IDS
    assert len(set(ids.values())) == len(ids)


def test_every_operation_is_tagged_so_a_generated_client_groups_it(schema: dict[str, Any]) -> None:
    tags = {key: op.get("tags") for key, op in _operations(schema).items()}
    assert all(t and len(t) == 1 for t in tags.values()), tags
    assert tags[("get", "/v1/plans/{plan_id}/events")] == ["plans"] and tags[("get", "/readyz")] == ["operations"]


def test_the_event_stream_is_text_with_its_frames_described(schema: dict[str, Any]) -> None:
    op = _operations(schema)[("get", "/v1/plans/{plan_id}/events")]
    ok = op["responses"]["200"]
    assert set(ok["content"]) == {"text/event-stream"}  # not application/json: a client reads it as text
    stream = ok["content"]["text/event-stream"]
    assert stream["schema"]["type"] == "string"
    frame = _resolve(schema, stream["x-itemSchema"]["$ref"])
    shapes = {f["title"]: f for f in frame["oneOf"]}
    assert set(shapes) == {"StoredEventFrame", "ChunkFrame", "RetryFrame"}
    stored = shapes["StoredEventFrame"]["properties"]
    assert _resolve(schema, stored["event"]["$ref"])["enum"] == list(EVENT_TYPES)
    assert _resolve(schema, stored["data"]["contentSchema"]["$ref"])["required"] == [
        "id", "type", "phase", "data", "created_at"]
    chunk = shapes["ChunkFrame"]["properties"]
    assert chunk["event"]["const"] == "chunk"
    assert set(_resolve(schema, chunk["data"]["contentSchema"]["$ref"])["properties"]) == {
        "type", "phase", "expert", "seq", "text"}
    params = {(p["in"], p["name"]) for p in op["parameters"]}
    assert params == {("path", "plan_id"), ("query", "after"), ("header", "Last-Event-ID")}
    for event_type in EVENT_TYPES:  # a reader of the document learns every name the stream sends
        assert f"`{event_type}`" in ok["description"]


def _built_event_types() -> set[str]:
    """Every type the builders of ``storage.event_shapes`` make: the literal ones and, for
    ``limit_reached(kind, …)`` (the kind of the phases an insertion would have added), each
    kind of phase the plan's insertions build."""
    shapes = (ROOT / "storage" / "event_shapes.py").read_text()
    types = set(re.findall(r'NewEvent\(\s*"([a-z_]+)"', shapes))
    assert 'NewEvent(f"{kind}_limit_reached"' in shapes
    for module in (ROOT / "orchestrator").rglob("*.py"):
        text = module.read_text()
        if "Insertion(" in text:
            types |= {f"{kind}_limit_reached" for kind in re.findall(r'NewPhase\(.{0,300}?kind="([a-z]+)"', text,
                                                                             re.S)}
    return types


def test_the_schema_names_every_stored_event_type_the_builders_make() -> None:
    built = _built_event_types()
    assert "plan_finished" in built and "debate_limit_reached" in built
    assert set(EVENT_TYPES) == built


def test_routes_that_need_the_database_or_broker_declare_503(schema: dict[str, Any]) -> None:
    ops = _operations(schema)
    ready = {key for key in ops if key[1].startswith("/v1/")} | {("get", "/readyz"), ("get", "/metrics")}
    for key in ready:
        unavailable = ops[key]["responses"].get("503")
        assert unavailable is not None, key
        assert unavailable["content"] == {"application/json": {"schema": ERROR_REF}}, key
    assert "503" not in ops[("get", "/healthz")]["responses"]  # liveness answers while the process is up


def test_every_error_status_is_the_json_error_body(schema: dict[str, Any]) -> None:
    for key, op in _operations(schema).items():
        for status, response in op["responses"].items():
            if int(status) >= 400:
                assert response["content"] == {"application/json": {"schema": ERROR_REF}}, (key, status)
    error = _resolve(schema, ERROR_REF["$ref"])
    detail = _resolve(schema, error["properties"]["error"]["$ref"])
    assert detail["required"] == ["code", "message", "details"]


def test_the_pages_are_not_in_the_contract(schema: dict[str, Any]) -> None:
    assert not {"/docs", "/redoc", "/openapi.json"} & set(schema["paths"])
    assert not any(path.startswith(("/ui", "/docs/assets")) for path in schema["paths"])
