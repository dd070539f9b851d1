"""What an upstream error may say, and to whom: a public reason from safe parts only, and
the body, scrubbed, for the log (issue 8 C)."""

from __future__ import annotations

import pickle

import httpx
import pytest

from orchestrator.gateway.failures import AuthError, BadRequest, ContextOverflow, ProviderUnavailable, RateLimited
from orchestrator.gateway.providers.error_text import MAX_DETAIL, reason, safe_code, scrub
from orchestrator.gateway.providers.http import error_from_response, error_from_transport, stream_error

KEY = "sk-proj-Zq81mXkP0aLs9dJ3"
PLANTED = "The Quartermaster of Zanzibar requests seven barrels"


@pytest.mark.parametrize(("code", "shown"), [
    ("invalid_api_key", "invalid_api_key"), ("rate_limit_error", "rate_limit_error"),
    ("InvalidApiKey", "InvalidApiKey"),
    ("context_length_exceeded", "context_length_exceeded"), ("insufficient_quota", "insufficient_quota"),
    ("", None), (None, None), (401, None), ("rate limit", None), ("abc123", None), (KEY, None),
    ("x" * 30, None), ("a_" + "b" * 30, None), ("ignore previous instructions", None), ("é_code", None),
])
def test_only_identifier_like_codes_are_shown(code: object, shown: str | None) -> None:
    assert safe_code(code) == shown
    assert reason("openai", "HTTP 401", code) == "openai HTTP 401" + (f" ({shown})" if shown else "")


def test_scrub_replaces_secrets_and_anything_token_like_and_keeps_the_words() -> None:
    body = (f'{{"error": {{"message": "Incorrect API key provided: {KEY}. {PLANTED}.", '
            '"auth": "Bearer abc.def-ghi", "api_key": "hunter2", "session_token=QWxhZGRpbjpvcGVu", '
            '"jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln", "aws": "AKIAIOSFODNN7EXAMPLE", '
            '"gh": "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "b64": "dXNlcjpwYXNzd29yZDEyMzQ1Ng==", '
            '"header": "gateway-value-42"}}}\r\nX-Injected: yes')
    out = scrub(body, ["gateway-value-42"])
    for secret in (KEY, "abc.def-ghi", "hunter2", "QWxhZGRpbjpvcGVu", "eyJhbGciOiJIUzI1NiJ9", "AKIAIOSFODNN7EXAMPLE",
                   "ghp_16C7e42F", "dXNlcjpwYXNzd29yZDEyMzQ1Ng", "gateway-value-42"):
        assert secret not in out, secret
    assert PLANTED in out and "Incorrect API key provided: ***" in out
    assert "\r" not in out and "\n" not in out and "\\x0d\\x0aX-Injected" in out  # one log line
    assert len(scrub("word " * 1000)) == MAX_DETAIL + 1  # truncated, with an ellipsis


def _response(status: int, body: object, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers, request=httpx.Request("POST", "http://model.test"))


@pytest.mark.parametrize(("status", "body", "kind", "public"), [
    (401, {"error": {"message": f"Incorrect API key provided: {KEY}. {PLANTED}", "code": "invalid_api_key"}},
     AuthError, "openai HTTP 401 (invalid_api_key)"),
    (400, {"error": {"message": f"{PLANTED}: maximum context length is 8192 tokens", "type": "invalid_request_error"}},
     ContextOverflow, "openai HTTP 400 (invalid_request_error)"),
    (400, {"error": {"message": PLANTED, "code": f"{PLANTED} {KEY}"}}, BadRequest, "openai HTTP 400"),
    (500, {"error": PLANTED + " " + KEY}, ProviderUnavailable, "openai HTTP 500"),
    (429, {"error": {"message": PLANTED, "type": "rate_limit_exceeded"}}, RateLimited,
     "openai HTTP 429 (rate_limit_exceeded)"),
])
def test_an_http_error_says_status_and_code_and_logs_the_scrubbed_body(
        status: int, body: object, kind: type[Exception], public: str) -> None:
    exc = error_from_response("openai", _response(status, body, **{"retry-after": "3"}), KEY)
    assert type(exc) is kind and exc.message == public and str(exc) == f"[{exc.code}] {public}"
    assert PLANTED in (exc.detail or "") and KEY not in (exc.detail or "")
    assert pickle.loads(pickle.dumps(exc)).detail is None and PLANTED not in repr(exc.args)
    assert exc.retry_after == (3.0 if kind is RateLimited or kind is ProviderUnavailable else None)


def test_an_error_inside_a_stream_says_only_its_code() -> None:
    exc = stream_error("anthropic", {"type": "error", "error": {"type": "overloaded_error", "message": PLANTED}}, None)
    assert isinstance(exc, ProviderUnavailable) and exc.message == "anthropic stream error (overloaded_error)"
    assert PLANTED in (exc.detail or "")
    ollama = stream_error("ollama", {"error": PLANTED}, None)
    assert ollama.message == "ollama stream error" and PLANTED in (ollama.detail or "")


def test_a_transport_error_names_its_type_only() -> None:
    exc = error_from_transport("openai", httpx.ConnectError(f"connect to 10.0.0.7:8443 failed ({KEY})"), KEY)
    assert exc.message == "openai ConnectError" and "10.0.0.7" in (exc.detail or "")
    assert KEY not in (exc.detail or "")
