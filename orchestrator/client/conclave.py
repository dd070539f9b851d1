"""The Python API, on which the CLI is built: one :class:`Conclave` over a backend.

    from orchestrator import Conclave

    with Conclave.from_settings() as conclave:          # this process: the coordinator
        plan_id = conclave.submit("examples/board.yaml")
        conclave.wait(plan_id, timeout=600)
        print(conclave.result(plan_id))

    with Conclave.connect(url, token=token) as conclave:  # the same calls over the HTTP API
        ...

Every call is written once, here, against :class:`~orchestrator.client.backend.ConclaveBackend`;
:class:`~orchestrator.client.local.LocalBackend` answers it in this process (with no broker
configured it runs embedded, see :mod:`orchestrator.fleet.embedded`, and the in-process
worker lives as long as the client), :class:`~orchestrator.client.over_http.HttpBackend` over
HTTP. Both give the same types and raise the same :mod:`orchestrator.core.errors` classes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

from orchestrator.briefing.documents import CitationView, DocumentSummary, DocumentView
from orchestrator.client.backend import ConclaveBackend, PlanSource
from orchestrator.client.local import LocalBackend
from orchestrator.control.coordinator import CancelResult, ForkResult, ResumeResult, SubmitResult
from orchestrator.control.people import AnswerResult, ApprovalResult, SendBackResult, SteerResult
from orchestrator.control.plan_query import Moment, Values
from orchestrator.core.bus import Bus, Subscription
from orchestrator.core.errors import InvalidConfiguration
from orchestrator.core.settings import Settings
from orchestrator.plan.overrides import assignments
from orchestrator.plan.plan_diff import Comparison
from orchestrator.plan.views import PlanView, wait_final
from orchestrator.webhooks.endpoints import ROTATION_SECONDS, EndpointSecret
from storage import Database
from storage.evals import EvalCreated, EvalRecord, EvalSummary
from storage.read_models import EventRecord
from storage.webhook_outbox import DeliveryPage, EndpointRecord


class Conclave:
    """``Conclave(settings)``: the local backend over ``settings``' database and broker
    (``db``/``bus``: share these instead; ``worker=False``: no embedded worker; ``tenant``:
    act for that tenant — submit into it and reach only its plans — instead of as the
    operator, who reaches every tenant and submits into the default one).
    ``Conclave(backend=…)``: any backend, e.g. one built by :meth:`connect`."""

    def __init__(self, settings: Settings | None = None, *, backend: ConclaveBackend | None = None,
                 db: Database | None = None, bus: Bus | None = None, worker: bool = True,
                 tenant: str | None = None) -> None:
        if backend is None:
            if settings is None:
                raise TypeError("Conclave() needs settings (the local backend's) or a backend")
            backend = LocalBackend(settings, db=db, bus=bus, worker=worker, tenant=tenant)
        elif settings is not None or db is not None or bus is not None or tenant is not None:
            raise TypeError("Conclave(backend=…) takes no settings, db, bus or tenant: its backend has them")
        self.backend = backend

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **overrides: Any) -> Conclave:
        """Build from ``CONCLAVE_*`` (or explicit ``database_url=…, broker_url=…``)."""
        if settings is None:
            settings = Settings(**overrides)
        elif overrides:
            settings = settings.model_copy(update=overrides)
        return cls(settings)

    @classmethod
    def connect(cls, url: str, *, token: str | None = None, **options: Any) -> Conclave:
        """The same calls over the HTTP API at ``url``, with ``Authorization: Bearer <token>``
        (``options``: :class:`~orchestrator.client.over_http.HttpBackend`'s timeouts, settings
        and transport)."""
        from orchestrator.client.over_http import HttpBackend

        return cls(backend=HttpBackend(url, token=token, **options))

    @property
    def settings(self) -> Settings:
        """The user's side's limits for reading a plan and its briefing (and, locally, the deployment's)."""
        return self.backend.settings

    @property
    def local(self) -> LocalBackend:
        """The local backend's parts (coordinator, reads, database, bus) for the operator's
        tools and tests; :class:`InvalidConfiguration` over HTTP, which has none of them."""
        if not isinstance(self.backend, LocalBackend):
            raise InvalidConfiguration(f"{self.backend!r} is not in this process",
                                       details=[{"field": "url", "message": "a remote client has no local parts"}])
        return self.backend

    def __repr__(self) -> str:
        return f"Conclave({self.backend!r})"

    # -------------------------------------------------------------- operations

    def submit(self, plan: PlanSource) -> str:
        """Store and start a plan (a path, YAML/JSON text, a mapping or a plan object) and
        return its id. Idempotent per the plan's ``task_id``.

        Briefing ``path`` entries are read on the user's side (beside the plan file, or in the
        working directory) and sent as text; files left out are logged
        (:func:`orchestrator.client.local_briefing.load_local_plan` returns them). Over HTTP and
        embedded that is this process; a local client of a cluster is not the user's side:
        read them with that function first, the coordinator refuses a plan that names a path."""
        return self.submit_result(plan).plan_id

    def submit_result(self, plan: PlanSource) -> SubmitResult:
        """:meth:`submit`, with the whole answer: ``created`` is False when the plan's
        ``task_id`` was already submitted with this plan; ``enqueued`` lists the phases sent."""
        return self.backend.submit_result(plan)

    def get(self, plan_id: str) -> PlanView:
        """What a user sees of the plan (by id, a unique prefix of it, or ``task_id``): status,
        phases, usage. Every call that takes a plan id takes these too; a prefix several plans
        in reach share is :class:`~orchestrator.core.errors.AmbiguousPlan`, naming them."""
        return self.backend.get(plan_id)

    def wait(self, plan_id: str, timeout: float | None = None, poll: float = 0.25) -> PlanView:
        """Block until the plan is final; raises :class:`WaitTimeout`."""
        return wait_final(self.get, plan_id, timeout, poll)

    def result(self, plan_id: str) -> str:
        """The full text of the final phase (synthesis or final summary); :class:`NotReady`
        while there is none."""
        return self.backend.result(plan_id)

    def phase_text(self, plan_id: str, key: str) -> str | None:
        """A phase's full text; None when it has none (yet), or the plan has no such phase."""
        return self.backend.phase_text(plan_id, key)

    def citations(self, plan_id: str, key: str | None = None) -> list[CitationView]:
        """The briefing citations of the plan's result (or of phase ``key``), each resolved
        to its passage or flagged ``unresolved``, in text order; [] while there is no text."""
        return self.backend.citations(plan_id, key)

    def documents(self, plan_id: str) -> list[DocumentSummary]:
        """The plan's briefing documents, in briefing order."""
        return self.backend.documents(plan_id)

    def document(self, plan_id: str, doc_id: str) -> DocumentView:
        """One briefing document, its text and its chunks' spans (UTF-16 offsets);
        :class:`~orchestrator.core.errors.DocumentNotFound` when the plan has none by that id."""
        return self.backend.document(plan_id, doc_id)

    def update(self, plan_id: str, **changes: Any) -> PlanView:
        """Change the plan's ``title``, ``labels``, or while it runs ``max_debates`` and
        ``priority`` (-2..2: higher first among its tenant's phases held for their share), as
        ``PATCH /v1/plans/{id}`` does; returns the plan as it is now. A wrong value is
        :class:`~orchestrator.core.errors.InvalidPlan` naming the field."""
        return self.backend.update(plan_id, dict(changes))

    def cancel(self, plan_id: str) -> CancelResult:
        """Flag the plan cancelled: queued phases end without running, running ones at their
        next safe point. A final plan stays as it is (``cancelled`` is then empty)."""
        return self.backend.cancel(plan_id)

    def resume(self, plan_id: str, *, retry_failed: bool = False) -> ResumeResult:
        """Enqueue what is ready again from stored status; failed phases rerun only with
        ``retry_failed``. :class:`ResumeInProgress` while another resume holds the plan. When
        nothing was enqueued, ``reason`` says why (final, being cancelled, a live lease until …)."""
        return self.backend.resume(plan_id, retry_failed=retry_failed)

    def answer(self, plan_id: str, key: str, text: str, *, idempotency_key: str | None = None) -> AnswerResult:
        """A person's answer to their seat ``key`` (a phase ``awaiting_input``): stored like a
        model's turn, then the plan moves on. With ``idempotency_key``, sending it again returns
        the stored answer (``replayed``). :class:`~orchestrator.core.errors.SeatNotWaiting` when
        the seat does not wait for it (not asked yet, answered, past its deadline, cancelled)."""
        return self.backend.answer(plan_id, key, text, idempotency_key=idempotency_key)

    def approve(self, plan_id: str) -> ApprovalResult:
        """Approve a plan's draft (``awaiting_approval``): it completes with the draft as its
        result; :class:`~orchestrator.core.errors.NotAwaitingApproval` otherwise."""
        return self.backend.approve(plan_id)

    def send_back(self, plan_id: str, note: str) -> SendBackResult:
        """Send a plan's draft back once with ``note``: it is rewritten, then waits for approval
        again; :class:`~orchestrator.core.errors.AlreadyRevised` for a second send-back."""
        return self.backend.send_back(plan_id, note)

    def steer(self, plan_id: str, note: str) -> SteerResult:
        """Give a running meeting a note: every phase that starts from now on is given it, with
        who sent it; a phase already running is not changed."""
        return self.backend.steer(plan_id, note)

    def fork(self, plan_id: str, from_phase: str, overrides: dict[str, Any] | None = None, *,
             changes: Sequence[str] = ()) -> ForkResult:
        """A what-if fork of the plan: a new plan, ``overrides`` (a partial plan) merged over its
        spec, and ``changes`` (``"experts[1].model=gpt"``, as ``conclave fork --set`` takes them)
        over those. Its phases before ``from_phase`` (a phase key, or a board's round ``"r2"``)
        are copied from the plan where what they would be sent is unchanged — their contents
        shared, no cost — and the others run. Submitted like any plan (model checks, admission,
        budgets, its own ``task_id``); ``reused`` and ``rerun`` say what it copied and what runs
        anyway. Field errors name ``from`` or ``overrides.<field>``."""
        merged = assignments(changes, overrides, option="changes") if changes else overrides
        return self.backend.fork(plan_id, from_phase, merged)

    def diff(self, a: str, b: str) -> Comparison:
        """Plans ``a`` and ``b`` side by side: their decision records, the final texts' line diff,
        which phases each reused or ran (and whether their texts are the same, or shared), cost."""
        return self.backend.diff(a, b)

    def list_plans(self, *, status: Values = None, label: Values = None, created_after: Moment = None,
                   created_before: Moment = None, task_id: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> dict[str, Any]:
        """One page of the plans in reach (a token's tenant over HTTP; every tenant's
        locally), newest first: ``{"plans": [...], "next_cursor": str | None}``; pass
        ``next_cursor`` back as ``cursor`` for the next. A plan matches any of the statuses
        and every one of the labels given; ``limit`` defaults to 50."""
        return self.backend.list_plans(status=status, label=label, created_after=created_after,
                                       created_before=created_before, task_id=task_id, limit=limit, cursor=cursor)

    def events(self, plan_id: str, after: int = 0) -> Iterator[EventRecord]:
        """The stored events after ``after``, in id order. Locally, those stored now; over
        HTTP the API serves them as a stream, so for a running plan this follows it to its end."""
        return self.backend.events(plan_id, after)

    def watch(self, plan_id: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """Each stored event after ``after`` (``{"id", "type", "phase", "data", "created_at"}``)
        exactly once, in id order, with the live text chunks (``{"type": "chunk", "phase",
        "expert", "seq", "text"}``) between them, until the plan is final — what the API's
        event stream sends. Chunks may be missed; events never."""
        return self.backend.watch(plan_id, after)

    def subscribe(self, plan_id: str) -> Subscription:
        """Live messages (text chunks, phase transitions) behind ``get(timeout)`` /
        ``close()`` — may miss some; stored events (:meth:`events`) are the record."""
        return self.backend.subscribe(plan_id)

    def create_eval(self, name: str, spec: dict[str, Any]) -> EvalCreated:
        """Store an eval's record (its resolved spec: :func:`orchestrator.evaluation.spec.resolve`)
        under ``name``, or return the stored one when it is the same (``created`` False);
        :class:`~orchestrator.core.errors.EvalConflict` when the name holds another spec."""
        return self.backend.create_eval(name, spec)

    def get_eval(self, name: str) -> EvalRecord:
        """The eval stored under ``name``; :class:`~orchestrator.core.errors.EvalNotFound`."""
        return self.backend.get_eval(name)

    def list_evals(self, *, limit: int = 100) -> list[EvalSummary]:
        """The evals in reach, newest first (no specs: :meth:`get_eval` has them)."""
        return self.backend.list_evals(limit=limit)

    def create_webhook(self, url: str, events: list[str], *, description: str | None = None) -> EndpointSecret:
        """Register a webhook endpoint in the caller's tenant for ``events`` (``input_requested``,
        ``awaiting_approval``, ``plan_finished``, or ``["*"]``); ``url`` must be within the
        operator's ``CONCLAVE_WEBHOOK_URLS``. The answer's ``secret`` is shown only now: store it
        to verify signatures (docs/api.md, "Webhooks"). :class:`~orchestrator.core.errors.InvalidWebhook`
        names a wrong field; :class:`~orchestrator.core.errors.WebhooksNotConfigured` when the
        operator has not enabled webhooks."""
        return self.backend.create_webhook(url, events, description=description)

    def list_webhooks(self) -> list[EndpointRecord]:
        """The endpoints in reach (never their secrets), oldest first."""
        return self.backend.list_webhooks()

    def get_webhook(self, webhook_id: str) -> EndpointRecord:
        """One endpoint; :class:`~orchestrator.core.errors.WebhookNotFound` (also another tenant's)."""
        return self.backend.get_webhook(webhook_id)

    def delete_webhook(self, webhook_id: str) -> None:
        """Delete an endpoint and its deliveries: nothing more is sent to it."""
        self.backend.delete_webhook(webhook_id)

    def rotate_webhook_secret(self, webhook_id: str, *,
                              previous_valid_for: float = ROTATION_SECONDS) -> EndpointSecret:
        """A new signing secret, shown only now; the previous one still signs beside it for
        ``previous_valid_for`` seconds (0: it stops at once), so the receiver can switch."""
        return self.backend.rotate_webhook_secret(webhook_id, previous_valid_for=previous_valid_for)

    def webhook_deliveries(self, webhook_id: str, *, status: str | None = None, limit: int = 50,
                           cursor: str | int | None = None) -> DeliveryPage:
        """What became of an endpoint's deliveries, newest event first: each one's status
        (``pending``, ``delivered``, ``failed``), attempts, last status code or error and next
        attempt; pass ``next_cursor`` back as ``cursor`` for the next page."""
        return self.backend.webhook_deliveries(webhook_id, status=status, limit=limit, cursor=cursor)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Conclave:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
