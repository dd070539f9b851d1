"""The clocks of every running model call, kept by one thread per process.

A model call waits in three places — for its stream's first chunk, between chunks, for
its non-streaming fallback — and none of them may hang or outlive a cancellation. The
guard (:mod:`orchestrator.gateway.guard`) never looks at a clock itself: it registers the
call's :class:`Watch` with the :data:`WATCHDOG` and reads. The watchdog wakes at the
earliest due time and at least every ``POLL_INTERVAL`` to poll each call's
``should_stop()``; a watch that is due gets its :attr:`Watch.reason` (once, never
cleared) and then its ``trip`` is called: the guard's trip aborts the stream (which ends
a read blocked on the caller's thread) and wakes a caller waiting on a queue. The
reader, seeing :attr:`Watch.reason`, knows why its read ended.

A watch is due, as things stand: until the stream shows text, at its first-chunk timeout;
after that, ``idle_timeout`` after its last event; always at the call's deadline. The
reader's cost per event is :meth:`Watch.saw`, two attribute writes: no queue, no lock and
no thread switch per chunk. A forked child starts its own thread on first use, like the
bus's sender.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from orchestrator.gateway.types import ModelSpec

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.25  # seconds between should_stop() polls of each watched call
CANCELLED = "cancelled"  # the reason given when should_stop() said so


class Watch:
    """The clocks of one model call. The reader calls :meth:`saw` for every event; the
    watchdog sets :attr:`reason` once (before it trips) and never clears it."""

    __slots__ = (
        "_clock",
        "_first_due",
        "_idle",
        "_should_stop",
        "deadline_at",
        "has_text",
        "last_event",
        "reason",
        "started",
        "trip",
    )

    def __init__(self, spec: ModelSpec, should_stop: Callable[[], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Starts the call's clocks now."""
        self._should_stop, self._clock = should_stop, clock
        self.started = started = clock()
        self.deadline_at = started + spec.deadline
        self._first_due = started + spec.first_chunk_timeout
        self._idle = spec.idle_timeout
        self.has_text = False
        self.last_event = started
        self.reason: str | None = None
        self.trip: Callable[[], None] = _nothing  # what the watchdog does once this is due

    def fallback(self) -> Watch:
        """A watch of the same call for its non-streaming fallback: due at the deadline only."""
        watch = Watch.__new__(Watch)
        watch._should_stop, watch._clock = self._should_stop, self._clock
        watch.started, watch.deadline_at, watch._first_due, watch._idle = self.started, self.deadline_at, math.inf, 0.0
        watch.has_text, watch.last_event, watch.reason, watch.trip = False, self.last_event, None, _nothing
        return watch

    def saw(self, *, text: bool) -> None:
        self.last_event = self._clock()
        if text:
            self.has_text = True

    def due(self) -> tuple[float, str]:
        """When this call is given up, and why, as things stand."""
        if self.has_text:
            return min((self.last_event + self._idle, "idle_timeout"), (self.deadline_at, "deadline"))
        return min((self._first_due, "first_chunk_timeout"), (self.deadline_at, "deadline"))

    def _check(self) -> float | None:
        """Sets :attr:`reason` if the call is cancelled or due; else returns its next due
        time (on the monotonic clock)."""
        try:
            stop = self._should_stop()
        except Exception:
            log.debug("action=should_stop_failed", exc_info=True)
            stop = False
        until, reason = self.due()
        left = until - self._clock()
        if stop or left <= 0:
            self.reason = CANCELLED if stop else reason
            return None
        return time.monotonic() + left

    def _trip(self) -> None:
        try:
            self.trip()
        except Exception:
            log.debug("action=watch_trip_failed", exc_info=True)


def _nothing() -> None:
    pass


class Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: set[Watch] = set()
        self._pid = 0

    @contextmanager
    def watching(self, watch: Watch, trip: Callable[[], None]) -> Iterator[Watch]:
        """Keeps ``watch``'s clocks while the block runs; ``trip`` is called (on the watchdog's
        thread, after :attr:`Watch.reason` is set) if it falls due."""
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
