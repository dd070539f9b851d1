"""One thread per process that keeps every running model stream's clocks.

A stream read on its caller's thread cannot time itself out while it is blocked in
a read. The watchdog does it from outside: each watched stream says when it is due
(its first-chunk timeout until it has shown text, then its idle timeout from its
last event, and its deadline), and the watchdog, which wakes at the earliest due
time and at least every ``POLL_INTERVAL`` to poll each stream's ``should_stop()``,
marks a stream that is due with the reason and calls its ``abort()``. The blocked
read then fails at once, and the reader, seeing :attr:`Watch.reason`, knows why.

The reader's cost per event is two attribute writes (:meth:`Watch.saw`); there is
no queue, no lock and no thread switch per chunk. A forked child starts its own
thread on first use, like the bus's sender.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.25  # seconds between should_stop() polls of each watched stream
CANCELLED = "cancelled"  # the reason given when should_stop() said so


class Watch:
    """The clocks of one stream. The reader calls :meth:`saw` for every event; the
    watchdog sets :attr:`reason` once (before it aborts) and never clears it."""

    __slots__ = (
        "_abort",
        "_clock",
        "_deadline_at",
        "_first_due",
        "_idle",
        "_should_stop",
        "has_text",
        "last_event",
        "reason",
    )

    def __init__(
        self,
        abort: Callable[[], None],
        should_stop: Callable[[], bool],
        *,
        first_due: float,
        idle: float,
        deadline_at: float,
        clock: Callable[[], float],
        has_text: bool = False,
        last_event: float | None = None,
    ) -> None:
        self._abort, self._should_stop, self._clock = abort, should_stop, clock
        self._first_due, self._idle, self._deadline_at = first_due, idle, deadline_at
        self.has_text = has_text
        self.last_event = clock() if last_event is None else last_event
        self.reason: str | None = None

    def saw(self, *, text: bool) -> None:
        self.last_event = self._clock()
        if text:
            self.has_text = True

    def due(self) -> tuple[float, str]:
        """When this stream is given up, and why, as things stand."""
        if self.has_text:
            return min((self.last_event + self._idle, "idle_timeout"), (self._deadline_at, "deadline"))
        return min((self._first_due, "first_chunk_timeout"), (self._deadline_at, "deadline"))

    def _check(self) -> float | None:
        """Trips the watch if it is due; returns its next due time (on the monotonic clock) if not."""
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
            self._abort()
        except Exception:
            log.debug("action=stream_abort_failed", exc_info=True)


class Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watches: set[Watch] = set()
        self._pid = 0

    @contextmanager
    def watching(self, watch: Watch) -> Iterator[Watch]:
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
