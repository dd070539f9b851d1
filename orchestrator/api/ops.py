"""Operational routes: ``/healthz`` (the process is up), ``/readyz`` (the database
and the broker answer), ``/metrics`` (Prometheus text, computed from the database on
every scrape, so any API replica reports the same numbers).

The probes need no token; ``/metrics`` needs the ``admin`` scope when authentication
is on (it counts every tenant's plans). None reveals more than counts and
``ok``/``unreachable`` (the reason is logged, not returned).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool

from orchestrator.api.auth import require
from orchestrator.api.errors import error_body
from orchestrator.api.schemas import errors
from orchestrator.errors import storage_boundary
from storage import Database
from storage import plans as plans_repo
from storage.identity import ADMIN
from storage.stats import FleetStats, fleet_stats
from storage.status import PhaseStatus, PlanStatus

log = logging.getLogger("orchestrator.api")

PLAN_STATUSES = tuple(PlanStatus)
PHASE_STATUSES = tuple(PhaseStatus)

router = APIRouter()


def check_database(db: Database) -> None:
    with storage_boundary():
        plans_repo.running_plan_ids(db, limit=1)


def check_broker(app: Any) -> None:
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=3)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    client = request.app.state.client
    checks: dict[str, str] = {}
    for name, probe, arg in (("database", check_database, client.db), ("broker", check_broker, client.app)):
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


def collect(db: Database) -> FleetStats:
    with storage_boundary():
        return fleet_stats(db)


def exposition(stats: FleetStats) -> str:
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[dict[str, str], int]]) -> None:
        lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}"])
        for labels, value in samples:
            rendered = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{rendered}}} {value}" if rendered else f"{name} {value}")

    plans, phases = stats.plans_by_status, stats.phases_by_status
    family("conclave_plans", "gauge", "Plans by status.",
           [({"status": s}, int(plans.get(s, 0))) for s in sorted({*PLAN_STATUSES, *plans})])
    family("conclave_phases", "gauge", "Phases by status.",
           [({"status": s}, int(phases.get(s, 0))) for s in sorted({*PHASE_STATUSES, *phases})])
    tokens = {(src, d, c): 0 for src in ("provider", "estimated") for d in ("input", "output")
              for c in ("true", "false")}
    calls = 0
    for g in stats.usage:
        src, c = ("provider" if g.source == "provider" else "estimated"), ("true" if g.counted else "false")
        calls += g.calls
        tokens[(src, "input", c)] += g.input_tokens
        tokens[(src, "output", c)] += g.output_tokens
    family("conclave_usage_tokens", "gauge",
           "Tokens on record by who counted them (provider report or estimate), direction, and whether "
           "they are the cost of a completed attempt (counted) or of one running, dead or fenced out.",
           [({"source": s, "direction": d, "counted": c}, v) for (s, d, c), v in sorted(tokens.items())])
    family("conclave_model_calls", "gauge", "Model calls on record.", [({}, calls)])
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@router.get("/metrics", dependencies=[Depends(require(ADMIN))], response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **errors(401, 403, 503)})
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text; needs the admin scope when authentication is on."""
    stats = await run_in_threadpool(collect, request.app.state.client.db)
    return PlainTextResponse(exposition(stats), media_type="text/plain; version=0.0.4; charset=utf-8")
