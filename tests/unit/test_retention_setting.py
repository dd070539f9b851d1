"""``CONCLAVE_RETAIN_FINISHED_DAYS`` at non-default values, through the housekeeper's
sweep (the reconciler, then retention when due): a finished plan younger than the
setting survives, one older is deleted, a running plan is never deleted however old.
Time is driven by the stored ``finished_at``, never by sleeping."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from storage import NotFound, plans
from storage.models import Plan, utcnow
from storage.read_models import NewPhase
from storage.status import PlanStatus
from tasks.housekeeping import Housekeeper
from tests.unit.planes import Planes


@pytest.fixture(params=[2.0, 0.5], ids=["2-days", "half-a-day"])
def kept(request: pytest.FixtureRequest, template_db: Path, tmp_path: Path) -> Iterator[Planes]:
    p = Planes.open(template_db, tmp_path, retain_finished_days=request.param)
    yield p
    p.close()


def _plan(p: Planes, title: str, *, finished_ago: timedelta | None) -> str:
    """A plan created long ago; finished ``finished_ago`` before now (None: still running)."""
    plan_id = plans.create_plan(p.db, title=title, kind="board", spec={"title": title}, task_id=None, max_active=100,
                                phases=[NewPhase("only", "opening", 0, [], meta={"terminal": True})]).plan_id
    values: dict[str, object] = {"created_at": utcnow() - timedelta(days=400)}
    if finished_ago is not None:
        assert plans.finish_plan(p.db, plan_id, PlanStatus.COMPLETED) is not None
        values["finished_at"] = utcnow() - finished_ago
    with p.db.engine.begin() as c:
        c.execute(update(Plan).where(Plan.id == plan_id).values(**values))
    return plan_id


def _exists(p: Planes, plan_id: str) -> bool:
    try:
        plans.get_plan(p.db, plan_id)
    except NotFound:
        return False
    return True


def test_a_finished_plan_is_kept_for_the_days_set_and_deleted_after(kept: Planes) -> None:
    keep = timedelta(days=kept.settings.retain_finished_days)
    margin = min(timedelta(hours=1), keep / 10)
    fresh = _plan(kept, "just finished", finished_ago=timedelta(seconds=1))
    young = _plan(kept, "younger than the setting", finished_ago=keep - margin)
    old = _plan(kept, "older than the setting", finished_ago=keep + margin)
    ancient = _plan(kept, "long gone", finished_ago=keep * 30)
    running = _plan(kept, "still running", finished_ago=None)

    assert Housekeeper(kept.db, kept.coordinator, interval=60, stalled_after=60).sweep()

    kept_now = {name: _exists(kept, pid) for name, pid in
                (("fresh", fresh), ("young", young), ("old", old), ("ancient", ancient), ("running", running))}
    assert kept_now == {"fresh": True, "young": True, "old": False, "ancient": False, "running": True}
    assert plans.get_plan(kept.db, young).status == "completed"
