"""The lease keeper: one heartbeat thread per worker process for every phase it runs.

While a model call runs, the keeper renews each held lease every third of the
lease period in a single transaction. When a renewal finds the lease taken over
by another attempt, or the plan cancelled, it flips that phase's stop flag; the
stream guard polls it and ends the call. A database outage only skips beats: the
lease may then expire and another worker take over — the attempt fence keeps
that safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

log = logging.getLogger(__name__)


class Lease:
    def __init__(self, phase_id: str, attempt: int) -> None:
        self.phase_id = phase_id
        self.attempt = attempt
        self._stop = threading.Event()

    def should_stop(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()


class LeaseKeeper:
    def __init__(self, renew: Callable[[Sequence[tuple[str, int]]], dict[str, bool]], interval: float) -> None:
        self._renew = renew
        self._interval = interval
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    @contextmanager
    def hold(self, phase_id: str, attempt: int) -> Iterator[Lease]:
        lease = Lease(phase_id, attempt)
        with self._lock:
            self._held[phase_id] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="conclave-lease", daemon=True)
                self._thread.start()
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

    def _run(self) -> None:
        while not self._closed.wait(self._interval):
            self.beat()

    def close(self) -> None:
        self._closed.set()
