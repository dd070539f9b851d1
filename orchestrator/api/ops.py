"""Operational routes: ``/healthz`` (the process is up), ``/readyz`` (the database
and the broker answer), ``/metrics`` (Prometheus text: the gauges of live plans and phases
of :mod:`orchestrator.metrics.live_gauges`, read from the database on every scrape through indexes
that skip history, so any API replica reports the same numbers at the same cost).

The probes need no token; ``/metrics`` needs the ``admin`` scope when authentication
is on (it counts every tenant's plans). None reveals more than counts and
``ok``/``unreachable`` (the reason is logged, not returned).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool

from orchestrator.api.auth import require
from orchestrator.api.error_responses import error_body
from orchestrator.api.schemas import Health, Ready, errors
from orchestrator.core.errors import storage_boundary
from orchestrator.metrics import FleetCollector
from storage import Database
from storage import plans as plans_repo
from storage.identity import ADMIN

log = logging.getLogger("orchestrator.api")

router = APIRouter(tags=["operations"])


def check_database(db: Database) -> None:
    with storage_boundary():
        plans_repo.running_plan_ids(db, limit=1)


def check_broker(app: Any) -> None:
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=3)


@router.get("/healthz", operation_id="get_health", response_model=Health)
async def healthz() -> dict[str, str]:
    """200 while the process serves requests (liveness)."""
    return {"status": "ok"}


@router.get("/readyz", operation_id="get_readiness", response_model=Ready, responses=errors(503))
async def readyz(request: Request) -> JSONResponse:
    """200 when the database and the broker answer; 503 naming the one(s) that do not (readiness)."""
    local = request.app.state.local
    checks: dict[str, str] = {}
    for name, probe, arg in (("database", check_database, local.db), ("broker", check_broker, local.app)):
        try:
            await run_in_threadpool(probe, arg)
            checks[name] = "ok"
        except Exception as exc:
            log.warning("readiness: %s unreachable: %s", name, exc, extra={"action": "api.not_ready"})
            checks[name] = "unreachable"
    failed = [name for name, state in checks.items() if state != "ok"]
    if failed:
        return JSONResponse(error_body("service.unavailable", f"{' and '.join(failed)} unreachable",
                                       [{"field": name, "message": checks[name]} for name in failed]),
                            status_code=503)
    return JSONResponse({"status": "ready", "checks": checks})


def scrape(db: Database) -> bytes:
    """One scrape of ``/metrics``: the live gauges, in Prometheus text."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(FleetCollector(db))
    return generate_latest(registry)


@router.get("/metrics", operation_id="get_metrics", dependencies=[Depends(require(ADMIN))],
            response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **errors(401, 403, 503)})
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text; needs the admin scope when authentication is on."""
    body = await run_in_threadpool(scrape, request.app.state.local.db)
    return PlainTextResponse(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)
