"""The lease keeper's heartbeat: one beat renews every lease the process holds in one
statement, and the phases whose plan was cancelled (or whose lease was taken over) learn it
from that same statement — their calls are stopped, the others go on."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack

from tasks.lease import LOST, LeaseKeeper
from tests.sqlcount import StatementCounter
from tests.unit.planes import Planes
from tests.unit.stored import example

RENEW = "storage.phases.renew_leases"


def test_one_beat_renews_every_held_lease_in_one_statement_and_stops_the_cancelled_calls(planes: Planes) -> None:
    board = example("board", rounds=1, experts=[{"name": "Dana", "role": "Chief Financial Officer"},
                                                {"name": "Ravi", "role": "Chief Technology Officer"}])
    plan_id, other_id = (planes.coordinator.submit(board).plan_id,
                         planes.coordinator.submit(example("board", rounds=1)).plan_id)
    for pid in (plan_id, other_id):
        opening = planes.state(pid).by_key()["opening"]
        planes.deliver(opening.id, "opening", plan_id=pid)
    turns = [(pid, p) for pid in (plan_id, other_id) for p in planes.state(pid).phases if p.kind == "turn"]
    keeper = LeaseKeeper(planes.runner.renew, interval=3600.0)  # beats by hand below
    counter = StatementCounter().attach(planes.db.engine)
    try:
        with ExitStack() as held:
            leases = []
            for pid, p in turns:
                work = planes.runner.claim(p.id, owner="unit:keeper", plan_id=pid)
                assert work is not None
                leases.append((pid, held.enter_context(keeper.hold(p.id, work.attempt))))
            assert len(leases) == 6  # two turns of one plan, four of the other

            counter.reset()
            keeper.beat()
            assert counter.snapshot()["statements"] == Counter({RENEW: 3})  # BEGIN, one UPDATE for all six, COMMIT
            assert not any(lease.should_stop() for _, lease in leases)

            planes.coordinator.cancel(plan_id)
            counter.reset()
            keeper.beat()
            assert counter.snapshot()["statements"] == Counter({RENEW: 3})
            for pid, lease in leases:  # the cancelled plan's calls stop; the other plan's go on
                assert lease.should_stop() == (pid == plan_id)
                assert lease.reason == (LOST if pid == plan_id else None)
    finally:
        counter.detach()
        keeper.close()
