"""The routes of people at the table, under ``/v1`` (scope ``plans:write``, tenant-scoped like
every route: another tenant's plan is a 404):

    POST /v1/plans/{id}/phases/{key}/input   a person's answer to their seat (idempotent by key)
    POST /v1/plans/{id}/approve              approve the draft: the plan completes with it
    POST /v1/plans/{id}/send-back            send the draft back once, with a note
    POST /v1/plans/{id}/steer                a note for the phases still to start

Thin over the coordinator's commands (:mod:`orchestrator.control.people`), which record the
caller's principal (never a token) and refuse with stable codes: ``phase.not_waiting``,
``plan.not_awaiting_approval``, ``plan.already_revised``, ``plan.not_running``,
``plan.too_many_notes`` (409, the status in ``details``). The plan page posts the same
commands through its own forms (:mod:`orchestrator.api.ui.actions`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.api import inputs as inp
from orchestrator.api.auth import require
from orchestrator.api.plan_routes import SMALL_BODY, _call, _coordinator
from orchestrator.api.schemas import errors
from orchestrator.control.people import (
    IDEMPOTENCY_KEY_MAX,
    AnswerResult,
    ApprovalResult,
    SendBackResult,
    SteerResult,
)
from orchestrator.core.errors import InvalidRequest
from orchestrator.plan.human import MAX_ANSWER_CHARS, MAX_NOTE_CHARS
from storage.identity import WRITE, Principal

ANSWER_BODY = 4 * MAX_ANSWER_CHARS + 4096  # the answer's characters, in UTF-8 at worst, and the JSON around them


class AnswerBody(BaseModel):
    """``POST …/phases/{key}/input``: the person's answer."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description=f"the answer, 1 to {MAX_ANSWER_CHARS} characters; in a plan that declares its "
                                  "`answer:`, its last line may be the verdict (`Verdict: {\"answer\": …, "
                                  "\"confidence\": …, \"reason\": …}`) — without one the seat abstains")
    idempotency_key: str | None = Field(
        None, description=f"the client's key for this answer (1-{IDEMPOTENCY_KEY_MAX} printable ASCII): sent again, "
                          "the stored outcome is returned (`replayed`); the `Idempotency-Key` header does the same")


class NoteBody(BaseModel):
    """``POST …/send-back`` and ``POST …/steer``: a note for the experts."""

    model_config = ConfigDict(extra="forbid", strict=True)

    note: str = Field(description=f"1 to {MAX_NOTE_CHARS} characters, given to the experts with who sent it")


def _body(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [{"field": ".".join(str(p) for p in e["loc"]) or "body",
                    "message": "unknown field" if e["type"] == "extra_forbidden" else e["msg"]}
                   for e in exc.errors()]
        raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}", details=details) from None


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}


def people_router() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["plans"])
    writer = Depends(require(WRITE))

    @router.post("/plans/{plan_id}/phases/{key}/input", operation_id="answer_seat", response_model=AnswerResult,
                 openapi_extra={"requestBody": _json_body(AnswerBody)},
                 responses=errors(400, 401, 403, 404, 409, 413, 415, 422, 503))
    async def answer_seat(plan_id: str, key: str, request: Request,
                          principal: Principal | None = writer) -> JSONResponse:
        """A person's answer to their seat (a phase `awaiting_input`): stored like a model's turn, then
        the plan moves on. 409 `phase.not_waiting` when the seat does not wait for it (not asked yet,
        answered, past its deadline, cancelled); the same idempotency key again returns the stored answer."""
        ref, phase = inp.plan_ref(plan_id), inp.phase_key(key)
        data = inp.parse_json_object(await inp.read_body(request, ANSWER_BODY), inp.media_type(request))
        body = _body(AnswerBody, data)
        header = request.headers.get("idempotency-key")
        if header is not None and body.idempotency_key is not None and header != body.idempotency_key:
            raise InvalidRequest("Idempotency-Key: differs from the body's idempotency_key",
                                 details=inp.field_error("Idempotency-Key", "two different keys"))
        res = await _call(_coordinator(request).answer, ref, phase, body.text,
                          idempotency_key=body.idempotency_key if body.idempotency_key is not None else header,
                          principal=principal)
        return JSONResponse(asdict(res))

    @router.post("/plans/{plan_id}/approve", operation_id="approve_plan", response_model=ApprovalResult,
                 responses=errors(401, 403, 404, 409, 422, 503))
    async def approve_plan(plan_id: str, request: Request, principal: Principal | None = writer) -> JSONResponse:
        """Approve the plan's draft (a plan `awaiting_approval`): it completes with the draft as its result.
        409 `plan.not_awaiting_approval` otherwise (a cancel that got there first wins)."""
        res = await _call(_coordinator(request).approve, inp.plan_ref(plan_id), principal=principal)
        return JSONResponse(asdict(res))

    @router.post("/plans/{plan_id}/send-back", operation_id="send_back_plan", response_model=SendBackResult,
                 openapi_extra={"requestBody": _json_body(NoteBody)},
                 responses=errors(400, 401, 403, 404, 409, 413, 415, 422, 503))
    async def send_back_plan(plan_id: str, request: Request, principal: Principal | None = writer) -> JSONResponse:
        """Send the draft back once with a note: its expert rewrites it, then it waits for approval
        again. 409 `plan.already_revised` for a second send-back."""
        ref = inp.plan_ref(plan_id)
        body = _body(NoteBody, inp.parse_json_object(await inp.read_body(request, SMALL_BODY), inp.media_type(request)))
        res = await _call(_coordinator(request).send_back, ref, body.note, principal=principal)
        return JSONResponse(asdict(res))

    @router.post("/plans/{plan_id}/steer", operation_id="steer_plan", response_model=SteerResult,
                 openapi_extra={"requestBody": _json_body(NoteBody)},
                 responses=errors(400, 401, 403, 404, 409, 413, 415, 422, 503))
    async def steer_plan(plan_id: str, request: Request, principal: Principal | None = writer) -> JSONResponse:
        """A note for the running meeting: every phase that starts from now on is given it (a board's
        next round, a team's next phases); a phase already running is not changed."""
        ref = inp.plan_ref(plan_id)
        body = _body(NoteBody, inp.parse_json_object(await inp.read_body(request, SMALL_BODY), inp.media_type(request)))
        res = await _call(_coordinator(request).steer, ref, body.note, principal=principal)
        return JSONResponse(asdict(res))

    return router
