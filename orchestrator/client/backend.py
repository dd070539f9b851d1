"""The port under :class:`~orchestrator.client.conclave.Conclave`: what a client backend does.

Two backends implement it — :class:`~orchestrator.client.local.LocalBackend` (the coordinator
and the read side in this process, with the embedded worker when no services are configured)
and :class:`~orchestrator.client.over_http.HttpBackend` (the HTTP API, one ``httpx.Client``) —
and the facade is written once against it, so the two modes cannot drift apart: a call the
facade offers is a call both backends answer, with the same types and the same errors
(:mod:`orchestrator.core.errors`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from orchestrator.briefing.documents import CitationView, DocumentSummary, DocumentView
from orchestrator.control.coordinator import CancelResult, ForkResult, ResumeResult, SubmitResult
from orchestrator.control.people import AnswerResult, ApprovalResult, SendBackResult, SteerResult
from orchestrator.control.plan_query import Moment, Values
from orchestrator.core.bus import Subscription
from orchestrator.core.settings import Settings
from orchestrator.plan.plan_diff import Comparison
from orchestrator.plan.schema import BoardPlan, TeamPlan
from orchestrator.plan.views import PlanView
from orchestrator.webhooks.endpoints import EndpointSecret
from storage.evals import EvalCreated, EvalRecord, EvalSummary
from storage.read_models import EventRecord
from storage.webhook_outbox import DeliveryPage, EndpointRecord

PlanSource = str | Path | dict[str, Any] | BoardPlan | TeamPlan


class ConclaveBackend(Protocol):
    """Each method is documented on the facade (:class:`~orchestrator.client.conclave.Conclave`)."""

    settings: Settings  # the user's side's limits (plan size, briefing files)

    def submit_result(self, plan: PlanSource) -> SubmitResult: ...

    def get(self, plan_id: str) -> PlanView: ...

    def result(self, plan_id: str) -> str: ...

    def phase_text(self, plan_id: str, key: str) -> str | None: ...

    def citations(self, plan_id: str, key: str | None = None) -> list[CitationView]: ...

    def documents(self, plan_id: str) -> list[DocumentSummary]: ...

    def document(self, plan_id: str, doc_id: str) -> DocumentView: ...

    def update(self, plan_id: str, changes: dict[str, Any]) -> PlanView: ...

    def cancel(self, plan_id: str) -> CancelResult: ...

    def resume(self, plan_id: str, *, retry_failed: bool = False) -> ResumeResult: ...

    def answer(self, plan_id: str, key: str, text: str, *, idempotency_key: str | None = None) -> AnswerResult: ...

    def approve(self, plan_id: str) -> ApprovalResult: ...

    def send_back(self, plan_id: str, note: str) -> SendBackResult: ...

    def steer(self, plan_id: str, note: str) -> SteerResult: ...

    def fork(self, plan_id: str, from_phase: str, overrides: dict[str, Any] | None = None) -> ForkResult: ...

    def diff(self, a: str, b: str) -> Comparison: ...

    def list_plans(self, *, status: Values = None, label: Values = None, created_after: Moment = None,
                   created_before: Moment = None, task_id: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> dict[str, Any]: ...

    def events(self, plan_id: str, after: int = 0) -> Iterator[EventRecord]: ...

    def watch(self, plan_id: str, after: int = 0) -> Iterator[dict[str, Any]]: ...

    def subscribe(self, plan_id: str) -> Subscription: ...

    def create_eval(self, name: str, spec: dict[str, Any]) -> EvalCreated: ...

    def get_eval(self, name: str) -> EvalRecord: ...

    def list_evals(self, *, limit: int = 100) -> list[EvalSummary]: ...

    def create_webhook(self, url: str, events: list[str], *, description: str | None = None) -> EndpointSecret: ...

    def list_webhooks(self) -> list[EndpointRecord]: ...

    def get_webhook(self, webhook_id: str) -> EndpointRecord: ...

    def delete_webhook(self, webhook_id: str) -> None: ...

    def rotate_webhook_secret(self, webhook_id: str, *, previous_valid_for: float = ...) -> EndpointSecret: ...

    def webhook_deliveries(self, webhook_id: str, *, status: str | None = None, limit: int = 50,
                           cursor: str | int | None = None) -> DeliveryPage: ...

    def close(self) -> None: ...
