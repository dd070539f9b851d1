"""The UI's routes under ``/ui`` (not part of the published API contract):

    GET  /ui/                      the caller's plans (``?status=``, ``?label=``, ``?cursor=``)
    GET  /ui/list                  the list's table, for its refreshes (the same query)
    GET  /ui/plans/{id}            the live plan page (plan id or task id): the answer first
    GET  /ui/plans/{id}/live       the page's overview and graph, for its refreshes
    GET  /ui/plans/{id}/people     the page's people panel (who is awaited, approval, steering, forms)
    POST /ui/plans/{id}/…          the panel's forms: answer, approve, send back, steer, cancel, resume
                                   (session cookie + the session's form token: ``api/ui/actions.py``)
    GET  /ui/plans/{id}/answer     the page's answer section, once the result is written
    GET  /ui/plans/{id}/phases/{key}/text   a phase's full text, rendered, for its card
    GET  /ui/plans/{id}/result.md  the result's Markdown, as a download
    GET  /ui/plans/{a}/diff/{b}    two plans side by side (a what-if fork beside its source)
    GET  /ui/evals/{name}          an eval's report: tables and plots
    GET  /ui/login, POST /ui/login sign in with a token: sets the session cookie
    POST /ui/logout                sign out: clears it
    GET  /ui/static/{name}         plan.js, list.js, style.css

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
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api import inputs as inp
from orchestrator.api import session
from orchestrator.api.auth import Credentials
from orchestrator.api.ui.actions import actions_router, same_origin
from orchestrator.api.ui.answer import answer_section
from orchestrator.api.ui.diff_page import diff_page
from orchestrator.api.ui.eval_page import eval_page
from orchestrator.api.ui.html import SECURITY_HEADERS, error_page
from orchestrator.api.ui.login import HOME, MAX_FORM, login_page, parse_form, safe_next
from orchestrator.api.ui.people_panel import DONE, people_section
from orchestrator.api.ui.plan_list import PAGE_SIZE, listing_page, listing_table
from orchestrator.api.ui.plan_page import live_fragment, phase_text_fragment, plan_page
from orchestrator.api.ui.snapshot import PlanSnapshot, Text, read_listing, read_snapshot, read_text
from orchestrator.control.plan_query import PlanQuery
from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import (
    ConclaveError,
    EvalNotFound,
    Forbidden,
    InvalidRequest,
    NotReady,
    PhaseNotFound,
    PlanNotFound,
    ServiceUnavailable,
    Unauthorized,
)
from orchestrator.core.settings import Settings
from orchestrator.evaluation.collect import CallerPlans, collect, report_record
from orchestrator.evaluation.report import build_report
from storage.identity import READ, WRITE, Principal

log = logging.getLogger("orchestrator.api")

STATIC_TYPES = {"plan.js": "text/javascript; charset=utf-8", "list.js": "text/javascript; charset=utf-8",
                "style.css": "text/css; charset=utf-8"}
#: What a plan list's query may repeat (each a short value): more is not a browser's request.
MAX_QUERY = 2000

Render = Callable[[Principal | None], Awaitable[Response]]


class _SignInNeeded(Exception):
    """No valid credentials: a page redirects to the sign-in form, a fragment says 401."""


def _html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def _reads(request: Request) -> PlanReads:
    reads: PlanReads = request.app.state.local.reads
    return reads


_same_origin = same_origin  # sign-in and sign-out check it too (orchestrator.api.ui.actions)


def _slug(title: str) -> str:
    """A file name's stem from a title: lowercase letters and digits joined by dashes."""
    words = "".join(c if c.isascii() and c.isalnum() else " " for c in title.lower()).split()
    return "-".join(words)[:60].strip("-") or "plan"


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
        if isinstance(exc, PhaseNotFound):
            title, message = "Phase not found", exc.message
        elif isinstance(exc, PlanNotFound):
            title, message = "Plan not found", "There is no such plan among the plans you can see."
        elif isinstance(exc, EvalNotFound):
            title, message = "Eval not found", "There is no such eval among the evals you can see."
        elif isinstance(exc, InvalidRequest):
            title, message = "Cannot read this request", exc.message
        elif isinstance(exc, NotReady):
            title, message = "Not written yet", exc.message
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

    def list_query(request: Request) -> PlanQuery:
        """The list's filters, checked as ``GET /v1/plans`` checks them (a bad one: a 422
        page naming the field); an empty value is no filter (the form sends one)."""
        if len(request.url.query) > MAX_QUERY:
            raise InvalidRequest("the query is too long", details=inp.field_error("query", "too long"))
        params = request.query_params
        unknown = sorted(set(params) - {"status", "label", "cursor"})
        if unknown:
            raise InvalidRequest(f"{unknown[0]}: not a filter of this list (status, label, cursor)",
                                 details=inp.field_error(unknown[0], "unknown parameter"))
        cursor = params.getlist("cursor")
        return PlanQuery.check(status=[v for v in params.getlist("status") if v],
                               label=[v.strip() for v in params.getlist("label") if v.strip()],
                               cursor=cursor[-1] if cursor and cursor[-1] else None, limit=PAGE_SIZE)

    @router.get("/")
    async def plans_list(request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            query = list_query(request)
            found = await run_in_threadpool(read_listing, _reads(request), who, query.as_filters())
            return _html(listing_page(found, query, viewer=who, auth=auth))

        return await render(request, build)

    @router.get("/list")
    async def plans_table(request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            query = list_query(request)
            found = await run_in_threadpool(read_listing, _reads(request), who, query.as_filters())
            return _html(str(listing_table(found, query, viewer=who)))

        return await render(request, build, fragment=True)

    async def snapshot(request: Request, plan_id: str, who: Principal | None) -> PlanSnapshot:
        """The plan as ``who`` may see it: another tenant's is ``plan.not_found``."""
        return await run_in_threadpool(read_snapshot, _reads(request), inp.plan_ref(plan_id), who)

    async def text(request: Request, plan_id: str, key: str | None, who: Principal | None) -> Text | None:
        return await run_in_threadpool(read_text, _reads(request), inp.plan_ref(plan_id), key, who)

    def form_token(request: Request) -> str:
        """The session's form token for the page's forms ("" with authentication off: no session)."""
        cookie = session.read(request.scope)
        claim = session.decode(cookie) if cookie is not None else None
        return session.form_token(claim) if claim is not None else ""

    def acting(who: Principal | None) -> bool:
        return not auth or (who is not None and who.allows(WRITE))

    @router.get("/plans/{plan_id}")
    async def plan(plan_id: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            snap = await snapshot(request, plan_id, who)
            done = request.query_params.get("done")
            people = people_section(snap, can_act=acting(who), csrf=form_token(request))
            return _html(plan_page(snap, await text(request, snap.view.id, None, who), viewer=who, auth=auth,
                                   people=people, notice=DONE.get(done or "")))

        return await render(request, build)

    @router.get("/plans/{plan_id}/people")
    async def plan_people(plan_id: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            snap = await snapshot(request, plan_id, who)
            return _html(str(people_section(snap, can_act=acting(who), csrf=form_token(request))))

        return await render(request, build, fragment=True)

    @router.get("/plans/{plan_id}/live")
    async def plan_live(plan_id: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            return _html(live_fragment(await snapshot(request, plan_id, who)))

        return await render(request, build, fragment=True)

    @router.get("/plans/{plan_id}/answer")
    async def plan_answer(plan_id: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            snap = await snapshot(request, plan_id, who)
            return _html(str(answer_section(snap, await text(request, snap.view.id, None, who))))

        return await render(request, build, fragment=True)

    @router.get("/plans/{plan_id}/phases/{key}/text")
    async def phase_text(plan_id: str, key: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            found = await text(request, plan_id, inp.phase_key(key), who)
            if found is None:
                raise NotReady(f"phase {key} has no text yet", details=inp.field_error("key", "no text yet"))
            return _html(phase_text_fragment(found))

        return await render(request, build, fragment=True)

    @router.get("/plans/{plan_id}/diff/{other}")
    async def plan_diff(plan_id: str, other: str, request: Request) -> Response:
        """Two plans side by side (a fork beside its source): both must be the caller's to see."""
        async def build(who: Principal | None) -> Response:
            a, b = inp.plan_ref(plan_id), inp.plan_ref(other)
            found = await run_in_threadpool(_reads(request).diff, a, b, principal=who)
            return _html(diff_page(found, viewer=who, auth=auth))

        return await render(request, build)

    @router.get("/plans/{plan_id}/result.md")
    async def result_markdown(plan_id: str, request: Request) -> Response:
        async def build(who: Principal | None) -> Response:
            snap = await snapshot(request, plan_id, who)
            found = await text(request, snap.view.id, None, who)
            if found is None:
                raise NotReady(f"plan {snap.view.id} has no result yet (it is {snap.view.status})",
                               details=inp.field_error("plan_id", f"plan is {snap.view.status}"))
            name = f"{_slug(snap.view.title)}-{snap.view.id[:8]}.md"
            return Response(found.text, media_type="text/markdown; charset=utf-8",
                            headers={**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="{name}"'})

        return await render(request, build)

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

    router.include_router(actions_router(settings, credentials))

    @router.get("/static/{name}")
    async def static_file(name: str) -> Response:
        if name not in static:
            return _html(error_page(404, "Not found", "No such file.", viewer=None, auth=auth, code="http.not_found"),
                         404)
        return Response(static[name], media_type=STATIC_TYPES[name],
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    return router
