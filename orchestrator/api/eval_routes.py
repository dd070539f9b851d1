"""The eval routes under ``/v1``: store an eval's record, list them, read one back.

An eval's record (:mod:`orchestrator.evaluation.spec`) is what ``conclave eval run`` measures —
its items, its arms and each arm's plan template — stored once per name in the caller's tenant,
so a report (and a page) can be rebuilt from the database alone; the eval's plans are ordinary
plans (``/v1/plans?label=eval=<name>``). Tenancy is the plans': ``plans:write`` stores,
``plans:read`` reads, and another tenant's eval is a 404. A record is checked before it is
stored — its shape, spec, items, and each arm's plan filled with its first item — and a wrong
one is a 422 naming the field (``spec.items[3].answer``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from orchestrator.api import inputs as inp
from orchestrator.api.auth import require
from orchestrator.api.schemas import EVAL_BODY, EvalBody, EvalList, EvalStored, EvalView, errors
from orchestrator.client.local import LocalBackend
from orchestrator.control.eval_records import MAX_EVAL_BYTES, EvalRecords, check_name
from orchestrator.core.errors import InvalidEval, InvalidRequest, UnsupportedMediaType
from orchestrator.evaluation.spec import check_record
from storage.evals import MAX_LISTED
from storage.identity import READ, WRITE, Principal

#: a record of 10,000 items is some 250,000 JSON values
MAX_EVAL_NODES = 1_000_000


def _records(request: Request) -> EvalRecords:
    local: LocalBackend = request.app.state.local
    return local.evals


def evals_router() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["evals"])
    reader, writer = Depends(require(READ)), Depends(require(WRITE))

    @router.post("/evals", operation_id="create_eval", status_code=201, response_model=EvalStored,
                 openapi_extra={"requestBody": EVAL_BODY},
                 responses={200: {"model": EvalStored, "description": "already stored (same name, same record)"},
                            **errors(400, 401, 403, 409, 413, 415, 422, 503)})
    async def create_eval(request: Request, principal: Principal | None = writer) -> JSONResponse:
        """Store an eval's record under its name in the caller's tenant; the same record again
        answers 200 with the stored one, another record under a taken name 409."""
        kind = inp.media_type(request)
        if kind not in inp.JSON_TYPES:
            raise UnsupportedMediaType("send the eval as Content-Type: application/json",
                                       details=inp.field_error("Content-Type", f"unsupported media type "
                                                                               f"{(kind or 'none')[:80]!r}"))
        body = await inp.read_body(request, MAX_EVAL_BYTES)
        doc = await run_in_threadpool(inp.parse_document, body, kind, max_bytes=MAX_EVAL_BYTES,
                                      max_nodes=MAX_EVAL_NODES)
        given = _body(doc)
        check_name(given.name)
        await run_in_threadpool(_checked, given.spec)
        created = await run_in_threadpool(_records(request).create, given.name, given.spec, principal=principal)
        return JSONResponse({**created.eval.to_dict(), "created": created.created},
                            status_code=201 if created.created else 200,
                            headers={"Location": f"/v1/evals/{created.eval.name}"})

    @router.get("/evals", operation_id="list_evals", response_model=EvalList, responses=errors(401, 403, 422, 503))
    async def list_evals(request: Request, limit: int = Query(100, ge=1, le=MAX_LISTED),
                         principal: Principal | None = reader) -> JSONResponse:
        """The caller's evals (an admin's: every tenant's), newest first, without their records."""
        listed = await run_in_threadpool(_records(request).list_evals, principal=principal, limit=limit)
        return JSONResponse({"evals": [e.to_dict() for e in listed]})

    @router.get("/evals/{name}", operation_id="get_eval", response_model=EvalView,
                responses=errors(401, 403, 404, 409, 422, 503))
    async def get_eval(name: str, request: Request, principal: Principal | None = reader) -> JSONResponse:
        """One eval's record; its plans are `GET /v1/plans?label=eval=<name>`."""
        record = await run_in_threadpool(_records(request).get, check_name(name), principal=principal)
        return JSONResponse(record.to_dict())

    return router


def _body(doc: Any) -> EvalBody:
    if not isinstance(doc, dict):
        raise InvalidRequest("the body must be a JSON object {name, spec}",
                             details=inp.field_error("body", "not an object"))
    try:
        return EvalBody.model_validate(doc)
    except ValidationError as exc:
        details = [{"field": ".".join(str(p) for p in e["loc"]) or "body",
                    "message": "unknown field" if e["type"] == "extra_forbidden" else e["msg"]} for e in exc.errors()]
        raise InvalidRequest(f"{details[0]['field']}: {details[0]['message']}", details=details) from None


def _checked(spec: dict[str, Any]) -> None:
    """The record checked, its fields named from the body (``spec.items[3].answer``)."""
    try:
        check_record(spec)
    except InvalidEval as exc:
        details = [{**d, "field": f"spec.{d['field']}" if d.get("field") else "spec"}
                   for d in (exc.details or [{"field": "", "message": exc.message}])]
        raise InvalidEval(f"{details[0]['field']}: {details[0]['message']}", details=details) from exc
