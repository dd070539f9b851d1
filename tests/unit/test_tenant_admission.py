"""A tenant's admission limits, through ``create_plan`` on the SQLite fixture: the submit rate
(plans created in the last minute) and the active-plan cap (plans running), each counted
from stored plan rows of that tenant only, and what a refused submitter is told. Time is
driven by the stored ``created_at``, never by sleeping."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from storage import plans
from storage.exceptions import CapacityExceeded, RateLimited
from storage.models import Plan, utcnow
from storage.read_models import NewPhase
from storage.status import PlanStatus
from tests.unit.planes import Planes

PHASES = [NewPhase("only", "opening", 0, [], meta={"terminal": True})]


def _submit(p: Planes, tenant: str = "acme", *, max_active: int = 100, submit_rate: int = 0) -> str:
    return plans.create_plan(p.db, title="t", kind="board", spec={"title": "t"}, task_id=None, tenant=tenant,
                             max_active=max_active, submit_rate=submit_rate, phases=PHASES).plan_id


def _stored(p: Planes, tenant: str) -> int:
    with p.db.transaction() as s:
        return s.scalar(select(func.count()).select_from(Plan).where(Plan.tenant == tenant)) or 0


def _created_ago(p: Planes, plan_id: str, ago: timedelta) -> None:
    with p.db.engine.begin() as c:
        c.execute(update(Plan).where(Plan.id == plan_id).values(created_at=utcnow() - ago))


def test_the_submit_rate_refuses_the_next_plan_of_that_tenant_only(planes: Planes) -> None:
    first = _submit(planes, submit_rate=2)
    _submit(planes, submit_rate=2)
    _created_ago(planes, first, timedelta(seconds=30))  # the oldest leaves the window in 30 s
    with pytest.raises(RateLimited) as refused:
        _submit(planes, submit_rate=2)
    assert refused.value.retry_after == 30
    assert refused.value.message == ("tenant 'acme' submitted 2 plans in the last minute, the limit is 2 "
                                     "(CONCLAVE_SUBMIT_RATE); retry in 30s")
    assert _stored(planes, "acme") == 2  # nothing of the refused plan is stored
    _submit(planes, "globex", submit_rate=2)  # another tenant is not limited by acme's plans
    assert _stored(planes, "globex") == 1


def test_a_rate_of_one_allows_one_plan_a_minute(planes: Planes) -> None:
    _submit(planes, submit_rate=1)
    with pytest.raises(RateLimited):
        _submit(planes, submit_rate=1)


def test_a_rate_of_zero_is_no_limit(planes: Planes) -> None:
    for _ in range(5):
        _submit(planes, submit_rate=0)
    assert _stored(planes, "acme") == 5


def test_plans_older_than_a_minute_do_not_count_against_the_rate(planes: Planes) -> None:
    old = _submit(planes, submit_rate=1)
    _created_ago(planes, old, timedelta(seconds=61))
    _submit(planes, submit_rate=1)
    assert _stored(planes, "acme") == 2


def test_a_plan_from_a_minute_ago_counts_until_it_leaves_the_window(planes: Planes) -> None:
    # it leaves the window within the second: retry in 1 s, never 0 (a client would spin)
    old = _submit(planes, submit_rate=1)
    _created_ago(planes, old, timedelta(seconds=59))
    with pytest.raises(RateLimited) as refused:
        _submit(planes, submit_rate=1)
    assert refused.value.retry_after == 1


def test_retry_after_is_at_most_the_window_when_clocks_differ(planes: Planes) -> None:
    # a plan stamped by a host whose clock runs two minutes ahead
    ahead = _submit(planes, submit_rate=1)
    _created_ago(planes, ahead, timedelta(seconds=-120))
    with pytest.raises(RateLimited) as refused:
        _submit(planes, submit_rate=1)
    assert refused.value.retry_after == 60


def test_the_active_cap_counts_running_plans_of_that_tenant_only(planes: Planes) -> None:
    first = _submit(planes, max_active=2)
    _submit(planes, max_active=2)
    with pytest.raises(CapacityExceeded) as refused:
        _submit(planes, max_active=2)
    assert str(refused.value) == ("2 plans are active, the limit is 2 per tenant "
                                  "(tenant 'acme'; CONCLAVE_MAX_ACTIVE_PLANS)")
    assert _stored(planes, "acme") == 2
    _submit(planes, "globex", max_active=2)  # acme's plans take none of globex's places
    assert plans.finish_plan(planes.db, first, PlanStatus.COMPLETED) is not None
    _submit(planes, max_active=2)  # a finished plan frees its place
    assert _stored(planes, "acme") == 3


def test_a_cap_of_one_admits_the_first_plan(planes: Planes) -> None:
    _submit(planes, max_active=1)
    with pytest.raises(CapacityExceeded):
        _submit(planes, max_active=1)


def test_the_plan_is_stamped_with_the_admission_time(planes: Planes) -> None:
    before = utcnow()
    plan_id = _submit(planes, submit_rate=5)
    after = utcnow()
    created = plans.get_plan(planes.db, plan_id).created_at
    assert before <= created <= after
