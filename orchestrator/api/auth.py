"""Who is asking, and what they may do.

:class:`Authenticate` (ASGI middleware, before any body is read) turns
``Authorization: Bearer <token>`` into a :class:`~storage.identity.Principal` on every
``/v1`` request and on ``/metrics``: ``CONCLAVE_API_TOKEN`` (compared in constant time)
or a token made by ``conclave tokens create`` (looked up by the id inside it, its hash
compared in constant time: :func:`storage.principals.authenticate`). A missing, unknown,
malformed or revoked token is 401. With authentication off (``CONCLAVE_AUTH=off``, or
embedded mode without a token) the caller is the operator: ``principal`` None, every
tenant, nothing recorded as an actor.

:func:`require` is each route's dependency: 403 when the principal lacks the route's
scope. Which plans a principal sees (its tenant's; every tenant's for ``admin``) is the
coordinator's business (:meth:`orchestrator.coordinator.Coordinator._resolve`).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends, Request
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.api.errors import conclave_error_response
from orchestrator.errors import Forbidden, ServiceUnavailable, Unauthorized, storage_boundary
from orchestrator.settings import Settings
from storage import principals
from storage.identity import Principal, api_token_principal, matches_api_token

PROTECTED = ("/v1", "/metrics")

# Only documents the scheme in the OpenAPI; the middleware does the checking.
bearer_scheme = HTTPBearer(auto_error=False, description="a token from `conclave tokens create`, or "
                                                         "CONCLAVE_API_TOKEN")


def protected(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PROTECTED)


class Authenticate:
    """Resolve the bearer token of every protected request to a principal, stored in the
    request's state (``request.state.principal``), or answer 401. Fails closed: a
    configured but empty ``CONCLAVE_API_TOKEN`` matches nothing."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.required = settings.auth_required
        secret = settings.api_token.get_secret_value().strip() if settings.api_token is not None else ""
        self._api_token = secret  # a token read from a file often ends in a newline
        self._api_principal = api_token_principal(settings.api_token_scopes, settings.api_token_tenant)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if not self.required:
            state["principal"] = None
            await self.app(scope, receive, send)
            return
        try:
            state["principal"] = await self._principal(scope)
        except (Unauthorized, ServiceUnavailable) as exc:
            await conclave_error_response(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _principal(self, scope: Scope) -> Principal:
        token = _bearer(scope)
        if matches_api_token(token, self._api_token):
            return self._api_principal
        client = scope["app"].state.client

        def lookup() -> Principal | None:
            with storage_boundary():
                return principals.authenticate(client.db, token)

        found = await run_in_threadpool(lookup)
        if found is None:
            raise _unauthorized("unknown or revoked token")
        return found


def _bearer(scope: Scope) -> str:
    values = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
    if not values:
        raise _unauthorized("missing")
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
