"""The Python API, on which the CLI and the HTTP API are built.

    from orchestrator import Conclave

    with Conclave.from_settings() as conclave:
        plan_id = conclave.submit("examples/board.yaml")
        conclave.wait(plan_id, timeout=600)
        print(conclave.result(plan_id))

With no broker configured it runs embedded (see :mod:`orchestrator.fleet.embedded`);
the in-process worker lives as long as the client. ``Conclave.connect(url, token=…)``
makes the same calls over the HTTP API instead (:mod:`orchestrator.client.remote`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from orchestrator.briefing.documents import CitationView, DocumentSummary, DocumentView
from orchestrator.client.local_briefing import load_local_plan
from orchestrator.control.coordinator import CancelResult, Coordinator, ResumeResult
from orchestrator.control.dispatch import CeleryDispatcher
from orchestrator.core.bus import Bus, Subscription, open_bus
from orchestrator.core.errors import NotReady
from orchestrator.core.settings import Settings
from orchestrator.fleet.celery_app import Shared, build_app, share
from orchestrator.plan.schema import BoardPlan, TeamPlan
from orchestrator.plan.views import PlanView, wait_final
from storage import Database, connect, upgrade

if TYPE_CHECKING:
    from orchestrator.client.remote import RemoteConclave

PlanSource = str | Path | dict[str, Any] | BoardPlan | TeamPlan
log = logging.getLogger(__name__)
PAGE = 500  # stored events read at a time by watch()


class Conclave:
    def __init__(self, settings: Settings, *, db: Database | None = None, bus: Bus | None = None,
                 worker: bool = True) -> None:
        self.settings = settings
        self.app = build_app(settings)
        if settings.embedded:
            upgrade(settings.effective_database_url)
        self.db = db or connect(settings.effective_database_url, pool_size=4)
        self._owns_bus = bus is None
        self.bus = bus = bus or open_bus(settings.redis_url)
        self.coordinator = Coordinator(self.db, settings, CeleryDispatcher(self.app), bus)
        # a worker running in this process (embedded mode) shares these instead of
        # building its own: see orchestrator.fleet.celery_app.Shared
        self._shared = Shared(settings, self.db, bus, self.coordinator)
        share(self.app, self._shared)
        self._embedded: Any = None
        if settings.embedded and worker:
            self._start_embedded()

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **overrides: Any) -> Conclave:
        """Build from ``CONCLAVE_*`` (or explicit ``database_url=…, broker_url=…``)."""
        if settings is None:
            settings = Settings(**overrides)
        elif overrides:
            settings = settings.model_copy(update=overrides)
        return cls(settings)

    @classmethod
    def connect(cls, url: str, *, token: str | None = None, **options: Any) -> RemoteConclave:
        """The same calls over the HTTP API at ``url``, with ``Authorization: Bearer <token>``
        (:class:`orchestrator.client.remote.RemoteConclave`; ``options``: its timeouts and settings)."""
        from orchestrator.client.remote import RemoteConclave

        return RemoteConclave(url, token=token, **options)

    def _start_embedded(self) -> None:
        from orchestrator.fleet.embedded import EmbeddedWorker

        self._embedded = EmbeddedWorker(self.app, self.coordinator, concurrency=self.settings.concurrency,
                                        reconcile_every=self.settings.reconcile_interval)
        self._embedded.start()

    # -------------------------------------------------------------- operations

    def submit(self, plan: PlanSource) -> str:
        """Store and start a plan (a path, YAML/JSON text, a mapping or a plan object).
        Idempotent per the plan's ``task_id``.

        Embedded, this process is the user's side: briefing ``path`` entries are read
        here (beside the plan file, or in the working directory) and sent as text; files
        left out are logged (:func:`orchestrator.client.local_briefing.load_local_plan` returns
        them). Against a cluster, read them with that function first: the coordinator
        refuses a plan that still names a path."""
        if self.settings.embedded:
            local = load_local_plan(plan, self.settings)
            for skipped in local.skipped:
                log.warning("briefing: skipped %s: %s", skipped.path, skipped.reason,
                            extra={"action": "briefing.skipped"})
            plan = local.plan
        return self.coordinator.submit(plan).plan_id

    def get(self, plan_id: str) -> PlanView:
        return self.coordinator.view(plan_id)

    def wait(self, plan_id: str, timeout: float | None = None, poll: float = 0.25) -> PlanView:
        """Block until the plan is final; raises :class:`WaitTimeout`."""
        return wait_final(self.get, plan_id, timeout, poll)

    def result(self, plan_id: str) -> str:
        """The full text of the final phase (synthesis or final summary)."""
        text = self.coordinator.result_text(plan_id)
        if text is None:
            raise NotReady(f"plan {plan_id} has no result yet ({self.get(plan_id).status})")
        return text

    def phase_text(self, plan_id: str, key: str) -> str | None:
        return self.coordinator.phase_text(self.coordinator.get_plan(plan_id).id, key)

    def citations(self, plan_id: str, key: str | None = None) -> list[CitationView]:
        """The briefing citations of the plan's result (or of phase ``key``), each resolved
        to its passage or flagged ``unresolved``, in text order; [] while there is no text."""
        plan = self.coordinator.get_plan(plan_id)
        text = self.coordinator.result_text(plan.id) if key is None else self.coordinator.phase_text(plan.id, key)
        return self.coordinator.citations(plan.id, text) if text else []

    def documents(self, plan_id: str) -> list[DocumentSummary]:
        """The plan's briefing documents, in briefing order."""
        return self.coordinator.documents(plan_id)

    def document(self, plan_id: str, doc_id: str) -> DocumentView:
        """One briefing document, its text and its chunks' spans (UTF-16 offsets)."""
        return self.coordinator.document(plan_id, doc_id)

    def cancel(self, plan_id: str) -> CancelResult:
        return self.coordinator.cancel(plan_id)

    def resume(self, plan_id: str, *, retry_failed: bool = False) -> ResumeResult:
        return self.coordinator.resume(plan_id, retry_failed=retry_failed)

    def subscribe(self, plan_id: str) -> Subscription:
        """Live messages (text chunks, phase transitions) — may miss some; stored
        events (:meth:`events`) are the record."""
        return self.bus.subscribe(plan_id)

    def events(self, plan_id: str, after: int = 0) -> Iterator[Any]:
        yield from self.coordinator.list_events(plan_id, after=after)

    def watch(self, plan_id: str, after: int = 0, poll: float = 0.5) -> Iterator[dict[str, Any]]:
        """Each stored event after ``after`` exactly once, in id order, with the live text
        chunks between them, until the plan is final — what the API's event stream sends
        (:meth:`orchestrator.client.remote.RemoteConclave.watch`). Chunks may be missed; events never."""
        plan_id = self.coordinator.get_plan(plan_id).id
        sub = self.subscribe(plan_id)  # before the first read: no gap
        try:
            last = after
            while True:
                final = self.coordinator.get_plan(plan_id).final  # first: the events read next include its end
                stored = self.coordinator.list_events(plan_id, after=last, limit=PAGE)
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

    def close(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None
        self._shared.close()
        if self._owns_bus:
            self.bus.close()
        self.db.dispose()

    def __enter__(self) -> Conclave:
        return self

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.close()
