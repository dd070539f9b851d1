"""Issue 8, attack 3, against real worker subprocesses: the offline model is a demo, not an
attack surface.

* A fault switch that got past submit (a submitter in testing mode, or a row written into
  the database) is refused by a worker that is not in testing mode: the phase fails with
  ``llm.fault_not_allowed`` and nothing hangs.
* A cancelled plan stops a long offline call at its next chunk.
* SIGTERM in the middle of a long offline call: the worker gives the phase back and exits
  (a warm shutdown does not wait for the call), and another worker completes the phase.

Bounds are generous on purpose: each call below would last many minutes if it were not
stopped, so "ended within 60 s" tells a stopped call from a finished one on any machine.
"""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from typing import Any

from orchestrator.client.conclave import Conclave
from storage import plans
from tests.integration.durability import assert_exactly_once, board_plan, ledger, wait_for

BOUND = 60.0  # seconds; every call stopped below would otherwise run for 10 minutes or more


def _running(client: Any, plan_id: str, key: str) -> bool:
    phase = plans.load_state(client.local.db, plan_id).by_key()[key]
    return phase.status == "running" and phase.started_at is not None


def _chunk_of(live: Any, key: str) -> bool:
    """Whether the next live message (within half a second) is a chunk of ``key``."""
    message = live.get(0.5)
    return message is not None and message.get("type") == "chunk" and message.get("phase") == key


def test_a_fault_switch_past_submit_is_refused_by_a_worker_not_in_testing_mode(settings: Any, workers: Any) -> None:
    workers(settings=settings.model_copy(update={"testing": False}))
    with Conclave(settings, worker=False) as tester:  # this submitter is in testing mode; the worker is not
        plan_id = tester.submit(board_plan("smuggled hang", hang=True, fail=["Dana"], model={"max_retries": 0}))
        view = tester.wait(plan_id, timeout=BOUND)  # a hang would last an hour
        assert view.status == "failed", view.status
        opening = ledger(tester.local.db, plan_id).phase("opening")
        assert (opening.status, opening.error_code) == ("failed", "llm.fault_not_allowed"), opening
        assert "CONCLAVE_TESTING" in (opening.error_message or "")


def test_a_cancelled_plan_stops_a_long_offline_call_at_its_next_chunk(client: Any, workers: Any) -> None:
    worker = workers()
    # a turn of 50 000 words in 4-character chunks, 10 ms apart: about 11 minutes of streaming
    plan_id = client.submit(board_plan("long turn", experts=1, words=50_000, chunk_chars=4, latency=0.01))
    wait_for(lambda: _running(client, plan_id, "r1.dana"), BOUND, what="r1.dana mid-call")
    client.cancel(plan_id)
    wait_for(lambda: client.get(plan_id).final, BOUND, what="the cancelled plan to end")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "cancelled" and led.phase("r1.dana").status == "cancelled"
    spent = led.usage_of(led.phase("r1.dana"))
    assert len(spent) == 1 and not spent[0].counted and spent[0].output_tokens > 0  # partial, on record
    assert_exactly_once(led)
    assert "stream_thread_left_behind" not in worker.log()  # the offline stream was stopped, not abandoned


def test_sigterm_mid_call_exits_promptly_and_another_worker_completes_the_phase(settings: Any,
                                                                                 workers: Any) -> None:
    # The plan leaves `latency` to each worker (CONCLAVE_OFFLINE_LATENCY): slow on the first,
    # where a 5 000-word turn in 4-character chunks streams for about 11 minutes; fast on the second.
    leaving = workers(settings=settings.model_copy(update={"offline_latency": 0.1}))
    with Conclave(settings, worker=False) as client:
        plan_id = client.submit(board_plan("shutdown mid-call", experts=1, words=5_000, chunk_chars=4))
        # the opening streams first, at this worker's pace (about 15 s); then r1.dana's call is
        # under way once its first chunk is out (claimed alone, a phase has made no call yet)
        live = client.subscribe(plan_id)
        try:
            wait_for(lambda: _chunk_of(live, "r1.dana"), 2 * BOUND, interval=0, what="r1.dana mid-call")
        finally:
            live.close()

        assert leaving.proc is not None
        os.killpg(leaving.pid, signal.SIGTERM)  # a warm shutdown, as a supervisor stops a worker
        leaving.proc.wait(timeout=BOUND)  # raises if the shutdown waited for the call
        log = leaving.log()
        assert "r1.dana given back" in log and "Traceback" not in log

        dana = plans.load_state(client.local.db, plan_id).by_key()["r1.dana"]
        assert (dana.status, dana.attempt, dana.enqueued_at) == ("running", 1, None)
        assert dana.lease_expires_at is not None and dana.lease_expires_at <= datetime.now(UTC)

        workers(beat=True)  # its reconciler finds the phase given back and runs it again
        view = client.wait(plan_id, timeout=120)
        assert view.status == "completed", view.status
        led = ledger(client.local.db, plan_id)
        assert led.phase("r1.dana").attempt == 2
        assert [(u.attempt, u.counted) for u in led.usage_of(led.phase("r1.dana"))] == [(1, False), (2, True)]
        assert_exactly_once(led)
