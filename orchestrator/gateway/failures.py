"""Errors of the model gateway.

    LLMError                      code
    ├── RetryableError            (retried with backoff by the gateway)
    │   ├── RateLimited           llm.rate_limited   (honours Retry-After)
    │   ├── ProviderUnavailable   llm.unavailable    (5xx, connection refused/reset)
    │   └── StreamStalled         llm.stream_stalled (no first chunk / idle / deadline)
    └── FatalError                (never retried; the phase fails with this code)
        ├── AuthError             llm.auth
        ├── ModelNotFound         llm.model_not_found
        ├── ContextOverflow       llm.context_overflow
        ├── BadRequest            llm.bad_request
        ├── BudgetExhausted       llm.budget_exhausted
        ├── Unpriced              llm.unpriced          (a budget in dollars, a model without a price)
        ├── CallCancelled         llm.cancelled
        ├── ProviderMisconfigured llm.misconfigured
        ├── ModelNotAllowed       llm.model_not_allowed (not registered / not allowed by the operator)
        ├── EgressRefused         llm.egress_refused    (the URL or an address it reaches is refused)
        └── FaultNotAllowed       llm.fault_not_allowed (a fault switch outside testing mode)

``message`` is public: it is stored as the phase's error and shown by the API and
the event stream, so it is built from safe parts only — our own words, a status, a
provider error code that passed :func:`orchestrator.gateway.providers.error_text.safe_code` — never from
what an upstream server said. That goes in ``detail`` (redacted, truncated), which
the gateway logs on the worker and which is never stored, shown or pickled.

Errors cross process boundaries (Celery task results), so they are plain
picklable exceptions: every constructor argument but ``detail`` is stored in ``args``.
``usage`` carries what the provider reported before the failure, so that
tokens spent by a failed call are still on record.
"""

from __future__ import annotations

from typing import Any

from orchestrator.gateway.token_usage import Usage


class LLMError(Exception):
    code = "llm.error"

    def __init__(self, message: str, *, usage: Usage | None = None, retry_after: float | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage
        self.retry_after = retry_after
        self.detail = detail  # what the provider said, redacted: for the worker log only

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.usage, self.retry_after))

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


def _rebuild(cls: type[LLMError], message: str, usage: Usage | None, retry_after: float | None) -> LLMError:
    return cls(message, usage=usage, retry_after=retry_after)


class RetryableError(LLMError):
    code = "llm.retryable"


class RateLimited(RetryableError):
    code = "llm.rate_limited"


class ProviderUnavailable(RetryableError):
    code = "llm.unavailable"


class StreamStalled(RetryableError):
    code = "llm.stream_stalled"


class FatalError(LLMError):
    code = "llm.fatal"


class AuthError(FatalError):
    code = "llm.auth"


class ModelNotFound(FatalError):
    code = "llm.model_not_found"


class ContextOverflow(FatalError):
    code = "llm.context_overflow"


class BadRequest(FatalError):
    code = "llm.bad_request"


class BudgetExhausted(FatalError):
    code = "llm.budget_exhausted"


class Unpriced(FatalError):
    """A call under a budget in dollars to a model the operator gave no price: it cannot be
    counted, and is never taken to be free."""

    code = "llm.unpriced"


class CallCancelled(FatalError):
    code = "llm.cancelled"


class ProviderMisconfigured(FatalError):
    code = "llm.misconfigured"


class ModelNotAllowed(FatalError):
    """The plan asks for a model the operator did not register or allow (checked again
    by the worker at call time against its own registry and settings)."""

    code = "llm.model_not_allowed"


class EgressRefused(FatalError):
    """A call would go to a URL or address the egress policy refuses
    (:mod:`orchestrator.gateway.egress`); also a redirect, which model calls never follow."""

    code = "llm.egress_refused"


class FaultNotAllowed(FatalError):
    """A test-only behaviour (an offline model's fault switch) was asked for in a
    process that is not in testing mode (``CONCLAVE_TESTING``)."""

    code = "llm.fault_not_allowed"
