"""The Python API, on which the CLI and the HTTP API are built.

    from orchestrator import Conclave

    with Conclave.from_settings() as conclave:
        plan_id = conclave.submit("examples/board.yaml")
        conclave.wait(plan_id, timeout=600)
        print(conclave.result(plan_id))

With no broker configured it runs embedded (see :mod:`orchestrator.embedded`);
the in-process worker lives as long as the client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from orchestrator.briefing.reading import load_local_plan
from orchestrator.bus import Bus, MemoryBus, RedisBus, Subscription
from orchestrator.celery_app import Shared, build_app, share
from orchestrator.coordinator import CancelResult, Coordinator, ResumeResult
from orchestrator.dispatch import CeleryDispatcher
from orchestrator.errors import PlanNotFound, WaitTimeout, storage_boundary
from orchestrator.schema import BoardPlan, TeamPlan
from orchestrator.settings import Settings
from orchestrator.views import PlanView, plan_view
from storage import Database, connect, upgrade
from storage import usage as usage_repo

PlanSource = str | Path | dict[str, Any] | BoardPlan | TeamPlan
log = logging.getLogger(__name__)


class Conclave:
    def __init__(self, settings: Settings, *, db: Database | None = None, bus: Bus | None = None,
                 worker: bool = True) -> None:
        self.settings = settings
        self.app = build_app(settings)
        if settings.embedded:
            upgrade(settings.effective_database_url)
        self.db = db or connect(settings.effective_database_url, pool_size=4)
        if bus is None:
            bus = RedisBus(settings.redis_url) if settings.redis_url else MemoryBus()
        self.bus = bus
        self.coordinator = Coordinator(self.db, settings, CeleryDispatcher(self.app), bus)
        # a worker running in this process (embedded mode) shares these instead of
        # building its own: see orchestrator.celery_app.Shared
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

    def _start_embedded(self) -> None:
        from orchestrator.embedded import EmbeddedWorker

        self._embedded = EmbeddedWorker(self.app, self.coordinator, concurrency=self.settings.concurrency,
                                        reconcile_every=self.settings.reconcile_interval)
        self._embedded.start()

    # -------------------------------------------------------------- operations

    def submit(self, plan: PlanSource) -> str:
        """Store and start a plan (a path, YAML/JSON text, a mapping or a plan object).
        Idempotent per the plan's ``task_id``.

        Embedded, this process is the user's side: briefing ``path`` entries are read
        here (beside the plan file, or in the working directory) and sent as text; files
        left out are logged (:func:`orchestrator.briefing.reading.load_local_plan` returns
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
        state = self.coordinator.state(plan_id)
        with storage_boundary():
            rows = usage_repo.rows_for_plan(self.db, state.plan.id)
        return plan_view(state, rows)

    def wait(self, plan_id: str, timeout: float | None = None, poll: float = 0.25) -> PlanView:
        """Block until the plan is final; raises :class:`WaitTimeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.get(plan_id)
            if view.final:
                return view
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"plan {plan_id} still {view.status} after {timeout}s")
            time.sleep(poll)

    def result(self, plan_id: str) -> str:
        """The full text of the final phase (synthesis or final summary)."""
        text = self.coordinator.result_text(plan_id)
        if text is None:
            raise PlanNotFound(f"plan {plan_id} has no result yet ({self.get(plan_id).status})")
        return text

    def phase_text(self, plan_id: str, key: str) -> str | None:
        return self.coordinator.phase_text(self.coordinator.get_plan(plan_id).id, key)

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

    def close(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None
        self._shared.close()
        self.db.dispose()

    def __enter__(self) -> Conclave:
        return self

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.close()
