"""The API's application factory: ``create_app(settings)``, served by ``conclave api``.

It owns a :class:`~orchestrator.client.local.LocalBackend` (the coordinator and the read side)
for its lifetime (built at startup, closed at shutdown) unless one is given, installs the JSON error
handlers (:mod:`orchestrator.api.error_responses`), the principal check
(:mod:`orchestrator.api.auth`), the routes (:mod:`orchestrator.api.plan_routes`,
:mod:`orchestrator.api.eval_routes`, :mod:`orchestrator.api.webhook_routes`, :mod:`orchestrator.api.ops`,
the plan page :mod:`orchestrator.api.ui`) and the published contract at ``/openapi.json``
(:mod:`orchestrator.api.schemas`) with its pages ``/docs`` and ``/redoc``, served from vendored
assets (:mod:`orchestrator.api.docs_pages`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from orchestrator import tracing
from orchestrator.api.auth import Authenticate
from orchestrator.api.docs_pages import install_docs_pages
from orchestrator.api.error_responses import CatchAll, install_error_handlers
from orchestrator.api.eval_routes import evals_router
from orchestrator.api.events import EventStreams
from orchestrator.api.feed import open_feed
from orchestrator.api.ops import router as ops_router
from orchestrator.api.people_routes import people_router
from orchestrator.api.plan_routes import plans_router
from orchestrator.api.schemas import install_openapi
from orchestrator.api.ui import ui_router
from orchestrator.api.webhook_routes import webhooks_router
from orchestrator.client.local import LocalBackend
from orchestrator.core.settings import Settings
from orchestrator.core.version import __version__

log = logging.getLogger("orchestrator.api")


def create_app(settings: Settings, *, local: LocalBackend | None = None) -> FastAPI:
    """The API for ``settings``. It owns a :class:`LocalBackend` (built at startup, closed at
    shutdown) unless one is given. Embedded settings run an in-process worker."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = local is None
        c = local or LocalBackend(settings, db=settings.open_database(),
                                   worker=settings.embedded)
        app.state.local = c
        feed = open_feed(c.bus, settings.redis_url)
        app.state.streams = EventStreams(c.reads, feed, max_streams=settings.max_streams,
                                         per_tenant=settings.max_streams_per_tenant)
        log.info("api ready (%s)", "tokens required" if settings.auth_required else "authentication off",
                 extra={"action": "api.started"})
        try:
            yield
        finally:
            await feed.close()
            if owned:
                c.close()

    app = FastAPI(title="Conclave", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json",
                  description="Durable multi-expert LLM plans. Every error is JSON `{\"error\": {code, message, "
                              "details}}`; authentication is a bearer token (see `conclave tokens`).")
    install_error_handlers(app)
    install_openapi(app)
    install_docs_pages(app)
    tracing.instrument_api(app)  # server spans, when tracing is on (orchestrator.tracing)
    token = settings.api_token.get_secret_value() if settings.api_token is not None else None
    if token is not None and not token.strip():
        log.error("CONCLAVE_API_TOKEN is set but empty: it matches no request",
                  extra={"action": "api.misconfigured"})
    if not settings.auth_required:
        log.warning("authentication is off: every caller is the operator (CONCLAVE_AUTH=off or embedded mode)",
                    extra={"action": "api.auth_off"})
    app.add_middleware(Authenticate, settings=settings)
    app.add_middleware(CatchAll)  # added last: outermost
    app.include_router(plans_router(settings))
    app.include_router(people_router())
    app.include_router(evals_router())
    app.include_router(webhooks_router())
    app.include_router(ops_router)
    app.include_router(ui_router(settings))
    return app
