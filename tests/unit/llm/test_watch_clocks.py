"""Which clock ends a model call, read as the reader reads it (:attr:`Watch.reason`, set by
the process's watchdog thread before it trips the call): the first-chunk timeout until the
stream shows text, the idle timeout after its last event once it has, the deadline always,
only the deadline for the fallback, and a cancellation at once. Time is a fake clock; the
watchdog is the real one (survivors of the systematic mutation run, docs/mutation.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import pytest

from orchestrator.gateway.guard import Watch
from orchestrator.gateway.types import ModelSpec
from orchestrator.gateway.watchdog import CANCELLED, WATCHDOG

# every timeout differs, so a swapped clock gives a different answer
SPEC = ModelSpec(name="m", provider="offline", first_chunk_timeout=10.0, idle_timeout=3.0, deadline=100.0)


class Clock:
    """A fake clock that counts the watchdog's looks at it: its reads from any thread but the
    test's (a check reads the clock once per watch not yet ended)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.looks = 0
        self._test = threading.get_ident()
        self._looked = threading.Condition()

    def __call__(self) -> float:
        with self._looked:
            if threading.get_ident() != self._test:
                self.looks += 1
                self._looked.notify_all()
            return self.now

    def move(self, at: float) -> int:
        """Now reads ``at``; the looks so far (every later one reads ``at``)."""
        with self._looked:
            self.now = at
            return self.looks

    def wait_looks(self, n: int, timeout: float) -> bool:
        with self._looked:
            return self._looked.wait_for(lambda: self.looks >= n, timeout)


def ended(watch: Watch, clock: Clock, at: float, before: Callable[[], None] = lambda: None) -> str | None:
    """The watch's reason once the fake clock reads ``at``: as soon as it trips, or else once the
    watchdog has checked it twice at ``at`` (it trips a due watch right after the check that
    found it due, before its next check); None: not ended (at most 2 s, then what it says)."""
    tripped = threading.Event()
    with WATCHDOG.watching(watch, tripped.set):
        before()
        looked = clock.move(at)
        give_up = time.monotonic() + 2.0
        while not tripped.is_set() and time.monotonic() < give_up:
            if clock.wait_looks(looked + 2, 0.0):
                break
            with WATCHDOG._cond:  # wake it (a notify while it checks is lost: then it polls, every 0.25 s)
                WATCHDOG._cond.notify()
            tripped.wait(0.02)
    return watch.reason


def test_no_clock_ends_a_call_early() -> None:
    clock = Clock()
    watch = Watch(SPEC, lambda: False, clock)
    assert ended(watch, clock, 1000.0 + 9.9) is None


def test_until_text_the_first_chunk_timeout_ends_it() -> None:
    clock = Clock()
    watch = Watch(SPEC, lambda: False, clock)
    watch.saw(text=False)  # a keep-alive is an event, not text: the first-chunk clock still runs
    assert ended(watch, clock, 1000.0 + 10.0) == "first_chunk_timeout"


def test_after_text_the_idle_timeout_from_the_last_event_ends_it() -> None:
    clock = Clock()
    watch = Watch(SPEC, lambda: False, clock)
    clock.now = 1005.0
    watch.saw(text=True)
    clock.now = 1007.0
    watch.saw(text=False)  # any later event restarts the idle clock
    assert ended(Watch(SPEC, lambda: False, clock), clock, 1007.0 + 2.9) is None
    assert ended(watch, clock, 1007.0 + 3.0) == "idle_timeout"


def test_text_moves_the_call_past_its_first_chunk_timeout() -> None:
    clock = Clock()
    watch = Watch(SPEC, lambda: False, clock)
    clock.now = 1008.0
    watch.saw(text=True)
    clock.now = 1010.5  # past the first-chunk timeout, within idle of the text

    def keep_alive() -> None:
        watch.saw(text=False)

    assert ended(watch, clock, 1010.5, keep_alive) is None


def test_the_deadline_ends_a_call_that_keeps_talking() -> None:
    clock = Clock()
    watch = Watch(SPEC, lambda: False, clock)
    for t in range(1001, 1100):  # text every second: the idle clock never runs out
        clock.now = float(t)
        watch.saw(text=True)
    assert ended(watch, clock, 1000.0 + 100.0) == "deadline"


def test_the_fallback_waits_for_the_deadline_only() -> None:
    clock = Clock()
    stream = Watch(SPEC, lambda: False, clock)
    clock.now = 1050.0
    fallback = stream.fallback()
    assert fallback.reason is None and not fallback.has_text
    assert ended(fallback, clock, 1099.0) is None  # no first-chunk or idle clock
    assert ended(stream.fallback(), clock, 1100.0) == "deadline"  # the call's deadline, not a new one


@pytest.mark.parametrize("stop", [True, "raises"])
def test_a_cancellation_ends_the_call_at_once_and_a_failing_check_does_not(stop: object) -> None:
    clock = Clock()

    def should_stop() -> bool:
        if stop == "raises":
            raise RuntimeError("the database is away")
        return True

    watch = Watch(SPEC, should_stop, clock)
    assert ended(watch, clock, 1000.0) == (CANCELLED if stop is True else None)


def test_a_cancellation_is_noticed_without_anything_waking_the_watchdog() -> None:
    # the watchdog polls should_stop() on its own: nothing registers, notifies or moves a clock
    stop, clock = threading.Event(), Clock()
    watch = Watch(SPEC, stop.is_set, clock)
    tripped = threading.Event()
    with WATCHDOG.watching(watch, tripped.set):
        assert clock.wait_looks(1, 5.0)  # the check the registration woke it for: then it sleeps
        stop.set()
        assert tripped.wait(5.0)
    assert watch.reason == CANCELLED


def test_calls_that_already_ended_do_not_hide_one_that_falls_due() -> None:
    # calls whose reason is set stay watched until their reader leaves; the watchdog skips
    # them and still checks the rest (many of them, so one comes first in the set's order)
    clock = Clock()
    ended_calls = [Watch(SPEC, lambda: True, clock) for _ in range(30)]
    with contextlib.ExitStack() as stack:
        for call in ended_calls:
            done = threading.Event()
            stack.enter_context(WATCHDOG.watching(call, done.set))
            assert done.wait(5.0)
        assert {call.reason for call in ended_calls} == {CANCELLED}
        watch = Watch(SPEC, lambda: False, clock)
        assert ended(watch, clock, 1000.0 + 10.0) == "first_chunk_timeout"
