"""The plan routes under ``/v1``: submit, read, result and phase content, resume,
cancel, and the event stream (:mod:`orchestrator.api.events`).

Each is a thin layer over :class:`~orchestrator.client.Conclave`, whose blocking
calls run in the thread pool; bodies and path values are read through
:mod:`orchestrator.api.inputs`, so a client error always names its field.
"""


from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.concurrency import run_in_threadpool

from orchestrator.api import inputs as inp
from orchestrator.api.events import EventStreams
from orchestrator.client import Conclave
from orchestrator.errors import (
    CapacityExceeded,
    ConclaveError,
    InvalidPlan,
    InvalidRequest,
    NotReady,
    PhaseNotFound,
    PlanConflict,
)
from orchestrator.settings import Settings

T = TypeVar("T")

SMALL_BODY = 64 * 1024  # resume/cancel bodies


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    retry_failed: bool = False


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call in the thread pool. A client error that names no
    field (no such plan, a resume in progress, …) is about ``plan_id``."""
    try:
        return await run_in_threadpool(fn, *args, **kwargs)
    except ConclaveError as exc:
        if exc.details is None and 400 <= exc.http_status < 500:
            raise type(exc)(exc.message, details=inp.field_error("plan_id", _ABOUT.get(exc.code, exc.code))
                            ) from exc
        raise


_ABOUT = {"plan.not_found": "no plan with this id or task_id",
          "plan.resume_in_progress": "another resume of this plan holds its guard; retry shortly"}


def _client(request: Request) -> Conclave:
    c: Conclave = request.app.state.client
    return c


def plans_router(settings: Settings) -> APIRouter:
    router = APIRouter(prefix="/v1")
    limit = settings.max_plan_bytes

    @router.post("/plans")
    async def submit_plan(request: Request) -> JSONResponse:
        kind = inp.document_type(request)  # refused before the body is read
        doc = inp.parse_document(await inp.read_body(request, limit), kind, max_bytes=limit)
        plan = _unwrap(doc)
        try:
            res = await run_in_threadpool(_client(request).coordinator.submit, plan)
        except InvalidPlan as exc:
            raise InvalidPlan(exc.message, details=_name_fields(exc.details)) from exc
        except CapacityExceeded as exc:
            raise CapacityExceeded(exc.message, details=inp.field_error("body", "too many active plans")) from exc
        except PlanConflict as exc:  # same task_id, different plan
            raise PlanConflict(exc.message, details=inp.field_error(
                "task_id", "already submitted with a different plan")) from exc
        return JSONResponse({"plan_id": res.plan_id, "created": res.created, "enqueued": res.enqueued},
                            status_code=201 if res.created else 200,
                            headers={"Location": f"/v1/plans/{res.plan_id}"})

    @router.get("/plans/{plan_id}")
    async def get_plan(plan_id: str, request: Request) -> JSONResponse:
        view = await _call(_client(request).get, inp.plan_ref(plan_id))
        return JSONResponse(view.to_dict())

    @router.get("/plans/{plan_id}/result")
    async def get_result(plan_id: str, request: Request) -> JSONResponse:
        coordinator = _client(request).coordinator
        plan = await _call(coordinator.get_plan, inp.plan_ref(plan_id))
        text = await _call(coordinator.result_text, plan.id)
        if text is None:
            raise NotReady(f"plan {plan.id} has no result yet (it is {plan.status})",
                           details=inp.field_error("plan_id", f"plan is {plan.status}"))
        return JSONResponse({"plan_id": plan.id, "status": plan.status, "text": text})

    @router.get("/plans/{plan_id}/phases/{key}/content")
    async def get_phase_content(plan_id: str, key: str, request: Request) -> JSONResponse:
        coordinator = _client(request).coordinator
        state = await _call(coordinator.state, inp.plan_ref(plan_id))
        phase = state.by_key().get(inp.phase_key(key))
        if phase is None:
            raise PhaseNotFound(f"plan {state.plan.id} has no phase {key!r}",
                                details=inp.field_error("key", "no such phase"))
        text = await _call(coordinator.phase_text, state.plan.id, phase.key)
        if text is None:
            raise NotReady(f"phase {phase.key} has no text (it is {phase.status})",
                           details=inp.field_error("key", f"phase is {phase.status}"))
        return JSONResponse({"plan_id": state.plan.id, "phase": phase.key, "status": phase.status, "text": text})

    @router.post("/plans/{plan_id}/resume")
    async def resume_plan(plan_id: str, request: Request) -> JSONResponse:
        ref = inp.plan_ref(plan_id)
        data = inp.parse_json_object(await inp.read_body(request, SMALL_BODY), inp.media_type(request))
        try:
            body = ResumeBody.model_validate(data)
        except ValidationError as exc:
            details = [{"field": ".".join(str(p) for p in e["loc"]) or "body",
                        "message": "unknown field" if e["type"] == "extra_forbidden" else e["msg"]}
                       for e in exc.errors()]
            raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}", details=details) from None
        res = await _call(_client(request).resume, ref, retry_failed=body.retry_failed)
        return JSONResponse(asdict(res))

    @router.post("/plans/{plan_id}/cancel")
    async def cancel_plan(plan_id: str, request: Request) -> JSONResponse:
        res = await _call(_client(request).cancel, inp.plan_ref(plan_id))
        return JSONResponse(asdict(res))

    @router.get("/plans/{plan_id}/events")
    async def plan_events(plan_id: str, request: Request) -> StreamingResponse:
        ref = inp.plan_ref(plan_id)
        after = inp.event_id(request.headers.get("last-event-id"), "Last-Event-ID")
        if after is None:
            after = inp.event_id(request.query_params.get("after"), "after") or 0
        plan = await _call(_client(request).coordinator.get_plan, ref)  # 404 before the stream starts
        streams: EventStreams = request.app.state.streams
        streams.check_capacity()
        return StreamingResponse(streams.stream(plan.id, after), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return router


def _unwrap(doc: Any) -> dict[str, Any]:
    """``{"plan": {...}}`` → the plan; a bare plan stays as it is."""
    if isinstance(doc, dict) and "plan" in doc and "kind" not in doc:
        extra = sorted(k for k in doc if k != "plan")
        if extra:
            raise InvalidRequest(f"{extra[0]}: unknown field (the body is a plan or {{\"plan\": …}})",
                                 details=[{"field": k, "message": "unknown field"} for k in extra])
        doc = doc["plan"]
    if not isinstance(doc, dict):
        raise InvalidRequest("the plan must be an object with a 'kind' of 'board' or 'team'",
                             details=inp.field_error("body", "not an object"))
    return doc


def _name_fields(details: Any) -> Any:
    """Plan errors about the whole document name ``kind`` (a bad or missing tag) or ``body``."""
    if not isinstance(details, list):
        return inp.field_error("body", "invalid plan")
    return [{**d, "field": d.get("field") or ("kind" if "'kind'" in str(d.get("message")) else "body")}
            for d in details]

