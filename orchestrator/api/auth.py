"""Who is asking, and what they may do.

:class:`Authenticate` (ASGI middleware, before any body is read) turns
``Authorization: Bearer <token>`` into a :class:`~storage.identity.Principal` on every
``/v1`` request and on ``/metrics``: ``CONCLAVE_API_TOKEN`` (compared in constant time)
or a token made by ``conclave tokens create`` (looked up by the id inside it, its hash
compared in constant time: :func:`storage.principals.authenticate`). A missing, unknown,
malformed or revoked token is 401. With authentication off (``CONCLAVE_AUTH=off``, or
embedded mode without a token) the caller is the operator: ``principal`` None, every
tenant, nothing recorded as an actor.

A browser has a session cookie instead (:mod:`orchestrator.api.session`, opened at
``/ui/login``), accepted on GET and HEAD only, and only when the request carries no
``Authorization`` — and by the plan page's form posts under ``/ui`` only together with the
session's form token (:meth:`Credentials.form_principal`). :class:`Credentials` is what every check goes through: the
middleware's, and the plan page's (:mod:`orchestrator.api.ui`).

:func:`require` is each route's dependency: 403 when the principal lacks the route's
scope. Which plans a principal sees (its tenant's; every tenant's for ``admin``) is the
read side's business (:meth:`orchestrator.control.reads.PlanReads.resolve`).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.api import session
from orchestrator.api.error_responses import conclave_error_response
from orchestrator.api.session import SAFE_METHODS
from orchestrator.core.errors import Forbidden, ServiceUnavailable, Unauthorized, storage_boundary
from orchestrator.core.settings import Settings
from storage import principals
from storage.identity import (
    API_TOKEN_ID,
    Principal,
    api_token_principal,
    matches_api_token,
    session_mac,
    token_hash,
)

PROTECTED = ("/v1", "/metrics")

# Only documents the scheme in the OpenAPI; the middleware does the checking.
bearer_scheme = HTTPBearer(auto_error=False, description="a token from `conclave tokens create`, or "
                                                         "CONCLAVE_API_TOKEN")


def protected(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PROTECTED)


class Credentials:
    """What a presented credential stands for: a bearer token (``CONCLAVE_API_TOKEN``,
    compared in constant time, or a principal's token) or a browser session cookie.
    Fails closed: a configured but empty ``CONCLAVE_API_TOKEN`` matches nothing."""

    def __init__(self, settings: Settings) -> None:
        self.required = settings.auth_required
        secret = settings.api_token.get_secret_value().strip() if settings.api_token is not None else ""
        self._api_token = secret  # a token read from a file often ends in a newline
        self._api_principal = api_token_principal(settings.api_token_scopes, settings.api_token_tenant)
        self.session_seconds = max(60, int(settings.ui_session_hours * 3600))

    async def principal(self, scope: Scope) -> Principal:
        """The principal of a request, or :class:`Unauthorized`: its ``Authorization``
        header, or — on a safe request without one — its session cookie."""
        cookie = session.read(scope)
        if cookie is not None and not _headers(scope, b"authorization") and scope.get("method") in SAFE_METHODS:
            by_session = await self.session_principal(scope["app"], cookie)
            if by_session is None:
                raise Unauthorized("the session has expired or its token was revoked: sign in again at /ui/login",
                                   details=[{"field": "Cookie", "message": "session expired or revoked"}])
            return by_session
        token = _bearer(scope, cookie is not None)
        found = await self.token_principal(scope["app"], token)
        if found is None:
            raise _unauthorized("unknown or revoked token")
        return found

    async def token_principal(self, app: Any, token: str) -> Principal | None:
        """The principal a bearer token stands for, or None (unknown, malformed, revoked)."""
        if matches_api_token(token, self._api_token):
            return self._api_principal
        local = app.state.local

        def lookup() -> Principal | None:
            with storage_boundary():
                return principals.authenticate(local.db, token)

        return await run_in_threadpool(lookup)

    async def form_principal(self, scope: Scope, given: str | None) -> Principal:
        """The principal of a form post from the plan page: a valid session cookie AND that
        session's form token (:func:`orchestrator.api.session.form_token`) in the form. The
        cookie alone authorizes nothing: :class:`Forbidden` without the token, or with another
        session's; :class:`Unauthorized` without a live session."""
        cookie = session.read(scope)
        claim = session.decode(cookie) if cookie is not None else None
        if claim is None:
            raise Unauthorized("sign in to act on a plan: /ui/login",
                               details=[{"field": "Cookie", "message": "no session"}])
        principal = await self.session_principal(scope["app"], cookie or "")
        if principal is None:
            raise Unauthorized("the session has expired or its token was revoked: sign in again at /ui/login",
                               details=[{"field": "Cookie", "message": "session expired or revoked"}])
        if not session.form_token_matches(claim, given):
            raise Forbidden("this form was not sent from a page of this session: reload the plan page and try again",
                            details=[{"field": "csrf", "message": "missing or not this session's form token"}])
        return principal

    def open_session(self, token: str, principal: Principal) -> str:
        """A session cookie's value for the holder of ``token`` (already checked: it is
        ``principal``'s), valid for ``CONCLAVE_UI_SESSION_HOURS``."""
        expires = int(time.time()) + self.session_seconds
        mac = session_mac(token_hash(token), session.message(principal.id, expires))
        return session.encode(principal.id, expires, mac)

    async def session_principal(self, app: Any, value: str) -> Principal | None:
        """The principal a session cookie stands for, or None (not one we made, expired,
        its token revoked or no longer configured)."""
        claim = session.decode(value)
        if claim is None or claim.expired():
            return None
        if claim.principal_id == API_TOKEN_ID:
            if not self._api_token:
                return None
            mac = session_mac(token_hash(self._api_token), claim.message)
            return self._api_principal if hmac.compare_digest(mac, claim.mac) else None
        local = app.state.local

        def lookup() -> Principal | None:
            with storage_boundary():
                return principals.authenticate_session(local.db, claim.principal_id, claim.message, claim.mac)

        return await run_in_threadpool(lookup)


def still_standing(app: Any, principal: Principal | None) -> Callable[[], bool] | None:
    """What a long-lived response (an event stream) asks, now and then, of the credential it
    was opened with: whether the principal's token still stands (not revoked). None when
    there is nothing to re-check: authentication off, or ``CONCLAVE_API_TOKEN``, which only
    the operator's configuration revokes (by restarting the API without it)."""
    if principal is None or principal.id == API_TOKEN_ID:
        return None
    db, principal_id = app.state.local.db, principal.id

    def standing() -> bool:
        with storage_boundary():
            return principals.is_active(db, principal_id)

    return standing


class Authenticate:
    """Resolve the credentials of every protected request to a principal, stored in the
    request's state (``request.state.principal``), or answer 401."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.credentials = Credentials(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if not self.credentials.required:
            state["principal"] = None
            await self.app(scope, receive, send)
            return
        try:
            state["principal"] = await self.credentials.principal(scope)
        except (Unauthorized, ServiceUnavailable) as exc:
            await conclave_error_response(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _headers(scope: Scope, name: bytes) -> list[bytes]:
    return [v for k, v in scope.get("headers", []) if k.lower() == name]


def _bearer(scope: Scope, has_cookie: bool = False) -> str:
    values = _headers(scope, b"authorization")
    if not values:
        raise _unauthorized("missing (a session cookie authenticates only GET and HEAD)" if has_cookie else "missing")
    if len(values) > 1:
        raise _unauthorized("more than one Authorization header")
    scheme, _, given = values[0].strip().partition(b" ")
    token = given.strip()
    if scheme.lower() != b"bearer" or not token:
        raise _unauthorized("not a bearer token")
    try:
        return token.decode("ascii")
    except UnicodeDecodeError:
        raise _unauthorized("unknown or revoked token") from None


def _unauthorized(problem: str) -> Unauthorized:
    return Unauthorized("authentication required: send Authorization: Bearer <token>",
                        details=[{"field": "Authorization", "message": problem}])


def require(scope: str) -> Callable[..., Principal | None]:
    """A route dependency: the caller's principal (None: authentication is off), or 403
    when it lacks ``scope``."""

    def dependency(request: Request, _: object = Depends(bearer_scheme)) -> Principal | None:
        principal: Principal | None = getattr(request.state, "principal", None)
        if principal is not None and not principal.allows(scope):
            raise Forbidden(f"this token may not do that: it needs the {scope} scope",
                            details=[{"field": "Authorization", "message": f"missing scope {scope}"}])
        return principal

    return dependency
