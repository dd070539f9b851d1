"""The client's local backend: the coordinator and the read side, called in this process.

It owns what a process of the control plane needs — the Celery app (the dispatcher's), a
database pool, the bus, a :class:`~orchestrator.control.coordinator.Coordinator` for the
commands and a :class:`~orchestrator.control.reads.PlanReads` for the reads — and, with no
broker configured, the embedded worker (:mod:`orchestrator.fleet.embedded`), which lives as
long as the backend. The API (:mod:`orchestrator.api`) serves one of these; the operator's
tools and the tests reach its parts through :attr:`Conclave.local
<orchestrator.client.conclave.Conclave.local>`.

The caller is the operator: every tenant's plans are in reach, and a plan it submits
belongs to the default tenant. With ``tenant``, it acts for that tenant instead — what
``conclave --tenant T`` / ``CONCLAVE_TENANT`` does: its plans are submitted into ``T`` (so a
token of ``T`` sees them, at ``/ui/`` too) and only ``T``'s plans are in reach, as for one
of its tokens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from orchestrator.briefing.documents import CitationView, DocumentSummary, DocumentView
from orchestrator.client.backend import PlanSource
from orchestrator.client.local_briefing import load_local_plan
from orchestrator.control.coordinator import CancelResult, Coordinator, ForkResult, ResumeResult, SubmitResult
from orchestrator.control.dispatch import CeleryDispatcher
from orchestrator.control.eval_records import EvalRecords
from orchestrator.control.people import AnswerResult, ApprovalResult, SendBackResult, SteerResult
from orchestrator.control.plan_query import Moment, PlanQuery, Values, page_dict
from orchestrator.control.reads import PlanReads
from orchestrator.core.bus import Bus, Subscription, open_bus
from orchestrator.core.errors import NotReady, storage_boundary
from orchestrator.core.settings import Settings
from orchestrator.fleet.celery_app import Shared, build_app, share
from orchestrator.plan.plan_diff import Comparison
from orchestrator.plan.views import PlanView
from orchestrator.webhooks.courier import Courier
from orchestrator.webhooks.endpoints import (
    ROTATION_SECONDS,
    EndpointSecret,
    WebhookEndpoints,
    delivery_cursor,
)
from storage import Database, upgrade
from storage.evals import EvalCreated, EvalRecord, EvalSummary
from storage.identity import READ, WRITE, Principal, check_tenant
from storage.read_models import EventRecord
from storage.webhook_outbox import DeliveryPage, EndpointRecord

log = logging.getLogger(__name__)
PAGE = 500  # stored events read at a time by watch()
CLI_PRINCIPAL = "cli"  # the id audit events record for a tenant's local caller


def tenant_principal(tenant: str) -> Principal:
    """The caller a local client acting for ``tenant`` is: it reads and writes that tenant's
    plans only (audit events name it ``conclave CLI``). ``ValueError`` for a malformed tenant."""
    return Principal(CLI_PRINCIPAL, "conclave CLI", check_tenant(tenant), (READ, WRITE))


class LocalBackend:
    tenant: str | None = None  # the operator unless set (see the module docstring)
    principal: Principal | None = None
    def __init__(self, settings: Settings, *, db: Database | None = None, bus: Bus | None = None,
                 worker: bool = True, tenant: str | None = None) -> None:
        self.settings = settings
        self.tenant = tenant
        #: who calls: None, the operator (every tenant); or a reader and writer of ``tenant`` only
        self.principal = None if tenant is None else tenant_principal(tenant)
        self.app = build_app(settings)
        if settings.embedded:
            upgrade(settings.effective_database_url)
        self.db = db or settings.open_database()
        self._owns_bus = bus is None
        self.bus = bus = bus or open_bus(settings.redis_url)
        self.coordinator = Coordinator(self.db, settings, CeleryDispatcher(self.app), bus)
        self.reads = PlanReads(self.db)
        self.evals = EvalRecords(self.db)
        self.webhooks = WebhookEndpoints(self.db, settings)
        # a worker running in this process (embedded mode) shares these instead of
        # building its own: see orchestrator.fleet.celery_app.Shared
        self._shared = Shared(settings, self.db, bus, self.coordinator)
        share(self.app, self._shared)
        self._embedded: Any = None
        self._courier: Courier | None = None
        if settings.embedded and worker:
            self._start_embedded()

    def _start_embedded(self) -> None:
        from orchestrator.fleet.embedded import EmbeddedWorker

        self._embedded = EmbeddedWorker(self.app, self.coordinator, concurrency=self.settings.concurrency,
                                        reconcile_every=self.settings.reconcile_interval)
        self._embedded.start()
        if self.settings.webhook_key is not None:  # this process is the worker: it delivers webhooks too
            self._courier = Courier(self.db, self.settings)
            self._courier.start()

    def __repr__(self) -> str:
        return f"LocalBackend({'embedded' if self.settings.embedded else 'cluster'}" + (
            f", tenant={self.tenant!r})" if self.tenant is not None else ")")

    # -------------------------------------------------------------- operations

    def submit_result(self, plan: PlanSource) -> SubmitResult:
        # embedded, this process is the user's side: it reads the briefing's paths (a
        # cluster's coordinator refuses a plan that still names one), and it is the worker:
        # a model whose key is not in this environment refuses the plan before it starts
        if self.settings.embedded:
            local = load_local_plan(plan, self.settings)
            for skipped in local.skipped:
                log.warning("briefing: skipped %s: %s", skipped.path, skipped.reason,
                            extra={"action": "briefing.skipped"})
            plan = local.plan
            self.coordinator.models.check_plan(local.plan)  # an unknown model first, as on a cluster
            self.coordinator.models.check_credentials(local.plan)
        return self.coordinator.submit(plan, principal=self.principal)

    def get(self, plan_id: str) -> PlanView:
        return self.reads.view(plan_id, principal=self.principal)

    def result(self, plan_id: str) -> str:
        text = self.reads.result_text(plan_id, principal=self.principal)
        if text is None:
            raise NotReady(f"plan {plan_id} has no result yet ({self.get(plan_id).status})")
        return text

    def phase_text(self, plan_id: str, key: str) -> str | None:
        return self.reads.phase_text(self._id(plan_id), key)

    def citations(self, plan_id: str, key: str | None = None) -> list[CitationView]:
        plan = self.reads.get_plan(plan_id, principal=self.principal)
        text = self.reads.result_text(plan.id) if key is None else self.reads.phase_text(plan.id, key)
        return self.reads.citations(plan.id, text) if text else []

    def documents(self, plan_id: str) -> list[DocumentSummary]:
        return self.reads.documents(plan_id, principal=self.principal)

    def document(self, plan_id: str, doc_id: str) -> DocumentView:
        return self.reads.document(plan_id, doc_id, principal=self.principal)

    def update(self, plan_id: str, changes: dict[str, Any]) -> PlanView:
        plan = self.coordinator.update(plan_id, changes, principal=self.principal)
        return self.reads.view(plan.id, principal=self.principal)

    def cancel(self, plan_id: str) -> CancelResult:
        return self.coordinator.cancel(plan_id, principal=self.principal)

    def resume(self, plan_id: str, *, retry_failed: bool = False) -> ResumeResult:
        return self.coordinator.resume(plan_id, retry_failed=retry_failed, principal=self.principal)

    def answer(self, plan_id: str, key: str, text: str, *, idempotency_key: str | None = None) -> AnswerResult:
        return self.coordinator.answer(plan_id, key, text, idempotency_key=idempotency_key, principal=self.principal)

    def approve(self, plan_id: str) -> ApprovalResult:
        return self.coordinator.approve(plan_id, principal=self.principal)

    def send_back(self, plan_id: str, note: str) -> SendBackResult:
        return self.coordinator.send_back(plan_id, note, principal=self.principal)

    def steer(self, plan_id: str, note: str) -> SteerResult:
        return self.coordinator.steer(plan_id, note, principal=self.principal)

    def fork(self, plan_id: str, from_phase: str, overrides: dict[str, Any] | None = None) -> ForkResult:
        return self.coordinator.fork(plan_id, from_phase, overrides, principal=self.principal)

    def diff(self, a: str, b: str) -> Comparison:
        return self.reads.diff(a, b, principal=self.principal)

    def list_plans(self, *, status: Values = None, label: Values = None, created_after: Moment = None,
                   created_before: Moment = None, task_id: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> dict[str, Any]:
        query = PlanQuery.check(status=status, label=label, created_after=created_after,
                                created_before=created_before, task_id=task_id, limit=limit, cursor=cursor)
        return page_dict(self.reads.list_plans(principal=self.principal, **query.as_filters()))

    def events(self, plan_id: str, after: int = 0) -> Iterator[EventRecord]:
        yield from self.reads.list_events(self._id(plan_id), after=after)

    def watch(self, plan_id: str, after: int = 0, poll: float = 0.5) -> Iterator[dict[str, Any]]:
        plan_id = self._id(plan_id)
        sub = self.subscribe(plan_id)  # before the first read: no gap
        try:
            last = after
            while True:
                final = self.reads.get_plan(plan_id).final  # first: the events read next include its end
                stored = self.reads.list_events(plan_id, after=last, limit=PAGE)
                for e in stored:
                    yield {**e.message(), "created_at": e.created_at.isoformat()}
                    last = e.id
                if len(stored) == PAGE:
                    continue
                if final:
                    return
                deadline = time.monotonic() + poll
                while (left := deadline - time.monotonic()) > 0:
                    msg = sub.get(left)
                    if msg is None:
                        break
                    if msg.get("type") == "chunk":
                        yield msg
                    elif isinstance(msg.get("id"), int) and msg["id"] > last:
                        break  # a stored event: read it from the database, in order
        finally:
            sub.close()

    def _id(self, ref: str) -> str:
        """The id of the plan ``ref`` names (an id, a unique prefix of one, a task id), in reach."""
        with storage_boundary():
            return self.reads.resolve(ref, self.principal)

    def subscribe(self, plan_id: str) -> Subscription:
        return self.bus.subscribe(self._id(plan_id))

    def create_eval(self, name: str, spec: dict[str, Any]) -> EvalCreated:
        return self.evals.create(name, spec)

    def get_eval(self, name: str) -> EvalRecord:
        return self.evals.get(name)

    def list_evals(self, *, limit: int = 100) -> list[EvalSummary]:
        return self.evals.list_evals(limit=limit)

    def create_webhook(self, url: str, events: list[str], *, description: str | None = None) -> EndpointSecret:
        return self.webhooks.create(url, events, description=description, principal=self.principal)

    def list_webhooks(self) -> list[EndpointRecord]:
        return self.webhooks.list_endpoints(principal=self.principal)

    def get_webhook(self, webhook_id: str) -> EndpointRecord:
        return self.webhooks.get(webhook_id, principal=self.principal)

    def delete_webhook(self, webhook_id: str) -> None:
        self.webhooks.delete(webhook_id, principal=self.principal)

    def rotate_webhook_secret(self, webhook_id: str, *, previous_valid_for: float = ROTATION_SECONDS) -> EndpointSecret:
        return self.webhooks.rotate(webhook_id, previous_for=timedelta(seconds=previous_valid_for),
                                    principal=self.principal)

    def webhook_deliveries(self, webhook_id: str, *, status: str | None = None, limit: int = 50,
                           cursor: str | int | None = None) -> DeliveryPage:
        return self.webhooks.deliveries(webhook_id, status=status, limit=limit, before=delivery_cursor(cursor),
                                        principal=self.principal)

    def close(self) -> None:
        if self._courier is not None:
            self._courier.stop()
            self._courier = None
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None
        self._shared.close()
        if self._owns_bus:
            self.bus.close()
        self.db.dispose()
