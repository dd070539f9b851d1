"""The plan routes under ``/v1``: submit, list, read, patch, result and phase content
(with their briefing citations), the briefing's documents, resume, cancel, a what-if fork and
the diff of two plans, and the event stream (:mod:`orchestrator.api.events`).

Every route names the scope it needs (:func:`orchestrator.api.auth.require`) and hands
the caller's principal to the read side (:class:`~orchestrator.control.reads.PlanReads`),
which finds only the plans that principal may see (another tenant's plan is a 404), and to
the coordinator, which also records it on submit, patch, resume and cancel.

Each is a thin layer over the local backend (:class:`~orchestrator.client.local.LocalBackend`),
whose blocking calls run in the thread pool; bodies and path values are read through
:mod:`orchestrator.api.inputs`, so a client error always names its field.
"""


from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from orchestrator.api import inputs as inp
from orchestrator.api.auth import require, still_standing
from orchestrator.api.events import EventStreams
from orchestrator.api.schemas import (
    FORK_BODY,
    PATCH_BODY,
    PLAN_BODY,
    DocumentList,
    PhaseText,
    PlanPage,
    ResultText,
    Submitted,
    errors,
)
from orchestrator.api.stream_schema import EVENT_STREAM_PARAMETERS, EVENT_STREAM_RESPONSE
from orchestrator.briefing.documents import DocumentView
from orchestrator.client.local import LocalBackend
from orchestrator.control.coordinator import CancelResult, Coordinator, ForkResult, ResumeResult
from orchestrator.control.plan_query import PlanQuery, page_dict
from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import (
    CapacityExceeded,
    ConclaveError,
    InvalidPlan,
    InvalidRequest,
    NotReady,
    PhaseNotFound,
    PlanConflict,
    SubmitRateLimited,
    TenantBudgetExhausted,
)
from orchestrator.core.settings import Settings
from orchestrator.plan.plan_diff import Comparison
from orchestrator.plan.plan_text import SIZE_SETTING
from orchestrator.plan.schema import MAX_LABELS, TASK_ID_RE
from orchestrator.plan.views import PlanView
from storage.identity import DEFAULT_TENANT, READ, WRITE, Principal
from storage.listing import MAX_PAGE
from storage.status import PlanStatus

T = TypeVar("T")

SMALL_BODY = 64 * 1024  # resume/cancel bodies


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    retry_failed: bool = False


FORK_FIELDS = ("from", "overrides")


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


def _local(request: Request) -> LocalBackend:
    local: LocalBackend = request.app.state.local
    return local


def plans_router(settings: Settings) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["plans"])
    limit = settings.max_plan_bytes
    reader, writer = Depends(require(READ)), Depends(require(WRITE))

    @router.post("/plans", operation_id="submit_plan", status_code=201, response_model=Submitted,
                 openapi_extra={"requestBody": PLAN_BODY},
                 responses={200: {"model": Submitted, "description": "already submitted (same task_id, same plan)"},
                            **errors(400, 401, 402, 403, 409, 413, 415, 422, 429, 503)})
    async def submit_plan(request: Request, principal: Principal | None = writer) -> JSONResponse:
        """Store a plan (JSON or YAML; bare or as `{"plan": …}`) in the caller's tenant and start it.
        Idempotent per `task_id` within the tenant."""
        kind = inp.document_type(request)  # refused before the body is read
        body = await inp.read_body(request, limit, what="the plan", setting=SIZE_SETTING)
        doc = await run_in_threadpool(inp.parse_document, body, kind, max_bytes=limit)  # CPU: off the event loop
        plan = _unwrap(doc)
        try:
            res = await run_in_threadpool(_coordinator(request).submit, plan, principal=principal)
        except InvalidPlan as exc:
            raise InvalidPlan(exc.message, details=_name_fields(exc.details)) from exc
        except CapacityExceeded as exc:
            raise CapacityExceeded(exc.message, details=inp.field_error("body", "too many active plans")) from exc
        except (SubmitRateLimited, TenantBudgetExhausted):
            raise
        except PlanConflict as exc:  # same task_id, different plan
            raise PlanConflict(exc.message, details=inp.field_error(
                "task_id", "already submitted with a different plan")) from exc
        return JSONResponse({"plan_id": res.plan_id, "created": res.created, "enqueued": res.enqueued},
                            status_code=201 if res.created else 200,
                            headers={"Location": f"/v1/plans/{res.plan_id}"})

    @router.get("/plans", operation_id="list_plans", response_model=PlanPage, responses=errors(401, 403, 422, 503))
    async def list_plans(
        request: Request,
        status: list[PlanStatus] | None = Query(None, description="any of these statuses (repeatable)"),
        label: list[str] | None = Query(None, max_length=MAX_LABELS,
                                        description="plans carrying every one of these labels (repeatable)"),
        created_after: datetime | None = Query(None, description="ISO 8601; without a zone, UTC"),
        created_before: datetime | None = Query(None, description="ISO 8601; without a zone, UTC"),
        task_id: str | None = Query(None, min_length=1, max_length=200, pattern=TASK_ID_RE),
        limit: int = Query(50, ge=1, le=MAX_PAGE),
        cursor: str | None = Query(None, max_length=200, description="`next_cursor` of the previous page"),
        principal: Principal | None = reader,
    ) -> JSONResponse:
        """The caller's plans (an admin's: every tenant's), newest first, a page at a time."""
        query = PlanQuery.check(status=status, label=label, created_after=created_after,
                                created_before=created_before, task_id=task_id, limit=limit, cursor=cursor)
        page = await _call(_reads(request).list_plans, principal=principal, **query.as_filters())
        return JSONResponse(page_dict(page))

    @router.get("/plans/{plan_id}", operation_id="get_plan", response_model=PlanView,
                responses=errors(401, 403, 404, 422, 503))
    async def get_plan(plan_id: str, request: Request, principal: Principal | None = reader) -> JSONResponse:
        """The plan view: status, phases, usage (by plan id or task id)."""
        view = await _call(_reads(request).view, inp.plan_ref(plan_id), principal=principal)
        return JSONResponse(view.to_dict())

    @router.patch("/plans/{plan_id}", operation_id="update_plan", response_model=PlanView,
                  openapi_extra={"requestBody": PATCH_BODY},
                  responses=errors(400, 401, 403, 404, 409, 413, 415, 422, 503))
    async def update_plan(plan_id: str, request: Request, principal: Principal | None = writer) -> JSONResponse:
        """Change `title`, `labels` or (while the plan runs) `max_debates` and `priority` (-2..2). Omitted fields stay;
        `null` clears `labels` and is refused for the others; the merged plan is validated again."""
        ref = inp.plan_ref(plan_id)
        data = inp.parse_json_object(await inp.read_body(request, SMALL_BODY), inp.media_type(request))
        plan = await _call(_coordinator(request).update, ref, data, principal=principal)
        view = await _call(_reads(request).view, plan.id, principal=principal)
        return JSONResponse(view.to_dict())

    @router.get("/plans/{plan_id}/result", operation_id="get_result", response_model=ResultText,
                responses=errors(401, 403, 404, 409, 422, 503))
    async def get_result(plan_id: str, request: Request, principal: Principal | None = reader) -> JSONResponse:
        """The full text of the plan's final phase (synthesis or final summary)."""
        reads = _reads(request)
        plan = await _call(reads.get_plan, inp.plan_ref(plan_id), principal=principal)
        text = await _call(reads.result_text, plan.id, principal=principal)
        if text is None:
            raise NotReady(f"plan {plan.id} has no result yet (it is {plan.status})",
                           details=inp.field_error("plan_id", f"plan is {plan.status}"))
        cited = await _call(reads.citations, plan.id, text)
        return JSONResponse({"plan_id": plan.id, "status": plan.status, "text": text,
                             "citations": [c.to_dict() for c in cited]})

    @router.get("/plans/{plan_id}/phases/{key}/content", operation_id="get_phase_content", response_model=PhaseText,
                responses=errors(401, 403, 404, 409, 422, 503))
    async def get_phase_content(plan_id: str, key: str, request: Request,
                                principal: Principal | None = reader) -> JSONResponse:
        """The full text of one phase."""
        reads = _reads(request)
        state = await _call(reads.state, inp.plan_ref(plan_id), principal=principal)
        phase = state.by_key().get(inp.phase_key(key))
        if phase is None:
            raise PhaseNotFound(f"plan {state.plan.id} has no phase {key!r}",
                                details=inp.field_error("key", "no such phase"))
        text = await _call(reads.phase_text, state.plan.id, phase.key)
        if text is None:
            raise NotReady(f"phase {phase.key} has no text (it is {phase.status})",
                           details=inp.field_error("key", f"phase is {phase.status}"))
        cited = await _call(reads.citations, state.plan.id, text)
        return JSONResponse({"plan_id": state.plan.id, "phase": phase.key, "status": phase.status, "text": text,
                             "citations": [c.to_dict() for c in cited]})

    @router.get("/plans/{plan_id}/documents", operation_id="list_documents", response_model=DocumentList,
                responses=errors(401, 403, 404, 422, 503))
    async def list_documents(plan_id: str, request: Request, principal: Principal | None = reader) -> JSONResponse:
        """The plan's briefing documents, in briefing order (an empty list for a plan without one)."""
        docs = await _call(_reads(request).documents, inp.plan_ref(plan_id), principal=principal)
        return JSONResponse({"documents": [asdict(d) for d in docs]})

    @router.get("/plans/{plan_id}/documents/{doc_id}", operation_id="get_document", response_model=DocumentView,
                responses=errors(401, 403, 404, 422, 503))
    async def get_document(plan_id: str, doc_id: str, request: Request,
                           principal: Principal | None = reader) -> JSONResponse:
        """One briefing document: its text and each chunk's heading path and `start`/`end`
        (UTF-16 code units into `text`, so `text.slice(start, end)` is the passage)."""
        ref, doc = inp.plan_ref(plan_id), inp.doc_id(doc_id)
        view = await _call(_reads(request).document, ref, doc, principal=principal)
        return JSONResponse(view.to_dict())

    @router.post("/plans/{plan_id}/resume", operation_id="resume_plan", response_model=ResumeResult,
                 openapi_extra={"requestBody": {"required": False, "content": {"application/json": {
                     "schema": ResumeBody.model_json_schema()}}}},
                 responses=errors(400, 401, 403, 404, 409, 413, 415, 422, 503))
    async def resume_plan(plan_id: str, request: Request, principal: Principal | None = writer) -> JSONResponse:
        """Re-enqueue exactly what is still pending (`retry_failed`: failed phases too)."""
        ref = inp.plan_ref(plan_id)
        data = inp.parse_json_object(await inp.read_body(request, SMALL_BODY), inp.media_type(request))
        try:
            body = ResumeBody.model_validate(data)
        except ValidationError as exc:
            details = [{"field": ".".join(str(p) for p in e["loc"]) or "body",
                        "message": "unknown field" if e["type"] == "extra_forbidden" else e["msg"]}
                       for e in exc.errors()]
            raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}", details=details) from None
        res = await _call(_coordinator(request).resume, ref, retry_failed=body.retry_failed, principal=principal)
        return JSONResponse(asdict(res))

    @router.post("/plans/{plan_id}/cancel", operation_id="cancel_plan", response_model=CancelResult,
                 responses=errors(401, 403, 404, 422, 503))
    async def cancel_plan(plan_id: str, request: Request, principal: Principal | None = writer) -> JSONResponse:
        """Cancel: queued phases never run, running ones stop at their next safe point."""
        res = await _call(_coordinator(request).cancel, inp.plan_ref(plan_id), principal=principal)
        return JSONResponse(asdict(res))

    @router.post("/plans/{plan_id}/fork", operation_id="fork_plan", status_code=201, response_model=ForkResult,
                 openapi_extra={"requestBody": FORK_BODY},
                 responses={200: {"model": ForkResult, "description": "already forked (same task_id, same plan)"},
                            **errors(400, 401, 402, 403, 404, 409, 413, 415, 422, 429, 503)})
    async def fork_plan(plan_id: str, request: Request, principal: Principal | None = writer) -> JSONResponse:
        """A what-if fork: a new plan of the caller's tenant, `overrides` (a partial plan) merged over
        the source's, whose phases before `from` are copied from the source where what they would be
        sent is unchanged (their contents shared, no cost) and whose other phases run."""
        ref = inp.plan_ref(plan_id)
        data = inp.parse_json_object(await inp.read_body(request, limit, what="the fork", setting=SIZE_SETTING),
                                     inp.media_type(request))
        unknown = sorted(set(data) - set(FORK_FIELDS))
        if unknown:
            raise InvalidRequest(f"{unknown[0]}: unknown field (a fork is {{\"from\": PHASE, \"overrides\": {{…}}}})",
                                 details=[{"field": k, "message": "unknown field"} for k in unknown])
        if "from" not in data:
            raise InvalidRequest("from: the phase the fork runs anew from is required (e.g. \"r2\")",
                                 details=inp.field_error("from", "required"))
        try:
            res = await _call(_coordinator(request).fork, ref, data["from"], data.get("overrides"),
                              principal=principal)
        except CapacityExceeded as exc:
            raise CapacityExceeded(exc.message, details=inp.field_error("body", "too many active plans")) from exc
        except (SubmitRateLimited, TenantBudgetExhausted, NotReady):
            raise
        except PlanConflict as exc:  # its task_id was forked before with a different plan
            raise PlanConflict(exc.message, details=inp.field_error(
                "overrides.task_id", "already submitted with a different plan")) from exc
        return JSONResponse(asdict(res), status_code=201 if res.created else 200,
                            headers={"Location": f"/v1/plans/{res.plan_id}"})

    @router.get("/plans/{plan_id}/diff/{other}", operation_id="diff_plans", response_model=Comparison,
                responses=errors(401, 403, 404, 422, 503))
    async def diff_plans(plan_id: str, other: str, request: Request,
                         principal: Principal | None = reader) -> JSONResponse:
        """Two plans side by side: their decision records, the final texts' line diff, which phases each
        reused or ran, and their cost (a plan of another tenant is a 404, as on every route)."""
        a, b = inp.plan_ref(plan_id), _other_ref(other)
        found = await _call(_reads(request).diff, a, b, principal=principal)
        return JSONResponse(found.to_dict())

    @router.get("/plans/{plan_id}/events", operation_id="stream_events", response_class=StreamingResponse,
                openapi_extra={"parameters": EVENT_STREAM_PARAMETERS},
                responses={200: EVENT_STREAM_RESPONSE, **errors(401, 403, 404, 422, 429, 503)})
    async def stream_events(plan_id: str, request: Request, principal: Principal | None = reader) -> StreamingResponse:
        """The plan's stored events (resume with `Last-Event-ID` or `?after=`) and live text chunks."""
        ref = inp.plan_ref(plan_id)
        after = inp.event_id(request.headers.get("last-event-id"), "Last-Event-ID")
        if after is None:
            after = inp.event_id(request.query_params.get("after"), "after") or 0
        plan = await _call(_reads(request).get_plan, ref, principal=principal)  # 404 before the stream
        streams: EventStreams = request.app.state.streams
        slot = streams.reserve(principal.tenant if principal is not None else DEFAULT_TENANT)
        return StreamingResponse(streams.stream(plan.id, after, slot, still_standing(request.app, principal)),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                                 background=BackgroundTask(slot.release))

    return router


def _other_ref(value: str) -> str:
    """The second plan of a diff, named ``other`` in errors."""
    try:
        return inp.plan_ref(value)
    except InvalidRequest:
        raise InvalidRequest("other must be a plan id or task_id (1-200 letters, digits, '_.:-')",
                             details=inp.field_error("other", "malformed id")) from None


def _coordinator(request: Request) -> Coordinator:
    return _local(request).coordinator


def _reads(request: Request) -> PlanReads:
    return _local(request).reads


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

