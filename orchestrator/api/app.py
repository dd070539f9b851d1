"""The API's application factory: ``create_app(settings)``, served by ``conclave api``.

It owns a :class:`~orchestrator.client.Conclave` for its lifetime (built at
startup, closed at shutdown) unless one is given, installs the JSON error
handlers (:mod:`orchestrator.api.errors`), the token check
(:mod:`orchestrator.api.auth`) and the routes (:mod:`orchestrator.api.plans`,
:mod:`orchestrator.api.ops`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from orchestrator.api.auth import BearerAuth
from orchestrator.api.errors import CatchAll, install_error_handlers
from orchestrator.api.events import EventStreams
from orchestrator.api.ops import router as ops_router
from orchestrator.api.plans import plans_router
from orchestrator.client import Conclave
from orchestrator.settings import Settings
from storage import connect

log = logging.getLogger("orchestrator.api")


def create_app(settings: Settings, *, client: Conclave | None = None) -> FastAPI:
    """The API for ``settings``. It owns a :class:`Conclave` (built at startup, closed at
    shutdown) unless one is given. Embedded settings run an in-process worker."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = client is None
        c = client or Conclave(settings, db=connect(settings.effective_database_url, pool_size=16),
                               worker=settings.embedded)
        app.state.client = c
        app.state.streams = EventStreams(c.coordinator, c.bus)
        log.info("api ready (%s)", "auth required" if settings.api_token is not None else "no auth",
                 extra={"action": "api.started"})
        try:
            yield
        finally:
            if owned:
                c.close()

    app = FastAPI(title="Conclave", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    install_error_handlers(app)
    token = settings.api_token.get_secret_value() if settings.api_token is not None else None
    if token is not None and not token.strip():
        log.error("CONCLAVE_API_TOKEN is set but empty: every /v1 request will be refused",
                  extra={"action": "api.misconfigured"})
    app.add_middleware(BearerAuth, token=token)
    app.add_middleware(CatchAll)  # added last: outermost
    app.include_router(plans_router(settings))
    app.include_router(ops_router)
    return app
