"""The control plane and the data plane in one process, with no services: a
:class:`Coordinator` and a :class:`PhaseRunner` over a SQLite file migrated with
``storage.upgrade``, a :class:`RecordingDispatcher` in place of the broker, the
in-memory bus and the offline model. Tests run the recorded canvases by hand, the
way a worker runs them (each lane's phases in order, then ``advance``)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import update

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus, Subscription, drain
from orchestrator.core.settings import Settings
from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.plan.canvas import Advance, Canvas, Chain, Group, Run, Step
from storage import Database, connect, contents, outbox, plans, upgrade, usage
from storage.models import Phase, utcnow
from storage.plans import PlanState
from storage.read_models import EventRecord, UsageRecord
from storage.status import Outcome
from tasks.lease import Lease
from tasks.runner import PhaseRunner
from tests.stored_rows import content_rows

OWNER = "unit:1:runner"


def migrated_template(directory: Path) -> Path:
    """An empty database at head, made once and copied per test (migrating takes longer
    than a whole test)."""
    path = directory / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@dataclass
class Planes:
    db: Database
    settings: Settings
    dispatcher: RecordingDispatcher
    bus: MemoryBus
    coordinator: Coordinator
    runner: PhaseRunner
    outcomes: dict[str, list[Outcome | None]] = field(default_factory=dict)  # phase key -> per delivery

    @classmethod
    def open(cls, template: Path, directory: Path, **settings: Any) -> Planes:
        path = directory / "conclave.db"
        shutil.copyfile(template, path)
        url = f"sqlite:///{path}"
        s = Settings(database_url=url, offline_latency=0.0, **settings)
        db = connect(url)
        dispatcher, bus = RecordingDispatcher(), MemoryBus()
        return cls(db, s, dispatcher, bus, Coordinator(db, s, dispatcher, bus),
                   PhaseRunner(db, s, bus, {"offline": OfflineProvider(testing=s.testing)}))

    def close(self) -> None:
        self.db.dispose()

    # ------------------------------------------------------------- as a worker would

    def deliver(self, phase_id: str, key: str, owner: str = OWNER, plan_id: str | None = None) -> Outcome | None:
        """One ``run_phase`` delivery: claim, and run what was claimed."""
        work = self.runner.claim(phase_id, owner=owner, plan_id=plan_id)
        outcome = None if work is None else self.runner.execute(work, Lease(phase_id, work.attempt))
        self.outcomes.setdefault(key, []).append(outcome)
        return outcome

    def run_canvas(self, canvas: Canvas) -> None:
        """Run a canvas the way Celery does, one worker: a chain's steps in order, a
        group's lanes one after the other (a chord's body after all of them)."""
        self.run_step(canvas.plan_id, canvas.root)

    def run_step(self, plan_id: str, step: Step) -> None:
        if isinstance(step, Run):
            self.deliver(step.phase_id, step.key, plan_id=plan_id)
        elif isinstance(step, Advance):
            self.coordinator.advance(plan_id)
        elif isinstance(step, Chain):
            for s in step.steps:
                self.run_step(plan_id, s)
        elif isinstance(step, Group):
            for s in step.lanes:
                self.run_step(plan_id, s)

    def run_all(self, max_canvases: int = 100) -> int:
        """Run recorded canvases (and those they lead to) until none is left."""
        ran = 0
        while canvases := self.dispatcher.take():
            for canvas in canvases:
                self.run_canvas(canvas)
                ran += 1
                assert ran <= max_canvases, "the plan does not converge"
        return ran

    # ------------------------------------------------------------- what is stored

    def state(self, plan_id: str) -> PlanState:
        return plans.load_state(self.db, plan_id)

    def statuses(self, plan_id: str) -> dict[str, str]:
        return {p.key: p.status for p in self.state(plan_id).phases}

    def events(self, plan_id: str) -> list[EventRecord]:
        return outbox.list_events(self.db, plan_id, limit=100_000)

    def usage(self, plan_id: str) -> list[UsageRecord]:
        return usage.rows_for_plan(self.db, plan_id)

    def contents(self, plan_id: str) -> dict[str, int]:
        return content_rows(self.db, plan_id)

    def text(self, plan_id: str, key: str) -> str | None:
        return contents.read_text(self.db, plan_id, key)

    def expire_lease(self, phase_id: str) -> None:
        """Time passes: the phase's lease is now in the past (its holder went silent)."""
        with self.db.transaction() as s:
            s.execute(update(Phase).where(Phase.id == phase_id).values(lease_expires_at=utcnow()))


def published(sub: Subscription) -> list[dict[str, Any]]:
    return list(drain(sub, 0))
