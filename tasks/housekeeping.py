"""The fleet heals itself, with no singleton: every worker process runs the reconciler
and retention on its own timer, one at a time across the fleet.

Each worker sweeps once when it is ready and then every ``CONCLAVE_RECONCILE_INTERVAL``
seconds. A sweep first takes the fleet-wide advisory lock ``reconciler`` without waiting
(:func:`storage.locks.exclusive`): the worker that gets it re-derives every stalled plan
(:meth:`~orchestrator.control.coordinator.Coordinator.reconcile`) and, when it is due fleet-wide,
applies the retention policy; the others skip that tick. Retention's schedule is stored, not
kept per process (:func:`storage.retention.claim`): however many workers sweep, it runs once
an hour between them. The lock is held by the sweep's own
transaction, so a worker killed mid-sweep releases it with its connection and the next
worker to tick takes over — within one interval, whoever died; a worker that stops
without dying (SIGSTOP, a long pause) loses it once its transaction has sat idle for
``stalled_after`` (twice the lease, at least three intervals).

Before taking the lock, every worker's tick ends the people's seats whose deadline passed
(:meth:`~orchestrator.control.coordinator.Coordinator.expire_deadlines`): a conditional UPDATE
fires each deadline exactly once whichever workers sweep at the same moment, so this needs no
lock and survives any worker's death.

``conclave beat`` stays optional and harmless beside it: its ``conclave.reconcile`` task
sweeps through the same lock. The worker starts its housekeeper when it is ready
(:func:`tasks.runtime.start_housekeeping`).

Beside the sweeps, a housekeeper with a webhook courier (a worker with
``CONCLAVE_WEBHOOK_SECRET_KEY``) delivers webhooks on its own thread — not under the lock:
every worker's courier takes its own share of the outbox with ``FOR UPDATE SKIP LOCKED``
(:mod:`orchestrator.webhooks.courier`), and a slow receiver never delays a sweep.
"""

from __future__ import annotations

import logging
import threading

from orchestrator.control.coordinator import Coordinator
from orchestrator.metrics import recorder
from orchestrator.webhooks.courier import Courier
from storage import Database, locks

log = logging.getLogger(__name__)

LOCK = "reconciler"
PRUNE_EVERY = 3600.0


class Housekeeper:
    def __init__(self, db: Database, coordinator: Coordinator, *, interval: float, stalled_after: float,
                 prune_every: float = PRUNE_EVERY, courier: Courier | None = None) -> None:
        self.db = db
        self.courier = courier  # None: this worker delivers no webhooks (it has no key to sign with)
        self.coordinator = coordinator
        self.interval = interval
        self.stalled_after = stalled_after  # a holder stopped this long loses the lock
        self.prune_every = prune_every  # fleet-wide: retention runs once per this between all workers
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> bool:
        """End the people's seats past their deadline (every worker, every tick: a conditional
        UPDATE fires each deadline once, so no lock is needed and no worker is special), then
        one pass of the reconciler (and retention, when due) if no other process is in one.
        True when this process swept."""
        self.coordinator.expire_deadlines()
        with locks.exclusive(self.db, LOCK, stalled_after=self.stalled_after) as mine:
            if not mine:
                recorder().swept("skipped")
                return False
            nudged = self.coordinator.reconcile()
            self.coordinator.prune(every=self.prune_every)  # a no-op unless due fleet-wide
            recorder().swept("swept")
            log.debug("swept: %d plan(s) nudged", len(nudged), extra={"action": "reconcile.swept"})
            return True

    def start(self) -> None:
        """Sweep now, then every ``interval``, on a daemon thread, until :meth:`stop`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="conclave-housekeeper", daemon=True)
        self._thread.start()
        if self.courier is not None:
            self.courier.start()

    def _run(self) -> None:
        while True:
            try:
                self.sweep()
            except Exception as exc:  # an outage skips a sweep; the next tick tries again
                recorder().swept("failed")
                log.warning("reconcile sweep failed: %s", exc, extra={"action": "reconcile.failed"})
            if self._stop.wait(self.interval):
                return

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self.courier is not None:
            self.courier.stop(timeout)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
