"""The webhook routes under ``/v1``: register an endpoint, list, read, rotate and delete
them, and read an endpoint's deliveries.

Scope ``webhooks`` (or ``admin``); tenancy is the plans': a principal reaches only its
tenant's endpoints, another tenant's answers 404 (:mod:`orchestrator.webhooks.endpoints`).
The signing secret is in the answer to a registration and to a rotation, and in no other
answer. A wrong body is a 422 naming the field (``url`` refused by the operator's allowlist
or the address rules, ``events[1]``, …).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from orchestrator.api import inputs as inp
from orchestrator.api.auth import require
from orchestrator.api.schemas import errors
from orchestrator.client.local import LocalBackend
from orchestrator.core.errors import InvalidWebhook
from orchestrator.webhooks.endpoints import (
    MAX_DESCRIPTION,
    MAX_ROTATION_GRACE,
    ROTATION_GRACE,
    WebhookEndpoints,
    delivery_cursor,
)
from storage.identity import WEBHOOKS, Principal
from storage.status import DeliveryStatus
from storage.webhook_outbox import MAX_LISTED

SMALL_BODY = 64 * 1024


class WebhookBody(BaseModel):
    """``POST /v1/webhooks``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str = Field(description="http(s) URL within the operator's CONCLAVE_WEBHOOK_URLS",
                     examples=["https://hooks.example.com/conclave"])
    events: list[str] = Field(description="`input_requested`, `awaiting_approval`, `plan_finished`, or `[\"*\"]` "
                                          "for every type (types added later included)",
                              examples=[["plan_finished", "awaiting_approval"], ["*"]])
    description: str | None = Field(None, max_length=MAX_DESCRIPTION, examples=["ops pager"])


class RotateBody(BaseModel):
    """``POST /v1/webhooks/{webhook_id}/rotate``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    previous_secret_valid_for: int = Field(
        int(ROTATION_GRACE.total_seconds()), ge=0, le=int(MAX_ROTATION_GRACE.total_seconds()),
        description="seconds the previous secret still signs deliveries beside the new one (0: it stops at once)")


class Webhook(BaseModel):
    id: str
    tenant: str
    url: str
    events: list[str]
    description: str | None
    secret_version: int
    previous_secret_valid_until: str | None = Field(description="the previous secret signs too until then")
    created_by: dict[str, Any] | None = Field(description="`{id, name}` of the principal who registered it")
    created_at: str
    rotated_at: str | None


class WebhookWithSecret(Webhook):
    secret: str = Field(description="the signing secret (`whsec_…`): shown only in this answer, stored nowhere")


class WebhookList(BaseModel):
    webhooks: list[Webhook] = Field(description="oldest first")


class WebhookDeleted(BaseModel):
    id: str
    deleted: bool


class Delivery(BaseModel):
    id: str = Field(description="what `Conclave-Delivery` says: the idempotency key")
    endpoint_id: str
    event_id: int
    event_type: str
    plan_id: str
    task_id: str | None
    phase: str | None
    status: DeliveryStatus
    attempts: int
    next_attempt_at: str | None = Field(description="when it is tried next (null once delivered or failed)")
    last_attempt_at: str | None
    last_status_code: int | None
    last_error: str | None = Field(description="why the last attempt failed, in Conclave's words (never the "
                                               "receiver's body)")
    delivered_at: str | None
    created_at: str


class DeliveryList(BaseModel):
    deliveries: list[Delivery] = Field(description="newest event first")
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")


def _endpoints(request: Request) -> WebhookEndpoints:
    local: LocalBackend = request.app.state.local
    return local.webhooks


def _body(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [{"field": ".".join(str(p) for p in e["loc"]) or "body",
                    "message": "unknown field" if e["type"] == "extra_forbidden" else e["msg"]} for e in exc.errors()]
        raise InvalidWebhook(f"{details[0]['field']}: {details[0]['message']}", details=details) from None


def webhooks_router() -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["webhooks"])
    manager = Depends(require(WEBHOOKS))

    @router.post("/webhooks", operation_id="create_webhook", status_code=201, response_model=WebhookWithSecret,
                 openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                     "schema": WebhookBody.model_json_schema(),
                     "example": {"url": "https://hooks.example.com/conclave", "events": ["plan_finished"],
                                 "description": "ops pager"}}}}},
                 responses=errors(400, 401, 403, 409, 413, 415, 422, 503))
    async def create_webhook(request: Request, principal: Principal | None = manager) -> JSONResponse:
        """Register an endpoint in the caller's tenant; the answer holds its signing secret, once."""
        data = inp.parse_json_object(await inp.read_body(request, SMALL_BODY), inp.media_type(request))
        body = _body(WebhookBody, data)
        made = await run_in_threadpool(_endpoints(request).create, body.url, body.events, description=body.description,
                                       principal=principal)
        return JSONResponse(made.to_dict(), status_code=201, headers={"Location": f"/v1/webhooks/{made.endpoint.id}",
                                                                      "Cache-Control": "no-store"})

    @router.get("/webhooks", operation_id="list_webhooks", response_model=WebhookList,
                responses=errors(401, 403, 503))
    async def list_webhooks(request: Request, principal: Principal | None = manager) -> JSONResponse:
        """The caller's endpoints (an admin's: every tenant's), without secrets."""
        found = await run_in_threadpool(_endpoints(request).list_endpoints, principal=principal)
        return JSONResponse({"webhooks": [e.to_dict() for e in found]})

    @router.get("/webhooks/{webhook_id}", operation_id="get_webhook", response_model=Webhook,
                responses=errors(401, 403, 404, 422, 503))
    async def get_webhook(webhook_id: str, request: Request, principal: Principal | None = manager) -> JSONResponse:
        """One endpoint, without its secret."""
        found = await run_in_threadpool(_endpoints(request).get, webhook_id, principal=principal)
        return JSONResponse(found.to_dict())

    @router.delete("/webhooks/{webhook_id}", operation_id="delete_webhook", response_model=WebhookDeleted,
                   responses=errors(401, 403, 404, 422, 503))
    async def delete_webhook(webhook_id: str, request: Request, principal: Principal | None = manager) -> JSONResponse:
        """Delete an endpoint and its deliveries: nothing more is sent to it."""
        gone = await run_in_threadpool(_endpoints(request).delete, webhook_id, principal=principal)
        return JSONResponse({"id": gone.id, "deleted": True})

    @router.post("/webhooks/{webhook_id}/rotate", operation_id="rotate_webhook_secret",
                 response_model=WebhookWithSecret,
                 openapi_extra={"requestBody": {"required": False, "content": {"application/json": {
                     "schema": RotateBody.model_json_schema()}}}},
                 responses=errors(400, 401, 403, 404, 409, 413, 415, 422, 503))
    async def rotate_webhook_secret(webhook_id: str, request: Request,
                                    principal: Principal | None = manager) -> JSONResponse:
        """A new signing secret (in this answer, once); the previous one still signs for
        `previous_secret_valid_for` seconds (default a day) so the receiver can switch."""
        data = inp.parse_json_object(await inp.read_body(request, SMALL_BODY), inp.media_type(request))
        body = _body(RotateBody, data)
        made = await run_in_threadpool(_endpoints(request).rotate, webhook_id,
                                       previous_for=timedelta(seconds=body.previous_secret_valid_for),
                                       principal=principal)
        return JSONResponse(made.to_dict(), headers={"Cache-Control": "no-store"})

    @router.get("/webhooks/{webhook_id}/deliveries", operation_id="list_webhook_deliveries",
                response_model=DeliveryList, responses=errors(401, 403, 404, 422, 503))
    async def list_webhook_deliveries(
        webhook_id: str, request: Request,
        status: DeliveryStatus | None = Query(None, description="only deliveries in this status"),
        limit: int = Query(50, ge=1, le=MAX_LISTED),
        cursor: str | None = Query(None, max_length=20, description="`next_cursor` of the previous page"),
        principal: Principal | None = manager,
    ) -> JSONResponse:
        """What became of the endpoint's deliveries: attempts, the last status code or error, the next retry."""
        before = delivery_cursor(cursor)
        page = await run_in_threadpool(_endpoints(request).deliveries, webhook_id, status=status, limit=limit,
                                       before=before, principal=principal)
        return JSONResponse({"deliveries": [d.to_dict() for d in page.deliveries],
                             "next_cursor": None if page.next_cursor is None else str(page.next_cursor)})

    return router
