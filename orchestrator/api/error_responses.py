"""Every HTTP error is JSON ``{"error": {"code", "message", "details"}}``.

:class:`~orchestrator.core.errors.ConclaveError` subclasses answer with their
``http_status``; anything unexpected is logged with its traceback and answered
with a generic 500 that carries only a request id. Server-side failures never put
driver messages, hosts or stack frames in a response body.

:class:`CatchAll` is the outermost ASGI middleware, the last line: no exception
reaches uvicorn, and every response carries ``X-Request-ID``.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.core.errors import ConclaveError, ServiceUnavailable

log = logging.getLogger("orchestrator.api")

HTTP_CODES = {400: "http.bad_request", 404: "http.not_found", 405: "http.method_not_allowed",
              413: "http.too_large", 415: "http.unsupported_media_type"}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def conclave_error_response(exc: ConclaveError) -> JSONResponse:
    status = exc.http_status
    message, details = exc.message, exc.details
    if isinstance(exc, ServiceUnavailable):
        # "database unavailable: <driver text>" — keep the first part, log the rest
        log.warning("%s", exc.message, extra={"action": "api.unavailable"})
        message, details = exc.message.split(":", 1)[0], None
    elif status >= 500:
        log.error("server error %s: %s", exc.code, exc.message, exc_info=exc, extra={"action": "api.error"})
        message, details = "internal error", None
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if isinstance(details, dict) and isinstance(details.get("retry_after"), int | float):
        headers["Retry-After"] = str(max(1, math.ceil(details["retry_after"])))
    return JSONResponse(error_body(exc.code, message, details), status_code=status, headers=headers or None)


async def _on_conclave_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ConclaveError)
    return conclave_error_response(exc)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = [{"field": _field(err.get("loc", ())), "message": str(err.get("msg", "invalid"))} for err in exc.errors()]
    first = details[0] if details else {"field": "", "message": "invalid request"}
    return JSONResponse(error_body("request.invalid", f"{first['field']}: {first['message']}", details),
                        status_code=422)


def _field(loc: Any) -> str:
    """``("query", "status", 0)`` → ``status[0]``: the notation plan errors use."""
    out = ""
    for part in loc:
        if part in ("body", "query", "path", "header"):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    field = "method" if status == 405 else "path"
    code = HTTP_CODES.get(status, f"http.{status}")
    message = {404: "no such route", 405: f"method {request.method} not allowed here"}.get(status, str(exc.detail))
    return JSONResponse(error_body(code, message, [{"field": field, "message": message}]), status_code=status,
                        headers=exc.headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ConclaveError, _on_conclave_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


class CatchAll:
    """Outermost middleware: a request id on every response; an unexpected exception
    becomes a logged, generic 500 (or, mid-stream, a logged end of the stream)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4().hex[:16]
        started = False

        async def tagged_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, tagged_send)
        except Exception:
            log.exception("unhandled error in %s %s (request %s)", scope.get("method"), scope.get("path"), rid,
                          extra={"action": "api.error"})
            if not started:
                await _send_json(send, 500, error_body("internal", "internal error", {"request_id": rid}),
                                 [(b"x-request-id", rid.encode())])
