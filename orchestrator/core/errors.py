"""Errors users see, each with a stable code the CLI prints and the API returns.

    ConclaveError                 conclave.error          HTTP 500 / exit 1
    ├── InvalidPlan               plan.invalid            422 / exit 2   (names the field)
    ├── PlanNotFound              plan.not_found          404 / exit 2
    │   ├── PhaseNotFound         phase.not_found         404
    │   └── DocumentNotFound      document.not_found      404            (names ``doc_id``)
    ├── AmbiguousPlan             plan.ambiguous          409 / exit 2   (an id prefix: names the candidates)
    ├── PlanConflict              plan.conflict           409 / exit 1
    │   ├── ResumeInProgress      plan.resume_in_progress 409
    │   ├── NotReady              plan.not_ready          409            (no result yet)
    │   ├── SeatNotWaiting        phase.not_waiting       409            (an answer the seat cannot take)
    │   ├── NotAwaitingApproval   plan.not_awaiting_approval 409         (approve / send back)
    │   ├── AlreadyRevised        plan.already_revised    409            (a second send-back)
    │   ├── PlanNotRunning        plan.not_running        409            (steering a plan that has ended)
    │   ├── TooManyNotes          plan.too_many_notes     409            (steering past the limit)
    │   ├── CapacityExceeded      plan.capacity_exceeded  429
    │   ├── SubmitRateLimited     plan.rate_limited       429            (``retry_after`` seconds)
    │   └── TenantBudgetExhausted tenant.budget_exhausted 402            (``details``: budget, spent, month)
    ├── ServiceUnavailable        service.unavailable     503 / exit 1
    ├── WaitTimeout               plan.wait_timeout       408 / exit 1
    ├── InvalidEval               eval.invalid            422 / exit 2   (names the spec's field)
    ├── EvalNotFound              eval.not_found          404 / exit 2
    ├── EvalConflict              eval.conflict           409 / exit 2   (the name holds another spec)
    ├── InvalidWebhook            webhook.invalid         422 / exit 2   (names the field: ``url``, ``events``, …)
    ├── WebhookNotFound           webhook.not_found       404 / exit 2   (or another tenant's)
    ├── WebhookConflict           webhook.conflict        409 / exit 1
    │   ├── WebhooksNotConfigured webhook.not_configured  409            (no CONCLAVE_WEBHOOK_SECRET_KEY)
    │   └── WebhookLimitReached   webhook.limit_reached   409            (the tenant's endpoints are at the limit)
    ├── InvalidRequest            request.invalid         422            (HTTP: names the field)
    │   ├── MalformedBody         request.malformed       400
    │   ├── BodyTooLarge          request.too_large       413
    │   └── UnsupportedMediaType  request.unsupported_media_type 415
    ├── Unauthorized              auth.unauthorized       401
    ├── TooManyStreams            request.too_many_streams 429
    └── InvalidConfiguration      config.invalid          500 / exit 2   (names the variable / file field)

Storage errors are translated here (``raise … from``); SQLAlchemy names never
reach the API or the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from storage import exceptions as storage_errors

P = ParamSpec("P")
R = TypeVar("R")


class ConclaveError(Exception):
    code = "conclave.error"
    http_status = 500

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


def _rebuild(cls: type[ConclaveError], message: str, details: Any) -> ConclaveError:
    return cls(message, details=details)


class InvalidPlan(ConclaveError):
    code = "plan.invalid"
    http_status = 422


class PlanNotFound(ConclaveError):
    code = "plan.not_found"
    http_status = 404


class AmbiguousPlan(ConclaveError):
    """An id prefix several plans in reach share; the message lists them."""

    code = "plan.ambiguous"
    http_status = 409


class PlanConflict(ConclaveError):
    code = "plan.conflict"
    http_status = 409


class ResumeInProgress(PlanConflict):
    code = "plan.resume_in_progress"


class CapacityExceeded(PlanConflict):
    code = "plan.capacity_exceeded"
    http_status = 429


class SubmitRateLimited(PlanConflict):
    """The tenant submitted ``CONCLAVE_SUBMIT_RATE`` plans in the last minute; retry in
    ``retry_after`` seconds (also in ``details``: the API answers 429 + Retry-After)."""

    code = "plan.rate_limited"
    http_status = 429

    @property
    def retry_after(self) -> int:
        details = self.details if isinstance(self.details, dict) else {}
        return int(details.get("retry_after", 1))


class TenantBudgetExhausted(PlanConflict):
    """The tenant's budget for the calendar month (UTC) is spent: no new plan this month.
    ``details`` names the tenant, the budget and what was spent, in US dollars, and the month."""

    code = "tenant.budget_exhausted"
    http_status = 402


class PhaseNotFound(PlanNotFound):
    code = "phase.not_found"


class DocumentNotFound(PlanNotFound):
    """The plan has no briefing document with this id."""

    code = "document.not_found"


class NotReady(PlanConflict):
    code = "plan.not_ready"


class SeatNotWaiting(PlanConflict):
    """An answer to a phase that is not a person's seat waiting for it — not asked yet, already
    answered, past its deadline, cancelled — or to a plan that was cancelled. ``details`` name
    the phase (``key``) and its ``status``; nothing was stored."""

    code = "phase.not_waiting"


class NotAwaitingApproval(PlanConflict):
    """Approve or send back a plan that is not waiting for approval (it runs, was approved, or
    was cancelled: ``details`` give its ``status``)."""

    code = "plan.not_awaiting_approval"


class AlreadyRevised(PlanConflict):
    """A second send-back: a draft is sent back once; approve the revision or cancel the plan."""

    code = "plan.already_revised"


class PlanNotRunning(PlanConflict):
    """Steering a plan that no longer runs (it ended, or waits for approval: send it back instead)."""

    code = "plan.not_running"


class TooManyNotes(PlanConflict):
    """A plan holds a bounded number of steering notes: every later phase is given them all."""

    code = "plan.too_many_notes"


class InvalidEval(ConclaveError):
    """An eval spec (``conclave eval``) that cannot run; ``details`` names the field."""

    code = "eval.invalid"
    http_status = 422


class EvalNotFound(ConclaveError):
    code = "eval.not_found"
    http_status = 404


class EvalConflict(ConclaveError):
    """The eval's name is taken by an eval with another spec."""

    code = "eval.conflict"
    http_status = 409


class InvalidWebhook(ConclaveError):
    """A webhook endpoint that cannot be registered as given; ``details`` names the field
    (``url``: refused by the operator's allowlist or the address rules, ``events[1]``, …)."""

    code = "webhook.invalid"
    http_status = 422


class WebhookNotFound(ConclaveError):
    """No webhook endpoint by that id in reach (another tenant's answers the same)."""

    code = "webhook.not_found"
    http_status = 404


class WebhookConflict(ConclaveError):
    code = "webhook.conflict"
    http_status = 409


class WebhooksNotConfigured(WebhookConflict):
    """The operator set no ``CONCLAVE_WEBHOOK_SECRET_KEY``: no endpoint can be registered."""

    code = "webhook.not_configured"


class WebhookLimitReached(WebhookConflict):
    code = "webhook.limit_reached"


class ServiceUnavailable(ConclaveError):
    code = "service.unavailable"
    http_status = 503


class WaitTimeout(ConclaveError):
    code = "plan.wait_timeout"
    http_status = 408


class InvalidRequest(ConclaveError):
    """An HTTP request that is wrong apart from the plan in it (a header, a query
    parameter, a path segment, the body's encoding). ``details`` names the field."""

    code = "request.invalid"
    http_status = 422


class MalformedBody(InvalidRequest):
    code = "request.malformed"
    http_status = 400


class BodyTooLarge(InvalidRequest):
    code = "request.too_large"
    http_status = 413


class UnsupportedMediaType(InvalidRequest):
    code = "request.unsupported_media_type"
    http_status = 415


class Unauthorized(ConclaveError):
    code = "auth.unauthorized"
    http_status = 401


class Forbidden(ConclaveError):
    """Authenticated, but the token lacks the scope this route needs."""

    code = "auth.forbidden"
    http_status = 403


class TooManyStreams(ConclaveError):
    code = "request.too_many_streams"
    http_status = 429


class InvalidConfiguration(ConclaveError):
    """The operator's configuration is wrong (a setting, the model registry file):
    the process refuses to start. The message names the variable or file and field."""

    code = "config.invalid"
    http_status = 500


@contextmanager
def storage_boundary() -> Iterator[None]:
    try:
        yield
    except storage_errors.NotFound as exc:
        raise PlanNotFound(str(exc)) from exc
    except storage_errors.Ambiguous as exc:
        raise AmbiguousPlan(str(exc), details=[{"field": "plan_id",
                                                "message": "an id prefix several plans share"}]) from exc
    except storage_errors.Busy as exc:
        raise ResumeInProgress(str(exc)) from exc
    except storage_errors.CapacityExceeded as exc:
        raise CapacityExceeded(str(exc)) from exc
    except storage_errors.RateLimited as exc:
        raise SubmitRateLimited(str(exc), details={"retry_after": exc.retry_after}) from exc
    except storage_errors.BudgetSpent as exc:
        raise TenantBudgetExhausted(str(exc), details=exc.details) from exc
    except storage_errors.Conflict as exc:
        raise PlanConflict(str(exc)) from exc
    except storage_errors.Unavailable as exc:
        raise ServiceUnavailable(f"database unavailable: {exc}") from exc
    except storage_errors.StorageError as exc:
        raise ConclaveError(str(exc)) from exc


def translate_storage(fn: Callable[P, R]) -> Callable[P, R]:
    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with storage_boundary():
            return fn(*args, **kwargs)

    return wrapper
