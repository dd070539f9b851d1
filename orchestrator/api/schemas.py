"""The API's published contract: the response bodies of every route and the plan
document a submit takes, as ``/openapi.json`` serves them (clients can be generated).

Routes answer with the same dataclasses the Python API returns (:class:`PlanView`,
:class:`ResumeResult`, …) serialised as JSON; the models here name the shapes that
exist only over HTTP. The plan document's schema is pydantic's, of the same models
that validate a submitted plan (:mod:`orchestrator.plan.schema`), so the contract cannot
drift from what the server accepts. The event stream's frames are described in
:mod:`orchestrator.api.stream_schema`.

Every operation has a stable ``operationId`` (``submit_plan``, ``stream_events``, …), set
on its route: a generated client's method names are part of the contract
(``tests/unit/test_openapi_document.py`` holds them).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from orchestrator.api.stream_schema import stream_components
from orchestrator.briefing.documents import CitationView, DocumentSummary
from orchestrator.plan.schema import PlanSpec, PlanUpdate
from storage.listing import PlanSummary
from storage.status import PhaseStatus, PlanStatus


class FieldProblem(BaseModel):
    field: str = Field(description="the field that is wrong, e.g. `experts[1].model`; `body` for the whole body")
    message: str


class ErrorDetail(BaseModel):
    code: str = Field(description="stable, e.g. `plan.invalid`, `auth.forbidden`")
    message: str
    details: list[FieldProblem] | dict[str, Any] | None = Field(
        description="the fields that are wrong, or facts such as `retry_after` / `request_id`")


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    checks: dict[str, Literal["ok"]] = Field(description="each dependency checked: `database`, `broker`")


class Submitted(BaseModel):
    plan_id: str
    created: bool = Field(description="false: this task_id was already submitted with the same plan")
    enqueued: list[str] = Field(description="keys of the phases sent to workers")


CITATIONS = ("every `[doc:chunk]` citation of a briefing passage in `text`, in text order (UTF-16 offsets); "
             "one of a passage that does not exist is `unresolved`")


class ResultText(BaseModel):
    plan_id: str
    status: PlanStatus
    text: str
    citations: list[CitationView] = Field(description=CITATIONS)


class PhaseText(BaseModel):
    plan_id: str
    phase: str
    status: PhaseStatus
    text: str
    citations: list[CitationView] = Field(description=CITATIONS)


class DocumentList(BaseModel):
    documents: list[DocumentSummary] = Field(description="the plan's briefing, in briefing order; "
                                                         "`length` in UTF-16 code units")


class PlanPage(BaseModel):
    plans: list[PlanSummary]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")


class EvalView(BaseModel):
    id: str
    tenant: str
    name: str
    spec: dict[str, Any] = Field(description="the eval's record: its spec, items, arms and each arm's plan template")
    created_at: str


class EvalStored(EvalView):
    created: bool = Field(description="false: this name already held this same record")


class EvalListed(BaseModel):
    id: str
    tenant: str
    name: str
    created_at: str


class EvalList(BaseModel):
    evals: list[EvalListed] = Field(description="newest first")


class EvalBody(BaseModel):
    """``POST /v1/evals``: an eval's name and its record (``conclave eval run`` builds it)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(description="1-59 lower-case letters, digits, `_` or `-`")
    spec: dict[str, Any] = Field(description="the resolved record: format, name, limit, spec, scoring, items, "
                                             "arms, judge")


class ForkBody(BaseModel):
    """``POST /v1/plans/{id}/fork``: the phase the fork runs anew from, and what changes."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: str = Field(alias="from", description="a phase key of the source plan (`r2.dana`, `synthesis`, …) or, "
                                                 "for a board, a round (`r2`): it and everything downstream run anew")
    overrides: dict[str, Any] | None = Field(
        None, description="a partial plan merged over the source's: mappings merge, `null` removes a key, lists of "
                          "mappings (`experts`, `phases`) merge item by item, other values replace; validated whole "
                          "(errors name `overrides.<field>`). `task_id` and `labels` are the fork's own.")


FORK_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ForkBody"}}},
}

EVAL_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EvalBody"}}},
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entry of a route for its error statuses: every error is JSON,
    whatever the route's own media type."""
    described = {400: "malformed body", 401: "missing, unknown or revoked token",
                 402: "the tenant's budget for the month is spent (`tenant.budget_exhausted`: `details` has the "
                      "budget, what was spent and the month)", 403: "the token lacks the scope",
                 404: "no such plan (or another tenant's)", 409: "conflict", 413: "body too large",
                 415: "unsupported media type", 422: "invalid input: `details` names each field",
                 429: "limit reached (`Retry-After`)",
                 503: "the database or the broker is unavailable (`service.unavailable`): retry later"}
    json_error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    return {s: {"description": described.get(s, "error"), "content": json_error} for s in statuses}


PLAN_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Plan"}},
        "application/yaml": {"schema": {"$ref": "#/components/schemas/Plan"}},
    },
}

PATCH_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PlanUpdate"}}},
}


def install_openapi(app: FastAPI) -> None:
    """Serve the routes' schema with the plan document's and the patch's added to its
    components (the routes read those bodies themselves, to accept YAML and to name
    every wrong field)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(stream_components("#/components/schemas/{model}"))
        components.update(ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}").pop("$defs"))
        components["ErrorResponse"] = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        components["ErrorResponse"].pop("$defs", None)
        for name, adapter in (("Plan", TypeAdapter(PlanSpec)), ("PlanUpdate", TypeAdapter(PlanUpdate)),
                              ("EvalBody", TypeAdapter(EvalBody)), ("ForkBody", TypeAdapter(ForkBody))):
            body = adapter.json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[name] = body
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
