"""The contract's pages work on a host with no internet: ``/docs`` (Swagger UI) and
``/redoc`` reference only the API's own URLs, each of which answers 200 without a token,
and in headless Chromium — every request to anywhere but the API refused — both render
the operations from ``/openapi.json``."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.browser import PageLog, browser  # noqa: F401  (browser: the fixture)
from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)

TOKEN = "contract-pages-token-0123456789abcdef"
TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}


def referenced(html: str) -> list[str]:
    """Every URL the page loads: ``src``/``href`` attributes, ReDoc's ``spec-url`` and
    Swagger UI's ``url:``."""
    urls = re.findall(r'(?:src|href|spec-url)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
    assert urls, html
    return urls


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_pages_load_only_the_apis_own_assets(api: Any, page: str) -> None:  # noqa: F811
    url = api(env={"CONCLAVE_API_TOKEN": TOKEN}).url  # authentication on: the pages still need none
    r = httpx.get(url + page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), r.text
    assert "://" not in r.text and "cdn" not in r.text.lower() and "fonts.googleapis" not in r.text
    urls = referenced(r.text)
    assert "/openapi.json" in urls
    for ref in urls:
        parts = urlsplit(ref)
        assert not parts.scheme and not parts.netloc and ref.startswith("/"), ref
        asset = httpx.get(url + ref)
        assert asset.status_code == 200, (ref, asset.status_code)
        kind = next(v for k, v in TYPES.items() if parts.path.endswith(k))
        assert kind in asset.headers["content-type"], (ref, asset.headers["content-type"])
        assert len(asset.content) > 100, ref


@pytest.mark.timeout(180)
def test_the_pages_render_the_operations_with_no_network_but_the_api(api: Any, browser: Any) -> None:  # noqa: F811
    url = api(env={"CONCLAVE_API_TOKEN": TOKEN}).url
    local = urlsplit(url).netloc
    refused: list[str] = []

    def only_the_api(route: Any) -> None:
        if urlsplit(route.request.url).netloc == local:
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    context = browser.new_context()
    context.route("**/*", only_the_api)
    page = context.new_page()
    log = PageLog(page)

    page.goto(url + "/docs")
    page.locator(".opblock").first.wait_for(timeout=60_000)
    ids = page.locator(".opblock-summary-operation-id").all_inner_texts()
    assert {"submit_plan", "list_plans", "get_plan", "stream_events", "get_result"} <= set(ids), ids
    spec = httpx.get(url + "/openapi.json").json()
    operations = [op for item in spec["paths"].values() for op in item.values() if "operationId" in op]
    assert sorted(ids) == sorted(op["operationId"] for op in operations)  # every documented operation, each once

    page.goto(url + "/redoc")
    page.get_by_role("heading", name="Stream Events").first.wait_for(timeout=60_000)
    assert page.get_by_text("text/event-stream").count() >= 1

    assert refused == [] and log.errors == [], (refused, log.errors)
    context.close()


def test_the_assets_serve_only_their_own_files(api: Any) -> None:  # noqa: F811
    url = api(env={"CONCLAVE_API_TOKEN": TOKEN}).url
    for path in ("/docs/assets/nope.js", "/docs/assets/../docs_pages.py", "/docs/assets/%2e%2e/docs_pages.py",
                 "/docs/assets/"):
        r = httpx.get(url + path)
        assert r.status_code == 404 and r.json()["error"]["code"] == "http.not_found", (path, r.text)
    r = httpx.post(url + "/docs/assets/swagger-ui.css")
    assert r.status_code == 405 and r.json()["error"]["code"] == "http.method_not_allowed", r.text
