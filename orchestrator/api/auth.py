"""Who may call the API: when ``CONCLAVE_API_TOKEN`` is set, every ``/v1`` request needs
``Authorization: Bearer <token>`` — checked by an ASGI middleware before any body is
read, compared in constant time. Operational routes (``/healthz``, ``/readyz``,
``/metrics``) sit outside ``/v1``.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.api.errors import conclave_error_response
from orchestrator.errors import Unauthorized


class BearerAuth:
    """``Authorization: Bearer <token>`` on every ``/v1`` path when a token is configured.

    Fails closed: a configured but empty token refuses every request.
    """

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.required = token is not None
        token = (token or "").strip()  # a token read from a file often ends in a newline
        self._digest = hashlib.sha256(token.encode()).digest() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.required or not (path == "/v1" or path.startswith("/v1/")):
            await self.app(scope, receive, send)
            return
        problem = self._check(scope)
        if problem is None:
            await self.app(scope, receive, send)
            return
        exc = Unauthorized("authentication required: send Authorization: Bearer <token>",
                           details=[{"field": "Authorization", "message": problem}])
        response = conclave_error_response(exc)
        await response(scope, receive, send)

    def _check(self, scope: Scope) -> str | None:
        values = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
        if not values:
            return "missing"
        if len(values) > 1:
            return "more than one Authorization header"
        scheme, _, given = values[0].strip().partition(b" ")
        if scheme.lower() != b"bearer" or not given.strip():
            return "not a bearer token"
        if self._digest is None:
            return "the server's token is empty; every request is refused"
        if not hmac.compare_digest(hashlib.sha256(given.strip()).digest(), self._digest):
            return "wrong token"
        return None
