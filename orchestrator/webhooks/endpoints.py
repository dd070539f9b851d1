"""A tenant's webhook endpoints, as the control plane keeps them: what the API, the CLI and
the client call.

Tenancy is the plans': a principal registers in its tenant and reaches only its tenant's
endpoints (an admin's reach, or the operator's — no principal — is every tenant), so another
tenant's endpoint answers as a missing one, on every route. An endpoint receives only its own
tenant's events (migration 0013's trigger joins on the plan's tenant).

Registration checks, before anything is stored: the operator enabled webhooks
(``CONCLAVE_WEBHOOK_SECRET_KEY``, else :class:`WebhooksNotConfigured`); ``url`` passes the
static egress checks of ``CONCLAVE_WEBHOOK_URLS`` (syntax, allowlist, literal addresses,
metadata names: :meth:`~orchestrator.gateway.egress.EgressPolicy.check` — a name is resolved
and checked again at each delivery); ``events`` are deliverable types or ``*``. A wrong one is
:class:`InvalidWebhook` naming the field. The signing secret is derived and returned once, in
the answer to the registration (and to a rotation): it is stored nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from orchestrator.control.reads import reach
from orchestrator.core.errors import (
    ConclaveError,
    InvalidWebhook,
    ServiceUnavailable,
    WebhookLimitReached,
    WebhookNotFound,
    WebhooksNotConfigured,
)
from orchestrator.core.settings import Settings
from orchestrator.gateway.failures import EgressRefused
from orchestrator.webhooks.signing import endpoint_secret
from storage import Database, webhook_outbox
from storage import exceptions as storage_errors
from storage.identity import DEFAULT_TENANT, Principal
from storage.ids import as_plan_id
from storage.models import utcnow
from storage.status import DeliveryStatus
from storage.webhook_outbox import ALL, EVENTS, DeliveryPage, EndpointRecord

MAX_ENDPOINTS = 20  # per tenant: every event of a subscribed type is one row per endpoint
MAX_EVENTS = 20
MAX_DESCRIPTION = 200
#: How long a rotated endpoint's previous secret still signs, unless the rotation says otherwise.
ROTATION_GRACE = timedelta(hours=24)
ROTATION_SECONDS = ROTATION_GRACE.total_seconds()
MAX_ROTATION_GRACE = timedelta(days=7)
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]*$")


@dataclass(frozen=True)
class EndpointSecret:
    """An endpoint and its signing secret: the answer to a registration or a rotation, the
    only time the secret is shown."""

    endpoint: EndpointRecord
    secret: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.endpoint.to_dict(), "secret": self.secret}


def _invalid(field: str, message: str) -> InvalidWebhook:
    return InvalidWebhook(f"{field}: {message}", details=[{"field": field, "message": message}])


def check_url(settings: Settings, url: object) -> str:
    """``url`` if the operator's webhook allowlist admits it statically, else :class:`InvalidWebhook`."""
    if not isinstance(url, str):
        raise _invalid("url", "must be a string")
    try:
        settings.webhook_policy.check(url)
    except EgressRefused as exc:
        raise _invalid("url", exc.message) from None
    return url


def check_events(events: object) -> tuple[str, ...]:
    """The event types, each once, in the order given: deliverable types, or ``*`` alone."""
    if not isinstance(events, list | tuple) or not events:
        raise _invalid("events", f"a non-empty list of event types: {', '.join(EVENTS)}, or {ALL!r} for all")
    if len(events) > MAX_EVENTS:
        raise _invalid("events", f"at most {MAX_EVENTS}")
    chosen: list[str] = []
    for i, event in enumerate(events):
        if not isinstance(event, str) or (event not in EVENTS and event != ALL):
            raise _invalid(f"events[{i}]", f"{str(event)[:60]!r} is not an event a webhook receives "
                                           f"({', '.join(EVENTS)}, or {ALL!r} for all)")
        if event not in chosen:
            chosen.append(event)
    if ALL in chosen and len(chosen) > 1:
        raise _invalid("events", f"{ALL!r} already means every event type: give it alone")
    return tuple(chosen)


def check_description(description: object) -> str | None:
    if description is None:
        return None
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION or not _PRINTABLE.match(description):
        raise _invalid("description", f"at most {MAX_DESCRIPTION} characters, no control characters")
    return description or None


def delivery_cursor(cursor: str | int | None) -> int | None:
    """A deliveries page's ``next_cursor`` (an event id, or it as text), or None for the first page."""
    if cursor is None:
        return None
    text = str(cursor).strip() if isinstance(cursor, str | int) and not isinstance(cursor, bool) else ""
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) == 0:
        raise _invalid("cursor", "not a cursor of this listing (pass next_cursor back)")
    return int(text)


def check_id(endpoint_id: object) -> str:
    """The canonical id of an endpoint reference, else :class:`InvalidWebhook` naming ``webhook_id``."""
    canonical = as_plan_id(endpoint_id) if isinstance(endpoint_id, str) else None
    if canonical is None:
        raise _invalid("webhook_id", "not a webhook id")
    return canonical


class WebhookEndpoints:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    def _key(self) -> bytes:
        key = self.settings.webhook_key
        if key is None:
            raise WebhooksNotConfigured(
                "webhooks are not enabled here: the operator sets CONCLAVE_WEBHOOK_SECRET_KEY (and "
                "CONCLAVE_WEBHOOK_URLS) on the API and the workers",
                details=[{"field": "CONCLAVE_WEBHOOK_SECRET_KEY", "message": "not set"}])
        return key

    def create(self, url: str, events: Sequence[str], *, description: str | None = None,
               principal: Principal | None = None) -> EndpointSecret:
        """Register an endpoint in the principal's tenant (the default tenant without one)."""
        key = self._key()
        url, chosen, description = check_url(self.settings, url), check_events(events), check_description(description)
        tenant = principal.tenant if principal is not None else DEFAULT_TENANT
        with _boundary():
            record = webhook_outbox.create_endpoint(
                self.db, tenant=tenant, url=url, events=chosen, description=description,
                created_by=principal.audit() if principal else None, limit=MAX_ENDPOINTS)
        return EndpointSecret(record, endpoint_secret(key, record.id, record.secret_version))

    def list_endpoints(self, *, principal: Principal | None = None) -> list[EndpointRecord]:
        with _boundary():
            return webhook_outbox.list_endpoints(self.db, tenant=reach(principal))

    def get(self, endpoint_id: str, *, principal: Principal | None = None) -> EndpointRecord:
        with _boundary():
            return webhook_outbox.get_endpoint(self.db, check_id(endpoint_id), tenant=reach(principal))

    def delete(self, endpoint_id: str, *, principal: Principal | None = None) -> EndpointRecord:
        """Delete the endpoint and its deliveries: nothing more is sent to it."""
        with _boundary():
            return webhook_outbox.delete_endpoint(self.db, check_id(endpoint_id), tenant=reach(principal))

    def rotate(self, endpoint_id: str, *, previous_for: timedelta = ROTATION_GRACE,
               principal: Principal | None = None) -> EndpointSecret:
        """A new secret for the endpoint; the previous one signs too for ``previous_for``
        (zero: it stops at once), so a receiver can switch without dropping a delivery."""
        key = self._key()
        if not timedelta(0) <= previous_for <= MAX_ROTATION_GRACE:
            raise _invalid("previous_secret_valid_for", f"between 0 and {int(MAX_ROTATION_GRACE.total_seconds())} "
                                                        "seconds")
        now = utcnow()
        with _boundary():
            record = webhook_outbox.rotate_secret(self.db, check_id(endpoint_id), tenant=reach(principal),
                                                  previous_valid_until=now + previous_for if previous_for else None,
                                                  now=now)
        return EndpointSecret(record, endpoint_secret(key, record.id, record.secret_version))

    def deliveries(self, endpoint_id: str, *, status: str | None = None, limit: int = 50, before: int | None = None,
                   principal: Principal | None = None) -> DeliveryPage:
        """The endpoint's deliveries, newest event first; ``before``: the previous page's ``next_cursor``."""
        try:
            wanted = DeliveryStatus(status) if status is not None else None
        except ValueError:
            raise _invalid("status", f"one of {', '.join(s.value for s in DeliveryStatus)}") from None
        if not 1 <= limit <= webhook_outbox.MAX_LISTED:
            raise _invalid("limit", f"between 1 and {webhook_outbox.MAX_LISTED}")
        with _boundary():
            return webhook_outbox.list_deliveries(self.db, check_id(endpoint_id), tenant=reach(principal),
                                                  status=wanted, limit=limit, before=before)


@contextmanager
def _boundary() -> Iterator[None]:
    """Storage errors as the webhook's errors."""
    try:
        yield
    except storage_errors.NotFound as exc:
        raise WebhookNotFound(str(exc), details=[{"field": "webhook_id", "message": "no such webhook"}]) from exc
    except storage_errors.CapacityExceeded as exc:
        raise WebhookLimitReached(str(exc), details=[{"field": "url", "message": "too many endpoints"}]) from exc
    except storage_errors.Unavailable as exc:
        raise ServiceUnavailable(f"database unavailable: {exc}") from exc
    except storage_errors.StorageError as exc:
        raise ConclaveError(str(exc)) from exc
