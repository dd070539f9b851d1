"""The HTTP API (FastAPI): ``create_app(settings)``, served by ``conclave api``.

    POST /v1/plans                            submit (JSON, ``{"plan": …}`` or YAML)
    GET  /v1/plans/{id}                       the PlanView (id or task_id)
    GET  /v1/plans/{id}/result                the final phase's full text
    GET  /v1/plans/{id}/phases/{key}/content  one phase's full text
    POST /v1/plans/{id}/resume                ``{"retry_failed": bool}`` (optional)
    POST /v1/plans/{id}/cancel
    GET  /v1/plans/{id}/events                Server-Sent Events (see :mod:`orchestrator.api.events`)
    GET  /healthz, /readyz, /metrics          (see :mod:`orchestrator.api.ops`)
    GET  /openapi.json, /docs, /redoc         the contract and its pages (no token; no CDN)

A thin layer over :class:`~orchestrator.client.conclave.Conclave`: every answer is derived
from the database, so any number of API processes can serve the same cluster.
Errors are JSON and never 500 for anything a client sends (see
:mod:`orchestrator.api.error_responses`, :mod:`orchestrator.api.inputs`). The reference is
``docs/api.md``.

One module per idea: :mod:`~orchestrator.api.app` (the factory),
:mod:`~orchestrator.api.plan_routes` (plan routes), :mod:`~orchestrator.api.auth`,
:mod:`~orchestrator.api.inputs` (reading requests), :mod:`~orchestrator.api.error_responses`,
:mod:`~orchestrator.api.events` (the event stream), :mod:`~orchestrator.api.ops`,
:mod:`~orchestrator.api.schemas` and :mod:`~orchestrator.api.stream_schema` (the published contract),
:mod:`~orchestrator.api.docs_pages` (its pages).
"""

from orchestrator.api.app import create_app

__all__ = ["create_app"]
