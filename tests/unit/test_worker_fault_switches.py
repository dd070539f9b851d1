"""The worker's runtime builds its offline model from the worker's own testing mode (I39):
a fault switch stored with a plan — past submit's checks — never runs in a worker that is
not in testing mode, whatever the stored plan says."""

from __future__ import annotations

from typing import Any

from orchestrator.fleet.celery_app import build_app
from storage.status import PhaseStatus, PlanStatus
from tasks.runtime import build_runtime
from tests.unit.planes import Planes
from tests.unit.stored import example

PANEL = [{"name": "Dana", "role": "Chief Financial Officer"}, {"name": "Ravi", "role": "Chief Technology Officer"}]


def test_a_worker_not_in_testing_mode_refuses_a_stored_fault_switch(planes: Planes, monkeypatch: Any) -> None:
    assert not planes.settings.testing
    runtime = build_runtime(planes.settings, build_app(planes.settings), db=planes.db, bus=planes.bus,
                            coordinator=planes.coordinator)
    try:
        planes.runner = runtime.runner  # run the phases with what the worker process builds
        monkeypatch.setattr(planes.coordinator.models, "check_plan", lambda plan: None)  # got past submit
        plan_id = planes.coordinator.submit(example(
            "board", rounds=1, experts=PANEL,
            models={"default": {"provider": "offline", "max_retries": 0, "options": {"fail": ["Dana"]}}})).plan_id
        planes.run_all()
        opening = planes.state(plan_id).by_key()["opening"]
        assert (opening.status, opening.error_code) == (PhaseStatus.FAILED, "llm.fault_not_allowed")
        assert "options.fail" in (opening.error_message or "")
        assert planes.state(plan_id).plan.status == PlanStatus.FAILED
    finally:
        runtime.close()
