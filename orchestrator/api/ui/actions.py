"""The plan page's forms: where a person acts from a browser.

    POST /ui/plans/{id}/phases/{key}/input   answer a seat        (text, idempotency_key)
    POST /ui/plans/{id}/approve              approve the draft
    POST /ui/plans/{id}/send-back            send it back once    (note)
    POST /ui/plans/{id}/steer                steer the meeting    (note)
    POST /ui/plans/{id}/cancel               cancel the plan
    POST /ui/plans/{id}/resume               resume the plan

Each is the coordinator's command the ``/v1`` route runs, for the signed-in person, who needs
``plans:write``. Forged posts are refused: a post must be a form of this UI's own pages —

- with authentication on, the session cookie AND the session's form token in the form
  (:meth:`orchestrator.api.auth.Credentials.form_principal`): the cookie alone authorizes
  nothing, whichever site's page sent it;
- the browser must not say it came from elsewhere (``Sec-Fetch-Site``, else ``Origin``):
  with authentication off there is no session to bind a token to, and this is the check.

A post that worked returns the browser to the plan page (303, ``?done=…``, which the page
turns into a notice); one that was refused returns a page saying why, with the API's stable
error code and its status (409 ``phase.not_waiting``, …), and a way back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api import inputs as inp
from orchestrator.api.auth import Credentials
from orchestrator.api.ui.html import SECURITY_HEADERS, error_page
from orchestrator.api.ui.login import parse_form, safe_next
from orchestrator.control.coordinator import Coordinator
from orchestrator.core.errors import ConclaveError, Forbidden, Unauthorized
from orchestrator.core.settings import Settings
from orchestrator.plan.human import MAX_ANSWER_CHARS
from storage.identity import WRITE, Principal

log = logging.getLogger("orchestrator.api")

FORM = "application/x-www-form-urlencoded"
NOTE_FORM = 32 * 1024
ANSWER_FORM = 12 * MAX_ANSWER_CHARS + 4096  # every character percent-encoded as UTF-8 at worst

Command = Callable[[Coordinator, str, dict[str, str], Principal | None], Any]


def same_origin(request: Request) -> bool:
    """A form post from this UI's own pages, not from another site's. A browser says where a
    request comes from (``Sec-Fetch-Site``, else ``Origin``); a client that says neither is no
    browser, and no page can make it post."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site == "same-origin"
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


def _html(text: str, status: int) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=SECURITY_HEADERS)


def actions_router(settings: Settings, credentials: Credentials) -> APIRouter:
    router = APIRouter(include_in_schema=False)  # under the UI's router, which is at /ui
    auth = credentials.required

    async def act(request: Request, plan_id: str, command: Command, done: str, *, limit: int = NOTE_FORM) -> Response:
        ref = plan_id
        back = f"/ui/plans/{quote(plan_id, safe='')}"
        who: Principal | None = None

        def refused(status: int, title: str, message: str, code: str | None = None) -> HTMLResponse:
            return _html(error_page(status, title, message, viewer=who, auth=auth, code=code, back=back), status)

        if not same_origin(request):
            return refused(403, "Not allowed", "That form came from another site's page and was refused.",
                           "auth.forbidden")
        try:
            ref = inp.plan_ref(plan_id)
            if inp.media_type(request) != FORM:
                return refused(415, "Cannot read this request", "Use the forms on the plan page.",
                               "request.unsupported_media_type")
            fields = parse_form(await inp.read_body(request, limit))
            if auth:
                who = await credentials.form_principal(request.scope, fields.get("csrf"))
                if not who.allows(WRITE):
                    raise Forbidden("this token may not change plans: acting on a plan needs the plans:write scope",
                                    details=[{"field": "Authorization", "message": f"missing scope {WRITE}"}])
            coordinator: Coordinator = request.app.state.local.coordinator
            await run_in_threadpool(command, coordinator, ref, fields, who)
        except Unauthorized:
            return RedirectResponse(f"/ui/login?next={quote(safe_next(back), safe='')}", status_code=303,
                                    headers=SECURITY_HEADERS)
        except ConclaveError as exc:
            status = exc.http_status
            if status >= 500:
                log.warning("ui: %s %s: %s", request.method, request.url.path, exc.message,
                            extra={"action": "api.error"})
            title = "Not allowed" if isinstance(exc, Forbidden) else "Not done"
            return refused(status, title, exc.message, exc.code)
        log.info("ui: %s on plan %s", done, ref, extra={"action": f"ui.{done}"})
        return RedirectResponse(f"{back}?done={done}#people", status_code=303, headers=SECURITY_HEADERS)

    @router.post("/plans/{plan_id}/phases/{key}/input")
    async def answer(plan_id: str, key: str, request: Request) -> Response:
        def run(c: Coordinator, ref: str, f: dict[str, str], who: Principal | None) -> Any:
            return c.answer(ref, inp.phase_key(key), f.get("text", ""),
                            idempotency_key=f.get("idempotency_key") or None, principal=who)

        return await act(request, plan_id, run, "answered", limit=ANSWER_FORM)

    @router.post("/plans/{plan_id}/approve")
    async def approve(plan_id: str, request: Request) -> Response:
        return await act(request, plan_id, lambda c, ref, f, who: c.approve(ref, principal=who), "approved")

    @router.post("/plans/{plan_id}/send-back")
    async def send_back(plan_id: str, request: Request) -> Response:
        return await act(request, plan_id, lambda c, ref, f, who: c.send_back(ref, f.get("note", ""), principal=who),
                         "sent-back")

    @router.post("/plans/{plan_id}/steer")
    async def steer(plan_id: str, request: Request) -> Response:
        return await act(request, plan_id, lambda c, ref, f, who: c.steer(ref, f.get("note", ""), principal=who),
                         "steered")

    @router.post("/plans/{plan_id}/cancel")
    async def cancel(plan_id: str, request: Request) -> Response:
        return await act(request, plan_id, lambda c, ref, f, who: c.cancel(ref, principal=who), "cancelled")

    @router.post("/plans/{plan_id}/resume")
    async def resume(plan_id: str, request: Request) -> Response:
        return await act(request, plan_id, lambda c, ref, f, who: c.resume(ref, principal=who), "resumed")

    return router
