"""The UI's routes under ``/ui`` (not part of the published API contract):

    GET  /ui/                      the caller's plans (``?cursor=`` for older ones)
    GET  /ui/plans/{id}            the live plan page (plan id or task id)
    GET  /ui/plans/{id}/live       the page's overview and graph, for its refreshes
    GET  /ui/evals/{name}          an eval's report: tables and plots
    GET  /ui/login, POST /ui/login sign in with a token: sets the session cookie
    POST /ui/logout                sign out: clears it
    GET  /ui/static/{name}         plan.js, style.css

Pages authenticate like ``/v1`` does (:class:`orchestrator.api.auth.Credentials`), but
answer as a browser needs: no credentials → a redirect to the sign-in page; no
``plans:read`` → a 403 page; a plan the caller may not see → the same 404 page as a
plan that does not exist; a malformed id → a 422 page naming it; the database away →
a 503 page. Never a 500 for anything a browser sends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api import inputs as inp
from orchestrator.api import session
from orchestrator.api.auth import Credentials
from orchestrator.api.ui.eval_page import eval_page
from orchestrator.api.ui.html import SECURITY_HEADERS, error_page
from orchestrator.api.ui.login import HOME, MAX_FORM, login_page, parse_form, safe_next
from orchestrator.api.ui.plan_list import PAGE_SIZE, listing_page
from orchestrator.api.ui.plan_page import live_fragment, plan_page
from orchestrator.api.ui.snapshot import PlanSnapshot, read_snapshot
from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import (
    ConclaveError,
    EvalNotFound,
    Forbidden,
    InvalidRequest,
    PlanNotFound,
    ServiceUnavailable,
    Unauthorized,
)
from orchestrator.core.settings import Settings
from orchestrator.evaluation.collect import CallerPlans, collect, report_record
from orchestrator.evaluation.report import build_report
from storage.identity import READ, Principal
from storage.listing import decode_cursor

log = logging.getLogger("orchestrator.api")

STATIC_TYPES = {"plan.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}

Render = Callable[[Principal | None], Awaitable[Response]]


class _SignInNeeded(Exception):
    """No valid credentials: a page redirects to the sign-in form, a fragment says 401."""


def _html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def _reads(request: Request) -> PlanReads:
    reads: PlanReads = request.app.state.local.reads
    return reads


def _same_origin(request: Request) -> bool:
    """A form post from this UI's own pages, not from another site's (sign-in and sign-out
    are the only posts a browser makes here; the cookie itself is SameSite=Strict). A
    browser says where a request comes from (``Sec-Fetch-Site``, else ``Origin``); a
    client that says neither is no browser, and no page can make it post."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site == "same-origin"
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


def ui_router(settings: Settings) -> APIRouter:
    router = APIRouter(prefix="/ui", include_in_schema=False)
    credentials = Credentials(settings)
    auth = credentials.required
    static = {name: (resources.files("orchestrator.api.ui") / "static" / name).read_bytes() for name in STATIC_TYPES}

    async def viewer(request: Request) -> Principal | None:
        if not auth:
            return None
        try:
            return await credentials.principal(request.scope)
        except Unauthorized:
            raise _SignInNeeded from None

    async def render(request: Request, build: Render, *, fragment: bool = False) -> Response:
        """``build``'s response for the signed-in caller, or the page that says why not."""
        who: Principal | None = None
        try:
            who = await viewer(request)
            if who is not None and not who.allows(READ):
                raise Forbidden("this token may not read plans: the page needs the plans:read scope")
            return await build(who)
        except _SignInNeeded:
            if fragment:
                return _html("<p>sign in again</p>", 401)
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/ui/login?next={quote(safe_next(target), safe='')}", status_code=303,
                                    headers=SECURITY_HEADERS)
        except ConclaveError as exc:
            return _failure(exc, request, who)

    def _failure(exc: ConclaveError, request: Request, who: Principal | None) -> HTMLResponse:
        status = exc.http_status
        if isinstance(exc, PlanNotFound):
            title, message = "Plan not found", "There is no such plan among the plans you can see."
        elif isinstance(exc, EvalNotFound):
            title, message = "Eval not found", "There is no such eval among the evals you can see."
        elif isinstance(exc, InvalidRequest):
            title, message = "Not a plan id", exc.message
        elif isinstance(exc, Forbidden):
            title, message = "Not allowed", exc.message
        elif isinstance(exc, ServiceUnavailable):
            log.warning("ui: %s", exc.message, extra={"action": "api.unavailable"})
            title, message = "Unavailable", "The database cannot be reached just now; reload in a moment."
        elif status >= 500:
            log.error("ui: %s %s: %s", request.method, request.url.path, exc.message, exc_info=exc,
                      extra={"action": "api.error"})
            title, message = "Something went wrong", "An internal error; the server's log has the details."
        else:
            title, message = "Cannot show this", exc.message
        return _html(error_page(status, title, message, viewer=who, auth=auth, code=exc.code), status)

    @router.get("")
    async def ui_root() -> RedirectResponse:
        return RedirectResponse(HOME, status_code=308)

    @router.get("/")
    async def plans_list(request: Request, cursor: str | None = None) -> Response:
        async def build(who: Principal | None) -> Response:
            if cursor is not None:
                try:
                    if len(cursor) > 200:
                        raise ValueError("too long")
                    decode_cursor(cursor)
                except ValueError:
                    raise InvalidRequest("cursor: not a cursor this page handed out",
                                         details=inp.field_error("cursor", "not a cursor")) from None
            found = await run_in_threadpool(_reads(request).list_plans, principal=who, limit=PAGE_SIZE, cursor=cursor)
            return _html(listing_page(found, viewer=who, auth=auth, paged=cursor is not None))

        return await render(request, build)

    async def snapshot(request: Request, plan_id: str, who: Principal | None) -> PlanSnapshot:
        """The plan as ``who`` may see it: another tenant's is ``plan.not_found``."""
        return await run_in_threadpool(read_snapshot, _reads(request), inp.plan_ref(plan_id), who)

    @router.get("/plans/{plan_id}")
    async def plan(plan_id: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            return _html(plan_page(await snapshot(request, plan_id, who), viewer=who, auth=auth))

        return await render(request, build)

    @router.get("/plans/{plan_id}/live")
    async def plan_live(plan_id: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            return _html(live_fragment(await snapshot(request, plan_id, who)))

        return await render(request, build, fragment=True)

    @router.get("/evals/{name}")
    async def eval_report(name: str, request: Request) -> Response:
        """An eval's report, rebuilt from the stored eval and its plans as the caller sees them."""
        async def build(who: Principal | None) -> Response:
            def read() -> str:
                stored = request.app.state.local.evals.get(name, principal=who)
                outcomes = collect(CallerPlans(_reads(request), who), stored)
                return eval_page(build_report(report_record(stored, outcomes), outcomes), viewer=who, auth=auth)

            return _html(await run_in_threadpool(read))

        return await render(request, build)

    @router.get("/login")
    async def login_form(request: Request, next: str | None = None) -> Response:
        if not auth:
            return RedirectResponse(safe_next(next), status_code=303)
        return _html(login_page(next_path=safe_next(next), session_hours=settings.ui_session_hours))

    @router.post("/login")
    async def login(request: Request) -> Response:
        if not auth:
            return RedirectResponse(HOME, status_code=303)

        def again(status: int, problem: str, next_path: str = HOME) -> HTMLResponse:
            return _html(login_page(next_path=next_path, problem=problem, session_hours=settings.ui_session_hours),
                         status)

        if not _same_origin(request):
            return again(403, "That sign-in came from another site's page and was refused.")
        try:
            if inp.media_type(request) != "application/x-www-form-urlencoded":
                return again(415, "Sign in with the form on this page.")
            fields = parse_form(await inp.read_body(request, MAX_FORM))
        except ConclaveError as exc:
            return again(exc.http_status if 400 <= exc.http_status < 500 else 400, "The form could not be read.")
        next_path = safe_next(fields.get("next"))
        token = fields.get("token", "").strip()
        if not token:
            return again(400, "Paste a token to sign in.", next_path)
        try:
            found = await credentials.token_principal(request.app, token)
        except ServiceUnavailable:
            return again(503, "The database cannot be reached just now; try again in a moment.", next_path)
        if found is None:
            log.info("ui sign-in refused: unknown or revoked token", extra={"action": "ui.sign_in_refused"})
            return again(401, "That token is unknown or revoked.", next_path)
        if not found.allows(READ):
            return again(403, "That token may not read plans: the page needs a token with the plans:read scope.",
                         next_path)
        log.info("ui sign-in: %s (tenant %s)", found.name, found.tenant, extra={"action": "ui.signed_in"})
        cookie = session.set_cookie(credentials.open_session(token, found), max_age=credentials.session_seconds,
                                    secure=request.url.scheme == "https")
        return RedirectResponse(next_path, status_code=303, headers={**SECURITY_HEADERS, "Set-Cookie": cookie})

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        if not _same_origin(request):
            return _html(error_page(403, "Not allowed", "That sign-out came from another site's page.",
                                    viewer=None, auth=auth), 403)
        cleared = session.clear_cookie(secure=request.url.scheme == "https")
        return RedirectResponse("/ui/login" if auth else HOME, status_code=303,
                                headers={**SECURITY_HEADERS, "Set-Cookie": cleared})

    @router.get("/static/{name}")
    async def static_file(name: str) -> Response:
        if name not in static:
            return _html(error_page(404, "Not found", "No such file.", viewer=None, auth=auth, code="http.not_found"),
                         404)
        return Response(static[name], media_type=STATIC_TYPES[name],
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    return router
