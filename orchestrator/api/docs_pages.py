"""The contract's pages: ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served with no
request leaving the host.

FastAPI's own pages load their scripts, styles, favicon and fonts from CDNs, so a host
without internet access shows a blank page. These pages load them from
``/docs/assets/`` instead: Swagger UI and ReDoc are vendored, unmodified, in
``orchestrator/api/static/`` (versions and licences in its ``VENDORED.md``), and Swagger
UI's online validator (which would send the schema's address to a third party) is off; each
operation shows its ``operationId``, the name a generated client gives it. Like
``/openapi.json``, the pages need no token (a token typed into Swagger UI's Authorize
stays in that page: it is not persisted).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(__file__).with_name("static")
ASSETS_URL = "/docs/assets"


def install_docs_pages(app: FastAPI, *, openapi_url: str = "/openapi.json") -> None:
    """Serve ``/docs``, ``/redoc`` and their assets (the app is built with ``docs_url=None``
    and ``redoc_url=None``, so FastAPI adds no CDN pages of its own)."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")
    favicon = f"{ASSETS_URL}/favicon-32x32.png"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=f"{app.title} API",
                                   swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS_URL}/swagger-ui.css", swagger_favicon_url=favicon,
                                   swagger_ui_parameters={"validatorUrl": None, "displayOperationId": True})

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{app.title} API",
                              redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js", redoc_favicon_url=favicon,
                              with_google_fonts=False)
