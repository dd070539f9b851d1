"""The HTTP plumbing every network provider shares: the key, the URL, the error
mapping, where a request may go and the pooled clients.

The providers are :class:`~orchestrator.gateway.providers.http_provider.HttpProvider`
subclasses that hold only their wire format; everything that touches the network goes
through here and through that base class, which guarantees:

* the key is read from ``os.environ[spec.api_key_env]`` at call time and never
  stored; a missing key is ``ProviderMisconfigured`` naming the variable only;
* every HTTP or transport failure becomes an ``LLMError`` of the documented
  tree whose message is built from safe parts only (provider, status, an error
  code that looks like one: :mod:`orchestrator.gateway.providers.error_text`) — never the body, which
  may echo the key; the body goes, redacted, to ``detail`` for the worker's log;
* the extra ``headers`` of a registered model are read from their variables at
  call time and redacted from messages like the key;
* a call of an untrusted spec (a plan-defined model in a cluster) goes only where
  its egress policy allows, to the address that was checked (:func:`aim`,
  :meth:`orchestrator.gateway.egress.EgressPolicy.pin`); such a spec never reads a
  ``CONCLAVE_*`` variable and never sends configured headers;
* redirects are never followed: a 3xx answer fails the call (``llm.egress_refused``);
* one pooled client per process and destination (:func:`client_for`): keep-alive,
  HTTP/1.1, a bounded pool, so a call does not pay for a client and a TLS context, and
  a streaming call aborted by its guard closes its own connection and no other.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from orchestrator.gateway.egress import EgressPolicy
from orchestrator.gateway.failures import (
    AuthError,
    BadRequest,
    ContextOverflow,
    EgressRefused,
    LLMError,
    ModelNotAllowed,
    ModelNotFound,
    ProviderMisconfigured,
    ProviderUnavailable,
    RateLimited,
    StreamStalled,
)
from orchestrator.gateway.providers.error_text import reason, scrub
from orchestrator.gateway.types import ModelSpec

_CONTEXT_WORDS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "reduce the length",
)
_OWN_PREFIX = "CONCLAVE_"  # Conclave's own configuration: never a plan-defined model's key

#: What an upstream body is redacted of: the key and the values of configured headers.
Secrets = str | tuple[str, ...] | None


def api_key(spec: ModelSpec, *, required: bool) -> str | None:
    """The key named by ``spec.api_key_env``, read now. Never logged."""
    if not spec.api_key_env:
        if required:
            raise ProviderMisconfigured(f"model {spec.name!r} ({spec.provider}) needs api_key_env")
        return None
    if not spec.trusted and spec.api_key_env.upper().startswith(_OWN_PREFIX):
        raise ModelNotAllowed(f"model {spec.name!r} may not read {spec.api_key_env}: "
                              "a plan-defined model never reads Conclave's own configuration")
    value = os.environ.get(spec.api_key_env)
    if not value:
        raise ProviderMisconfigured(
            f"environment variable {spec.api_key_env} (api_key_env of model {spec.name!r}) is not set"
        )
    return value


def extra_headers(spec: ModelSpec) -> dict[str, str]:
    """The configured headers of a registered model, their values read now. Never logged."""
    if not spec.headers:
        return {}
    if not spec.trusted:
        raise ModelNotAllowed(f"model {spec.name!r}: only operator-registered models send configured headers")
    values = {}
    for header, variable in spec.headers.items():
        value = os.environ.get(variable)
        if not value:
            raise ProviderMisconfigured(
                f"environment variable {variable} (header {header} of model {spec.name!r}) is not set")
        values[header] = value
    return values


def secrets_of(key: str | None, headers: dict[str, str]) -> Secrets:
    """Everything a message must be redacted of: the key and the configured header values."""
    values = tuple(v for v in (key, *headers.values()) if v)
    return values or None


def endpoint(base_url: str, root_path: str, tail: str) -> str:
    """``root_path + tail`` under a bare server URL, only ``tail`` under a URL with a path."""
    base = base_url.rstrip("/")
    if base.endswith(tail):
        return base
    if urlsplit(base).path in ("", "/"):
        return base + root_path + tail
    return base + tail


def timeouts(spec: ModelSpec, *, streaming: bool) -> httpx.Timeout:
    """Per-read bounds: the guard is stricter, these only make sure a thread ends."""
    read = max(spec.first_chunk_timeout, spec.idle_timeout) + 1.0 if streaming else spec.deadline
    return httpx.Timeout(read, connect=min(10.0, spec.deadline), write=min(30.0, spec.deadline))


def redact(text: str, secret: Secrets) -> str:
    """What an upstream server said, fit for the worker's log only: the key, the configured
    header values and anything token-like replaced, truncated
    (:func:`~orchestrator.gateway.providers.error_text.scrub`)."""
    return scrub(text, (secret,) if isinstance(secret, str) else secret or ())


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``Retry-After`` (seconds or HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(body: bytes) -> tuple[str, str]:
    """(message, code) from an OpenAI, Anthropic or Ollama error body."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data: Any = httpx.Response(200, content=body).json()
    except ValueError:
        return text, ""
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        return str(error.get("message") or text), str(error.get("code") or error.get("type") or "")
    return str(error), ""


def classify(status: int, said: str, code: str, *, public: str, detail: str | None = None,
             retry_after: float | None = None) -> LLMError:
    """The LLMError for an HTTP status and what the provider ``said`` (read for its
    meaning, never repeated): its message is ``public``, ``detail`` is for the log."""
    lowered = f"{said} {code}".lower()
    kind: type[LLMError]
    if status == 429:
        kind = RateLimited
    elif status >= 500 or status == 408:
        kind = ProviderUnavailable
    elif status in (401, 403):
        kind = AuthError
    elif status == 413 or any(word in lowered for word in _CONTEXT_WORDS):
        kind = ContextOverflow
    elif (
        status == 404
        or code == "model_not_found"
        or ("model" in lowered and ("not found" in lowered or "does not exist" in lowered))
    ):
        kind = ModelNotFound
    else:
        kind = BadRequest
    if kind in (RateLimited, ProviderUnavailable):
        return kind(public, retry_after=retry_after, detail=detail)
    return kind(public, detail=detail)


_ERROR_TYPE_STATUS = {
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "overloaded_error": 503,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "invalid_request_error": 400,
}


def stream_error(provider: str, data: Any, secret: Secrets) -> LLMError:
    """Maps an error object that arrived inside a 200 stream; its status comes from
    a numeric ``code`` or a known error type, else it counts as a server error."""
    body = httpx.Response(200, json=data).content
    message, code = _error_text(body)
    if code.isdigit() and 400 <= int(code) < 600:
        status = int(code)
    else:
        status = _ERROR_TYPE_STATUS.get(code.lower(), 400 if code else 500)
    return classify(status, message, code, public=reason(provider, "stream error", code),
                    detail=redact(body.decode("utf-8", errors="replace"), secret))


def error_from_response(provider: str, response: httpx.Response, secret: Secrets) -> LLMError:
    """Reads (a bounded amount of) an error body and maps it; the body may echo the key."""
    try:
        body = response.read()[:8192]
    except httpx.HTTPError:
        body = b""
    message, code = _error_text(body)
    status = response.status_code
    return classify(status, message, code, public=reason(provider, f"HTTP {status}", code),
                    detail=redact(body.decode("utf-8", errors="replace"), secret),
                    retry_after=parse_retry_after(response.headers))


def error_from_transport(provider: str, exc: httpx.TransportError, secret: Secrets) -> LLMError:
    public = f"{provider} {type(exc).__name__}"  # the text may name hosts and addresses: log only
    detail = redact(str(exc), secret)
    if isinstance(exc, httpx.TimeoutException):
        return StreamStalled(public, detail=detail)
    return ProviderUnavailable(public, detail=detail)


def aim(spec: ModelSpec, url: str, headers: dict[str, str]) -> tuple[str, dict[str, str], dict[str, Any]]:
    """Where the request really goes: unchanged for a trusted spec; for an untrusted one
    the URL and every address it resolves to are checked and the request is pinned
    to the checked address (raises ``EgressRefused`` before any connection)."""
    if spec.trusted:
        return url, headers, {}
    pinned = (spec.egress or EgressPolicy()).pin(url)
    return pinned.url, {**headers, **pinned.headers}, pinned.extensions


def refuse_redirect(provider: str, response: httpx.Response) -> None:
    if 300 <= response.status_code < 400:
        raise EgressRefused(f"{provider} answered HTTP {response.status_code} (a redirect); "
                            "model calls never follow redirects")


MAX_CONNECTIONS = 64  # per destination and process: above the worker's default 32 slots
KEEPALIVE_SECONDS = 30.0

_clients: dict[tuple[Any, ...], httpx.Client] = {}
_clients_pid = 0
_clients_lock = threading.Lock()


def client_for(url: str, extensions: dict[str, Any]) -> httpx.Client:
    """This process's client for ``url``'s origin (and the name TLS verifies, for a
    request pinned to an address): made once, shared by every call's thread. A pool is
    keyed by origin alone, so calls pinned to one address for two names never share a
    connection. A forked child starts with none of its parent's."""
    global _clients_pid
    parts = urlsplit(url)
    key = (parts.scheme, parts.hostname, parts.port, extensions.get("sni_hostname"))
    with _clients_lock:
        if _clients_pid != os.getpid():
            _clients.clear()  # the parent's connections are not this process's to use
            _clients_pid = os.getpid()
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = httpx.Client(
                http1=True, http2=False, follow_redirects=False,
                limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS,
                                    keepalive_expiry=KEEPALIVE_SECONDS))
        return client


def client(url: str, extensions: dict[str, Any],
           transport: httpx.BaseTransport | None) -> contextlib.AbstractContextManager[httpx.Client]:
    """The pooled client, or — for a test's own transport — a client of that transport
    for this call only."""
    if transport is None:
        return contextlib.nullcontext(client_for(url, extensions))
    return httpx.Client(transport=transport, follow_redirects=False)
