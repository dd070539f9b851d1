"""What a delivery sends: a JSON body built from the outbox row alone, and its headers.

The body is the same bytes on every attempt of a delivery (keys sorted, no spaces), so a
receiver that stored one attempt's body can compare it with a retry's:

    {"id": "<delivery id>", "type": "plan_finished", "created_at": "<the event's time>",
     "tenant": "acme", "plan_id": "…", "task_id": "…" | null, "phase": "…" | null,
     "event_id": 812, "data": {…the event's data, as the event stream shows it…}}

Headers: ``Conclave-Delivery`` (the delivery's id: the idempotency key — the same on every
attempt, different for each endpoint and event), ``Conclave-Event`` (the type),
``Conclave-Attempt`` (1, 2, …), ``Conclave-Signature`` (:mod:`orchestrator.webhooks.signing`),
``Content-Type: application/json`` and ``User-Agent: Conclave-Webhooks/<version>``.
"""

from __future__ import annotations

import json
from datetime import datetime

from orchestrator.core.version import __version__
from orchestrator.webhooks.signing import endpoint_secret, signature_header
from storage.webhook_outbox import Due

USER_AGENT = f"Conclave-Webhooks/{__version__}"


def body(due: Due) -> bytes:
    """The delivery's body: the same bytes on every attempt."""
    return json.dumps({"id": due.id, "type": due.event_type, "created_at": due.occurred_at.isoformat(),
                       "tenant": due.tenant, "plan_id": due.plan_id, "task_id": due.task_id, "phase": due.phase_key,
                       "event_id": due.event_id, "data": due.data},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def signing_secrets(key: bytes, due: Due, now: datetime) -> list[str]:
    """The secrets that sign this attempt: the endpoint's current one, and its previous one
    while a rotation keeps honouring it."""
    secrets = [endpoint_secret(key, due.endpoint_id, due.secret_version)]
    if due.secret_version > 1 and due.previous_valid_until is not None and now < due.previous_valid_until:
        secrets.append(endpoint_secret(key, due.endpoint_id, due.secret_version - 1))
    return secrets


def headers(due: Due, payload: bytes, *, key: bytes, now: datetime) -> dict[str, str]:
    """The attempt's headers, signed at ``now``."""
    timestamp = int(now.timestamp())
    return {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Conclave-Delivery": due.id,
            "Conclave-Event": due.event_type, "Conclave-Attempt": str(due.attempt),
            "Conclave-Signature": signature_header(timestamp, signing_secrets(key, due, now), payload)}
