"""One thread per process that keeps the clocks of every running model call.

A model call waits in three places — for its stream's first chunk, between chunks, for
its non-streaming fallback — and none of them may hang or outlive a cancellation. The
guard (:mod:`orchestrator.gateway.guard`) never looks at a clock itself: it registers
the call's clocks (its ``Watch``) with the :data:`WATCHDOG` and reads. The watchdog wakes
at the earliest due time and at least every ``POLL_INTERVAL`` to ask each watch whether
it is due, which polls the call's ``should_stop()``; a watch that is due has set its
``reason`` (once, never cleared), and then its ``trip`` is called: the guard's trip
aborts the stream (which ends a read blocked on the caller's thread) and wakes a caller
waiting on a queue. The reader, seeing the reason, knows why its read ended. A forked
child starts its own thread on first use, like the bus's sender.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

POLL_INTERVAL = 0.25  # seconds between should_stop() polls of each watched call
CANCELLED = "cancelled"  # the reason given when should_stop() said so


class Watched(Protocol):
    """What the watchdog keeps: one call's clocks (the guard's ``Watch``)."""

    reason: str | None  # why the call was given up; set once, before ``trip`` is called
    trip: Callable[[], None]  # what the watchdog does once the call is due

    def _check(self) -> float | None:
        """Sets ``reason`` if the call is cancelled or due; else returns its next due time
        (on the monotonic clock)."""

    def _trip(self) -> None:
        """Calls ``trip``; a failure is logged, never raised on the watchdog's thread."""


W = TypeVar("W", bound=Watched)


class Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: set[Watched] = set()
        self._pid = 0

    @contextmanager
    def watching(self, watch: W, trip: Callable[[], None]) -> Iterator[W]:
        """Keeps ``watch``'s clocks while the block runs; ``trip`` is called (on the watchdog's
        thread, after ``watch.reason`` is set) if it falls due."""
        watch.trip = trip
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: the thread did not survive
                self._pid, self._watches = os.getpid(), set()
                threading.Thread(target=self._run, name="conclave-llm-watchdog", daemon=True).start()
            self._watches.add(watch)
            self._cond.notify()
        try:
            yield watch
        finally:
            with self._cond:
                self._watches.discard(watch)

    def _run(self) -> None:
        while True:
            with self._cond:
                wake = time.monotonic() + POLL_INTERVAL
                tripped = []
                for watch in self._watches:
                    if watch.reason is not None:
                        continue
                    due = watch._check()
                    if due is None:
                        tripped.append(watch)
                    else:
                        wake = min(wake, due)
            for watch in tripped:  # outside the lock: an abort may take a moment
                watch._trip()
            with self._cond:
                # nothing watched: sleep until something is (watching() notifies)
                self._cond.wait(max(0.0, wake - time.monotonic()) if self._watches else None)


WATCHDOG = Watchdog()
