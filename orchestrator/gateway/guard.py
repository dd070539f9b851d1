"""The stream guard: one model call that can neither hang nor say things twice.

Failure report 001: a stream that accepted the request but never sent its first chunk
hung a whole board meeting, and the first fix then re-broadcast the full text on top of
a stream that broke half-way. This module makes both impossible. A call's path reads
down the file: :func:`guarded_call` starts the call's clocks (:class:`Watch`), reads the
stream (:func:`_read_stream`, through its :class:`_Producer`), and returns what it
showed — or, when it showed nothing, hands the call to the non-streaming fallback
(:mod:`orchestrator.gateway.fallback`) — back to the gateway.

* The call's clocks are its :class:`Watch`: due at ``first_chunk_timeout`` until the
  first text, ``idle_timeout`` after the last event, ``deadline`` overall, and when
  ``should_stop()`` says so. One watchdog thread per process keeps every watch
  (:mod:`orchestrator.gateway.watchdog`): the guard registers the call's watch, with a
  trip that aborts the stream and wakes a waiting reader, and only reads.
* The stream's first event is read by a producer thread that feeds a queue, so that no
  read can block the caller before the watchdog can wake it. A stream that can be
  aborted (every network provider's, the offline model's) is then handed over: its
  response is open, so the caller reads the rest itself, with no thread switch per
  chunk. A stream without ``abort()`` stays with its producer to the end.
* ``should_stop()`` is also checked by the reader: before each wait on the producer's
  queue, and before each event read from a handed-over stream is shown.
* No first chunk, an empty stream, or a stream error before any text (other than rate
  limiting and fatal errors, which a non-streaming call would meet too) fall back to
  ``provider.complete()``, watched up to the deadline, its text replayed through
  ``on_text``: ``Completion(fallback=True)`` (:mod:`orchestrator.gateway.fallback`).
* An error or timeout AFTER text was shown returns what was shown,
  ``Completion(truncated=True)``; ``complete()`` is never called then, so watchers never
  see the text twice.
* ``on_text`` is only ever called on the caller's thread, in order.
* Usage is the provider's when it reported one, else an estimate of the text shown,
  labelled ``source="estimated"`` (:mod:`orchestrator.gateway.tokens`); an error raised
  after the provider reported usage carries it.

When the guard gives up on a stream still with its producer, it stops the producer: it calls the
stream's ``abort()`` if it has one (network providers shut the socket down, which wakes
a blocked read), and the producer then ``close()``s the generator in its own thread
(closing the HTTP response). A stream without ``abort()`` that blocks forever inside
``next()`` can only be left behind: producer threads are daemons for that last resort,
and a warning is logged. Network providers also bound every socket read with an httpx
timeout, so theirs always end.
"""

from __future__ import annotations

import contextvars
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.gateway.failures import CallCancelled, StreamStalled
from orchestrator.gateway.fallback import fall_back
from orchestrator.gateway.tokens import estimate_usage
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Provider, TextDelta, Usage, UsageReport
from orchestrator.gateway.watchdog import CANCELLED, WATCHDOG

logger = logging.getLogger(__name__)

JOIN_GRACE = 1.0  # seconds to wait for a stopped producer before leaving it behind

OnText = Callable[[str], None]
ShouldStop = Callable[[], bool]

_EVENT, _END, _ERROR, _HANDOVER, _TRIPPED = "event", "end", "error", "handover", "tripped"


@dataclass
class _Outcome:
    text: str
    usage: Usage | None  # what the provider reported, if anything
    error: BaseException | None  # why the stream ended early, if it did
    reason: str  # "end", "error", "first_chunk_timeout", "idle_timeout", "deadline"


def guarded_call(
    provider: Provider,
    spec: ModelSpec,
    request: ChatRequest,
    *,
    on_text: OnText = lambda text: None,
    should_stop: ShouldStop = lambda: False,
    clock: Callable[[], float] = time.monotonic,
) -> Completion:
    """Streams ``request`` through ``provider`` under the guard; see the module docstring."""
    watch = Watch(spec, should_stop, clock)
    fallback = watch.fallback()  # the watch of the non-streaming fallback, if it comes to that
    outcome = _read_stream(provider, spec, request, watch, on_text, should_stop)
    if outcome.text:
        # a partial figure carried by an error is not the call's usage: estimate instead
        usage = outcome.usage or estimate_usage(request, outcome.text)
        if outcome.reason == "end":
            return Completion(text=outcome.text, usage=usage)
        logger.warning(
            "action=stream_truncated model=%s reason=%s chars_shown=%d error=%s upstream=%s",
            spec.name,
            outcome.reason,
            len(outcome.text),
            type(outcome.error).__name__,
            getattr(outcome.error, "detail", None),  # what the provider said, redacted: the log only
        )
        return Completion(text=outcome.text, usage=usage, truncated=True, finish_reason=outcome.reason)
    return fall_back(provider, spec, request, fallback, outcome, on_text, should_stop)


class Watch:
    """The clocks of one model call (when it is due: :meth:`due`, and ``should_stop()``),
    kept by the process's watchdog thread (:data:`orchestrator.gateway.watchdog.WATCHDOG`).
    The reader calls :meth:`saw` for every event, two attribute writes: no queue, no lock and
    no thread switch per chunk. The watchdog sets :attr:`reason` once (before it trips) and
    never clears it."""

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

    def past_deadline(self) -> bool:
        """Whether the call's deadline has passed (the fallback is not started then)."""
        return self._clock() >= self.deadline_at

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
            logger.debug("action=should_stop_failed", exc_info=True)
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
            logger.debug("action=watch_trip_failed", exc_info=True)


def _nothing() -> None:
    pass


def _read_stream(
    provider: Provider,
    spec: ModelSpec,
    request: ChatRequest,
    watch: Watch,
    on_text: OnText,
    should_stop: ShouldStop,
) -> _Outcome:
    """The stream, read to its end or until the watchdog gives it up: its first event
    through the producer, the rest (of an abortable stream) straight from the stream."""
    parts: list[str] = []
    usage: Usage | None = None
    try:
        stream = provider.stream(spec, request)
        iterator = iter(stream)  # one iterator, read first by the producer, then perhaps here
    except Exception as exc:
        return _Outcome("", None, exc, "error")
    producer = _Producer(stream, iterator, spec)
    # the producer's queue first; after a handover, the stream itself (``inline``)
    events, inline = producer.events(should_stop), False
    try:
        with WATCHDOG.watching(watch, producer.trip):
            producer.start()
            while True:
                try:
                    event = next(events)
                except StopIteration:
                    if producer.taken and not inline:  # handed over: read the rest here
                        events, inline = iterator, True
                        continue
                    return _Outcome("".join(parts), usage, None, "end")
                except Exception as exc:
                    if watch.reason == CANCELLED or isinstance(exc, _Stopped):
                        break
                    if watch.reason is not None:
                        return _Outcome("".join(parts), usage,
                                        StreamStalled(f"model {spec.name!r}: {watch.reason}"), watch.reason)
                    return _Outcome("".join(parts), usage, exc, "error")
                is_text = isinstance(event, TextDelta) and bool(event.text)
                watch.saw(text=is_text)
                if inline and should_stop():  # the queue's reader checked before it waited
                    break
                if is_text:
                    parts.append(event.text)
                    on_text(event.text)
                elif isinstance(event, UsageReport):
                    usage = event.usage
    finally:
        producer.let_go()
    # the loop ends without an outcome only when the call was cancelled
    raise CallCancelled(f"model {spec.name!r}: cancelled", usage=_known(usage, request, parts))


class _Tripped(Exception):
    """The watchdog gave the call up while its reader waited on the producer."""


class _Stopped(Exception):
    """``should_stop()`` said so before the reader waited on the producer."""


class _Producer:
    """The thread that reads a stream's first event (all of a stream without ``abort()``),
    so that the caller waits on a queue that the watchdog can wake, never in a read."""

    def __init__(self, stream: Any, iterator: Iterator[Any], spec: ModelSpec) -> None:
        self._stream, self._iterator, self._spec = stream, iterator, spec
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        # an abortable stream is handed over after its first event (its response is open then);
        # ``_handed`` is set once the producer has let go of it, so that its reader closes it
        self.hands_over, self._handed = callable(getattr(stream, "abort", None)), threading.Event()
        self._finished = False  # it reported its end (or handed the stream over): nothing to abort
        # the stream ended in the producer, or the caller let it go: a trip no longer aborts it
        # (a late trip: the watchdog calls it after deciding, outside its lock); ``_lock`` makes
        # the trip's look and its abort one step against let_go's close
        self._ended, self._lock = False, threading.Lock()
        self.taken = False  # the caller took the stream over (the producer has returned)
        # in the caller's context: its log context and its trace (the HTTP request is made there)
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                        name=f"llm-stream-{spec.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def events(self, should_stop: ShouldStop) -> Iterator[Any]:
        """The caller's side: the events the producer queued, until its end or its handover;
        ``should_stop()`` is checked before each wait (an event that arrives during a wait
        is shown: the watchdog's poll ends a wait with nothing to show)."""
        while True:
            if should_stop():
                raise _Stopped
            kind, payload = self._queue.get()
            if kind == _EVENT:
                yield payload
                continue
            if kind == _TRIPPED:
                raise _Tripped
            self._finished = True
            if kind == _HANDOVER:
                self._thread.join()  # it returns right after handing over
                self.taken = True
                return
            if kind == _END:
                return
            raise payload  # _ERROR

    def trip(self) -> None:
        """The watchdog's: wake a caller waiting on the queue, and abort the stream (which
        ends a read blocked on the caller's thread)."""
        self._queue.put((_TRIPPED, None))
        with self._lock:
            if self.hands_over and not self._ended:
                self._stream.abort()

    def let_go(self) -> None:
        """Once the caller is done: stop the producer if it still holds the stream; close a
        stream it handed over (read here, or given up on just as it was handed over)."""
        with self._lock:
            self._ended = True
        if not self.taken:
            self._stop_thread(abort=not self._finished)
        if self._handed.is_set():
            _close(self._stream, self._iterator)

    def _run(self) -> None:
        """Forwards everything, including errors, and always closes — except a stream it
        hands over after its first event, which its reader closes."""
        try:
            for event in self._iterator:
                if self._stop.is_set():
                    return
                self._queue.put((_EVENT, event))
                if self.hands_over:
                    self._handed.set()
                    self._queue.put((_HANDOVER, None))
                    return
            self._queue.put((_END, None))
        except BaseException as exc:  # forwarded to the consumer, never left unhandled in a thread
            self._queue.put((_ERROR, exc))
        finally:
            if not self._handed.is_set():
                with self._lock:
                    self._ended = True
                _close(self._stream, self._iterator)

    def _stop_thread(self, *, abort: bool) -> None:
        self._stop.set()
        if self._thread.ident is None:  # never started
            return
        aborter = getattr(self._stream, "abort", None) if abort and self._thread.is_alive() else None
        if callable(aborter):
            try:
                aborter()
            except Exception:
                logger.debug("action=stream_abort_failed", exc_info=True)
        # a finished or aborted producer ends at once; one blocked in a stream without abort()
        # is not waited for: it closes its generator when the stream next yields
        self._thread.join(JOIN_GRACE if (not abort or callable(aborter)) else 0.05)
        if self._thread.is_alive():
            logger.info("action=stream_thread_left_behind model=%s abortable=%s",
                        self._spec.name, callable(aborter))


def _close(stream: Any, iterator: Iterator[Any]) -> None:
    for closing in (iterator,) if iterator is stream else (iterator, stream):
        close = getattr(closing, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                logger.debug("action=stream_close_failed", exc_info=True)


def _known(usage: Usage | None, request: ChatRequest, parts: list[str]) -> Usage | None:
    """Usage to put on a cancellation: reported, else estimated if text was produced."""
    if usage is not None:
        return usage
    return estimate_usage(request, "".join(parts)) if parts else None
