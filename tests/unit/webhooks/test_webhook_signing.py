"""A delivery's signature is what docs/api.md tells receivers to check, and the snippet there
(run as written) accepts Conclave's signatures and nothing else: another body, another secret,
an old or a future timestamp. Each endpoint's secret is derived from the operator's key, its id
and its version — so a rotation changes it — and while a rotation keeps the previous secret,
both sign. The body of a delivery is the same bytes on every attempt."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.webhooks import request
from orchestrator.webhooks.signing import endpoint_secret, signature, signature_header
from storage.webhook_outbox import Due
from tests.webhook_receiver import documented_receiver

KEY = b"k" * 40
NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
T = int(NOW.timestamp())


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return documented_receiver()


def due(**changes: Any) -> Due:
    base = Due(id="9c4d1f2a6b7e4e0f8a51c3d2e9b07a14", attempt=1, endpoint_id="5f0e2c1a-0000-4000-8000-000000000001",
               url="https://hooks.example.com/conclave", secret_version=1, previous_valid_until=None, tenant="acme",
               plan_id="2b0c6d6e-6a2e-4d8b-9d0c-3f1f8d5b2a77", task_id="weekly", event_id=812,
               event_type="plan_finished", phase_key=None, data={"status": "completed", "error_code": None,
                                                                  "error": None},
               occurred_at=NOW - timedelta(seconds=3), created_at=NOW - timedelta(seconds=3))
    return replace(base, **changes)


def test_the_documented_snippet_accepts_a_delivery_and_nothing_altered(doc: dict[str, Any]) -> None:
    verify = doc["verify"]
    secret = endpoint_secret(KEY, "e1", 1)
    body = request.body(due())
    header = signature_header(T, [secret], body)
    assert header == f"t={T},v1={signature(secret, T, body)}"
    assert verify(secret, header, body, now=T + 10)
    assert not verify(secret, header, body + b" ", now=T + 10)  # another body
    assert not verify(endpoint_secret(KEY, "e1", 2), header, body, now=T + 10)  # another secret
    assert not verify(secret, header.replace(f"t={T}", f"t={T + 1}"), body, now=T + 10)  # the time is signed
    tolerance = doc["TOLERANCE"]
    assert verify(secret, header, body, now=T + tolerance) and not verify(secret, header, body, now=T + tolerance + 1)
    assert not verify(secret, header, body, now=T - tolerance - 1)  # signed "in the future" is refused too
    assert not verify(secret, f"v1={signature(secret, T, body)}", body, now=T)  # no timestamp
    assert not verify(secret, f"t={T}", body, now=T)  # no signature


def test_the_documented_receiver_acts_once_per_delivery(doc: dict[str, Any]) -> None:
    secret = endpoint_secret(KEY, due().endpoint_id, 1)
    body = request.body(due())
    headers = request.headers(due(), body, key=KEY, now=datetime.now(UTC))  # receive() reads the real clock
    assert doc["receive"](headers, body, endpoint_secret(KEY, "e2", 1)) == 401
    assert doc["receive"](headers, body, secret) == 200 and doc["seen"] == {due().id}
    assert doc["receive"](headers, body, secret) == 200 and doc["seen"] == {due().id}  # the retry: acted on once


def test_each_endpoint_and_version_has_its_own_secret_derived_from_the_operators_key() -> None:
    secret = endpoint_secret(KEY, "e1", 1)
    assert secret.startswith("whsec_") and len(secret) == len("whsec_") + 43
    assert secret == endpoint_secret(KEY, "e1", 1)  # derived again, the same: nothing to store
    others = {endpoint_secret(KEY, "e2", 1), endpoint_secret(KEY, "e1", 2), endpoint_secret(b"j" * 40, "e1", 1)}
    assert secret not in others and len(others) == 3


def test_a_delivery_carries_its_id_type_attempt_and_a_signature_by_its_current_secret(doc: dict[str, Any]) -> None:
    d = due(attempt=3, secret_version=2)
    body = request.body(d)
    headers = request.headers(d, body, key=KEY, now=NOW)
    assert headers["Conclave-Delivery"] == d.id and headers["Conclave-Event"] == "plan_finished"
    assert headers["Conclave-Attempt"] == "3" and headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("Conclave-Webhooks/")
    assert doc["verify"](endpoint_secret(KEY, d.endpoint_id, 2), headers["Conclave-Signature"], body, now=T)
    assert not doc["verify"](endpoint_secret(KEY, d.endpoint_id, 1), headers["Conclave-Signature"], body, now=T)


def test_after_a_rotation_the_previous_secret_signs_too_until_its_time(doc: dict[str, Any]) -> None:
    d = due(secret_version=2, previous_valid_until=NOW + timedelta(hours=1))
    old, new = endpoint_secret(KEY, d.endpoint_id, 1), endpoint_secret(KEY, d.endpoint_id, 2)
    body = request.body(d)
    within = request.headers(d, body, key=KEY, now=NOW)["Conclave-Signature"]
    assert within.count("v1=") == 2 and within.index(signature(new, T, body)) < within.index(signature(old, T, body))
    assert doc["verify"](old, within, body, now=T) and doc["verify"](new, within, body, now=T)
    later = NOW + timedelta(hours=1)
    after = request.headers(d, body, key=KEY, now=later)["Conclave-Signature"]
    assert after.count("v1=") == 1 and not doc["verify"](old, after, body, now=int(later.timestamp()))
    assert doc["verify"](new, after, body, now=int(later.timestamp()))


def test_the_body_is_the_same_bytes_on_every_attempt_and_says_what_happened() -> None:
    first, third = request.body(due(attempt=1)), request.body(due(attempt=3, secret_version=4))
    assert first == third
    sent = json.loads(first)
    assert sent == {"id": due().id, "type": "plan_finished", "created_at": due().occurred_at.isoformat(),
                    "tenant": "acme", "plan_id": due().plan_id, "task_id": "weekly", "phase": None, "event_id": 812,
                    "data": {"status": "completed", "error_code": None, "error": None}}
    assert b" " not in first  # compact: what is signed is exactly what is sent
