"""The HTTP API's input checks and error shapes — no services needed (its metrics:
``tests/unit/test_metrics.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from orchestrator.api import create_app
from orchestrator.api import inputs as inp
from orchestrator.core.errors import BodyTooLarge, InvalidRequest, MalformedBody
from orchestrator.core.settings import Settings
from orchestrator.fleet.celery_app import build_app
from orchestrator.plan.canvas import Advance, Canvas, Chain, Run, to_signature


def test_plain_keeps_json_values_and_order() -> None:
    data = {"b": [1, 2.5, True, None, "x"], "a": {"z": 1, "y": 2}}
    out = inp.plain(data, max_chars=10_000)
    assert out == data and list(out) == ["b", "a"] and list(out["a"]) == ["z", "y"]


@pytest.mark.parametrize(("value", "field"), [
    ({"title": "a\x00b"}, "title"),
    ({"experts": [{"name": "\ud800"}]}, "experts[0].name"),
    ({"rounds": float("inf")}, "rounds"),
    ({"models": {"m": {1: "x"}}}, "models.m"),
    ({"title": b"bytes"}, "title"),
    ({"tags": {1, 2}}, "tags"),
])
def test_plain_names_the_bad_field(value: Any, field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        inp.plain(value, max_chars=10_000)
    assert info.value.details[0]["field"] == field


def test_plain_bounds_depth_and_expansion() -> None:
    deep: Any = "x"
    for _ in range(inp.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(InvalidRequest):
        inp.plain(deep, max_chars=10_000)
    shared = ["y" * 100] * 10
    bomb = [shared] * 1000  # 10,000 references to one small list
    with pytest.raises(BodyTooLarge):
        inp.plain({"bomb": bomb}, max_chars=50_000)


def test_parse_document_errors_name_position_without_echo() -> None:
    with pytest.raises(MalformedBody) as info:
        inp.parse_document(b'{"title": "sk-secret", }', "application/json", max_bytes=10_000)
    assert "line 1" in info.value.message and "sk-secret" not in str(info.value.to_dict())
    with pytest.raises(MalformedBody) as info:
        inp.parse_document(b"title: sk-secret\n  bad: [", "application/yaml", max_bytes=10_000)
    assert "line" in info.value.message and "sk-secret" not in str(info.value.to_dict())
    assert inp.parse_document(b"when: 2024-05-01\n", "application/yaml", max_bytes=10_000) == {"when": "2024-05-01"}


@pytest.mark.parametrize("raw", ["abc", "-1", "1.0", "9223372036854775808", "9" * 30, ""])
def test_event_id_rejects(raw: str) -> None:
    with pytest.raises(InvalidRequest):
        inp.event_id(raw, "Last-Event-ID")


def test_event_id_accepts() -> None:
    assert inp.event_id(None, "after") is None
    assert inp.event_id(" 42 ", "after") == 42
    assert inp.event_id("9223372036854775807", "after") == 2**63 - 1


def test_run_phase_has_a_readable_shadow_name() -> None:
    app = build_app(Settings())
    sig = to_signature(Canvas("p", Chain((Run("id-1", "r1.dana"), Advance()))), app)
    assert sig.task == "conclave.run_phase" and sig.options["shadow"] == "conclave.run_phase[r1.dana]"
    assert sig.kwargs == {"plan_id": "p", "phase_id": "id-1", "phase_key": "r1.dana", "advance": True}


class _ExplodingReads:
    def view(self, ref: str, **_: Any) -> Any:
        raise RuntimeError("boom at /srv/conclave/secret-path password=hunter2")


class _Exploding:
    """A local backend whose reads fail like a bug would."""

    coordinator = None
    bus = None
    db = None
    reads = _ExplodingReads()


def test_unexpected_errors_are_a_generic_json_500() -> None:
    app = create_app(Settings(), local=_Exploding())  # type: ignore[arg-type]

    async def get() -> httpx.Response:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
                return await http.get("/v1/plans/abc")

    r = asyncio.run(get())
    assert r.status_code == 500
    body = r.json()
    assert body["error"]["code"] == "internal" and body["error"]["message"] == "internal error"
    assert body["error"]["details"]["request_id"] == r.headers["x-request-id"]
    assert "boom" not in r.text and "hunter2" not in r.text and "Traceback" not in r.text
