"""The event stream's published contract: what ``GET /v1/plans/{id}/events`` sends, as
``/openapi.json`` describes it.

The response is ``text/event-stream``, declared as a string (the body is a stream of
Server-Sent Events, not a JSON document), so a generated client hands it over as text
instead of trying to parse it. What the frames carry is in the components: every frame
is a :data:`SERVER_SENT_EVENT` (OpenAPI 3.2's ``itemSchema``, given here as the extension
``x-itemSchema`` of this 3.1 document), whose ``event:`` is an :class:`EventType` or
``chunk`` and whose ``data:`` is JSON — a :class:`StoredEvent` or a :class:`Chunk`.

:data:`EVENT_TYPES` names every stored event type the builders of
:mod:`storage.event_shapes` make; a unit test holds the two together, so a new type is a
visible change of the contract.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field


class EventType(StrEnum):
    """A stored event's type: the `event:` field of its frame and the `type` of its data
    (in the order a plan's life meets them)."""

    PLAN_SUBMITTED = "plan_submitted"
    PLAN_FORKED = "plan_forked"
    PHASE_STARTED = "phase_started"
    PHASE_COMPLETED = "phase_completed"
    PHASE_FAILED = "phase_failed"
    PHASE_CANCELLED = "phase_cancelled"
    PHASES_SKIPPED = "phases_skipped"
    DEBATE_INSERTED = "debate_inserted"
    DEBATE_LIMIT_REACHED = "debate_limit_reached"
    DECISION_RECORDED = "decision_recorded"
    ROUNDS_SKIPPED = "rounds_skipped"
    CANCEL_REQUESTED = "cancel_requested"
    RETRY_REQUESTED = "retry_requested"
    RESUME_REQUESTED = "resume_requested"
    PLAN_UPDATED = "plan_updated"
    INPUT_REQUESTED = "input_requested"
    INPUT_RECEIVED = "input_received"
    STEERED = "steered"
    AWAITING_APPROVAL = "awaiting_approval"
    SENT_BACK = "sent_back"
    APPROVED = "approved"
    PLAN_FINISHED = "plan_finished"


#: every stored event type
EVENT_TYPES = tuple(t.value for t in EventType)


class StoredEvent(BaseModel):
    """The ``data:`` of a stored event's frame: one row of the plan's record, sent with
    ``id:`` = ``id`` (send it back as ``Last-Event-ID`` to resume after it)."""

    id: int = Field(description="the stored event's id; increases along the plan's record")
    type: EventType
    phase: str | None = Field(description="the phase it is about (`phase_*` and `input_*` events), else null")
    data: dict[str, Any] = Field(description="one shape per type: the keys are listed in docs/api.md (Events)")
    created_at: datetime


class Chunk(BaseModel):
    """The ``data:`` of a ``chunk`` frame: live text of a phase being written. Not stored,
    so its frame has no ``id:``; the phase's full text is at ``/phases/{key}/content``."""

    type: Literal["chunk"]
    phase: str = Field(description="the key of the phase being written")
    expert: str | None = Field(description="who is speaking; null for a phase no expert speaks")
    seq: int = Field(description="the chunk's position in the phase's text, from 0")
    text: str


def _data(model: str) -> dict[str, Any]:
    return {"type": "string", "contentMediaType": "application/json",
            "contentSchema": {"$ref": f"#/components/schemas/{model}"}}


#: one frame of the stream, as an SSE parser hands it over (``: keep-alive`` comments are not frames)
SERVER_SENT_EVENT: dict[str, Any] = {
    "title": "ServerSentEvent",
    "description": "One frame of the event stream: a stored event (with `id:`), a live `chunk` (without), "
                   "or the opening `retry:` (milliseconds to wait before reconnecting).",
    "oneOf": [
        {"title": "StoredEventFrame", "type": "object", "required": ["id", "event", "data"],
         "properties": {"id": {"type": "string", "description": "the stored event's id: send as Last-Event-ID"},
                        "event": {"$ref": "#/components/schemas/EventType"},
                        "data": _data("StoredEvent")}},
        {"title": "ChunkFrame", "type": "object", "required": ["event", "data"],
         "properties": {"event": {"type": "string", "const": "chunk"}, "data": _data("Chunk")}},
        {"title": "RetryFrame", "type": "object", "required": ["retry"],
         "properties": {"retry": {"type": "integer", "description": "milliseconds"}}},
    ],
}

STREAM_DESCRIPTION = (
    "Server-Sent Events (`text/event-stream`, not JSON): first `retry: 2000`, then the plan's stored events "
    "after `Last-Event-ID` (or `?after=`), each with `id:`, `event:` its type (" +
    ", ".join(f"`{t}`" for t in EVENT_TYPES) + ") and `data:` a JSON StoredEvent; between them live "
    "`event: chunk` frames without `id:`, whose `data:` is a JSON Chunk. `: keep-alive` comments after 10 s "
    "of silence. The stream ends after the plan's `plan_finished` event.")

_EVENT_ID = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}

#: read by the route itself (so a bad one is a 422 naming it); declared here for clients
EVENT_STREAM_PARAMETERS: list[dict[str, Any]] = [
    {"name": "after", "in": "query", "required": False, "schema": _EVENT_ID,
     "description": "send only the stored events after this id (as `Last-Event-ID`)"},
    {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string", "pattern": "^[0-9]+$"},
     "description": "the id of the last stored event received: the stream resumes after it (wins over `after`)"},
]

#: the ``responses`` entry of the events route's 200
EVENT_STREAM_RESPONSE: dict[str, Any] = {
    "description": STREAM_DESCRIPTION,
    "content": {"text/event-stream": {
        "schema": {"type": "string", "description": "the whole stream, frame after frame"},
        "x-itemSchema": {"$ref": "#/components/schemas/ServerSentEvent"},
    }},
}


def stream_components(ref_template: str) -> dict[str, Any]:
    """The components the events route refers to, for ``/openapi.json``."""
    out: dict[str, Any] = {}
    for model in (StoredEvent, Chunk):
        schema = model.model_json_schema(ref_template=ref_template)
        out.update(schema.pop("$defs", {}))  # EventType
        out[model.__name__] = schema
    out["ServerSentEvent"] = SERVER_SENT_EVENT
    return out
