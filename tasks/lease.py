"""The lease keeper: one heartbeat thread per worker process for every phase it runs.

While a model call runs, the keeper renews each held lease every third of the
lease period in a single transaction. When a renewal finds the lease taken over
by another attempt, or the plan cancelled, it flips that phase's stop flag; the
stream guard polls it and ends the call. A database outage only skips beats: the
lease may then expire and another worker take over — the attempt fence keeps
that safe.

When the worker is asked to stop (SIGTERM, Celery's warm shutdown) the keeper flips
every stop flag it holds, and every flag it hands out afterwards, for ``shutdown``:
each model call ends at its next chunk and the runner gives its phase back
(:func:`storage.phases.release_phase`) for another worker, so a shutdown never waits
for a long call to finish.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from orchestrator.metrics import recorder

log = logging.getLogger(__name__)


LOST = "lost"  # the lease was taken over, or the plan was cancelled: the phase is not ours to finish
SHUTDOWN = "shutdown"  # this worker is stopping: give the phase back unfinished


class Lease:
    def __init__(self, phase_id: str, attempt: int) -> None:
        self.phase_id = phase_id
        self.attempt = attempt
        self._stop = threading.Event()
        self.reason: str | None = None  # why it stopped; the first reason wins

    def should_stop(self) -> bool:
        return self._stop.is_set()

    def stop(self, reason: str = LOST) -> None:
        if self.reason is None:
            self.reason = reason
        self._stop.set()

    @property
    def shutting_down(self) -> bool:
        """Stopped because the worker is shutting down (not cancelled, not taken over)."""
        return self.reason == SHUTDOWN


class LeaseKeeper:
    def __init__(self, renew: Callable[[Sequence[tuple[str, int]]], dict[str, bool]], interval: float) -> None:
        self._renew = renew
        self._interval = interval
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._shutting_down = threading.Event()

    @contextmanager
    def hold(self, phase_id: str, attempt: int) -> Iterator[Lease]:
        lease = Lease(phase_id, attempt)
        with self._lock:
            self._held[phase_id] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="conclave-lease", daemon=True)
                self._thread.start()
        if self._shutting_down.is_set():  # after it is held: shut_down sees it, or we see the flag
            lease.stop(SHUTDOWN)
        try:
            yield lease
        finally:
            with self._lock:
                if self._held.get(phase_id) is lease:
                    del self._held[phase_id]

    def beat(self) -> None:
        with self._lock:
            held = list(self._held.values())
        if not held:
            return
        try:
            alive = self._renew([(lease.phase_id, lease.attempt) for lease in held])
        except Exception as exc:  # an outage skips a beat; the fence keeps results safe
            log.warning("lease renewal failed: %s", exc, extra={"action": "lease.renew_failed"})
            return
        for lease in held:
            if not alive.get(lease.phase_id, True):
                lease.stop()
                recorder().lease_lost()

    def _run(self) -> None:
        while not self._closed.wait(self._interval):
            self.beat()

    def shut_down(self) -> None:
        """The worker is stopping: stop every call held now or later. Called from the
        shutdown signal handler, so it takes none of the keeper's locks."""
        self._shutting_down.set()
        for lease in list(self._held.values()):
            lease.stop(SHUTDOWN)
        if self._held:
            log.warning("worker shutting down: stopping %d model call(s); their phases go to other workers",
                        len(self._held), extra={"action": "lease.shutdown"})

    def close(self) -> None:
        self._closed.set()
