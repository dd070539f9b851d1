"""What a call that fell back costs: the usage of the stream attempt that gave no text, plus its
non-streaming fallback's — provider-reported only when both parts are, otherwise an estimate
that names both methods (a regression that let the fallback's provider report speak for an
estimated stream survived every guard test: audit-a's regression trial). And what a call that
gives its stream up leaves behind: a stream its producer still reads is aborted, one that ended
never is, and no producer thread outlives the call. No network: providers that stream from a
list, and streams that block until aborted."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from orchestrator.gateway import guard
from orchestrator.gateway.failures import CallCancelled, ProviderUnavailable, RateLimited, StreamStalled
from orchestrator.gateway.fallback import REPLAY_CHUNK
from orchestrator.gateway.guard import Watch, _read_stream, guarded_call
from orchestrator.gateway.tokens import estimate_usage
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, TextDelta, Usage, UsageReport
from orchestrator.gateway.watchdog import WATCHDOG

REQUEST = ChatRequest(system="You are the CFO.", prompt="Should we ship?")
SPEC = ModelSpec(name="fake", provider="fake", first_chunk_timeout=5.0, idle_timeout=5.0, deadline=10.0)
PROVIDER = Usage(120, 0, "provider")
ESTIMATED = Usage(30, 0, "estimated", "chars/4")


class NoTextThenFallback:
    """A stream that gives no text — it reports ``reported`` and ends, or fails carrying
    ``carried`` — and a fallback that answers with ``fallback``."""

    def __init__(self, *, reported: Usage | None = None, carried: Usage | None = None,
                 fallback: Usage = Usage(10, 5, "provider")) -> None:
        self.reported, self.carried, self.fallback = reported, carried, fallback

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
        if self.reported is not None:
            yield UsageReport(self.reported)
        if self.carried is not None:
            raise ProviderUnavailable("the stream broke before any text", usage=self.carried,
                                      detail="upstream said: try later")

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        return Completion(text="Ship the pilot.", usage=self.fallback)


@pytest.mark.parametrize(("provider", "expected"), [
    (NoTextThenFallback(reported=PROVIDER), Usage(130, 5, "provider")),
    (NoTextThenFallback(carried=PROVIDER), Usage(130, 5, "provider")),
    (NoTextThenFallback(carried=ESTIMATED), Usage(40, 5, "estimated", "chars/4+provider")),
    (NoTextThenFallback(reported=PROVIDER, fallback=Usage(10, 5, "estimated", "chars/4")),
     Usage(130, 5, "estimated", "provider+chars/4")),
    (NoTextThenFallback(), Usage(10, 5, "provider")),  # the stream spent nothing known: the fallback alone
], ids=["reported+provider", "carried+provider", "estimated+provider", "provider+estimated", "nothing+provider"])
def test_a_fallback_costs_the_failed_stream_plus_itself(provider: NoTextThenFallback, expected: Usage) -> None:
    completion = guarded_call(provider, SPEC, REQUEST)
    assert completion.fallback and completion.text == "Ship the pilot."
    assert completion.usage == expected
    # why the stream was given up, for the fallback metrics: it broke, or it ended with no text
    assert completion.fallback_reason == ("error" if provider.carried is not None else "end")


class ReportsThenHangs:
    """A stream that reports what it spent and then sends nothing until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
        yield UsageReport(PROVIDER)
        self.release.wait(10)

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        raise AssertionError("no time is left for a fallback")


def test_a_call_with_no_text_by_its_deadline_stalls_carrying_what_it_spent() -> None:
    spec = ModelSpec(name="fake", provider="fake", first_chunk_timeout=5.0, idle_timeout=5.0, deadline=0.3)
    provider = ReportsThenHangs()
    try:
        with pytest.raises(StreamStalled) as raised:
            guarded_call(provider, spec, REQUEST)
    finally:
        provider.release.set()
    assert raised.value.message == "model 'fake': no output within the deadline of 0.3s"
    assert raised.value.usage == PROVIDER  # its tokens are on record as the attempt's waste


class TextThenBreaks:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error or ProviderUnavailable("the stream broke", detail="upstream said: overloaded")

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
        yield TextDelta("Ship the")
        raise self.error

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        raise AssertionError("text was shown: never a fallback")


def test_the_worker_log_says_why_a_stream_was_cut_or_replaced(caplog: pytest.LogCaptureFixture) -> None:
    """The operator's only view of what the provider said: the model, why, how much was shown,
    the error's class and the provider's (redacted) words."""
    with caplog.at_level(logging.WARNING, logger="orchestrator.gateway.guard"):
        cut = guarded_call(TextThenBreaks(), SPEC, REQUEST)
        guarded_call(NoTextThenFallback(carried=ESTIMATED), SPEC, REQUEST)
        guarded_call(NoTextThenFallback(), SPEC, REQUEST)  # an empty stream: no error to name
        odd = guarded_call(TextThenBreaks(RuntimeError("a bug in a stream")), SPEC, REQUEST)
    assert cut.truncated and cut.text == "Ship the" and cut.finish_reason == "error"
    assert odd.truncated and odd.text == "Ship the"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "action=stream_truncated model=fake reason=error chars_shown=8 error=ProviderUnavailable "
        "upstream=upstream said: overloaded",
        "action=stream_fallback model=fake reason=error error=ProviderUnavailable upstream=upstream said: try later",
        "action=stream_fallback model=fake reason=end error=None upstream=None",
        "action=stream_truncated model=fake reason=error chars_shown=8 error=RuntimeError upstream=None",
    ]


class LongFallback(NoTextThenFallback):
    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        return Completion(text="Ship the pilot first, then the rest once it has paid for itself.", usage=self.fallback)


def test_a_cancel_while_a_fallback_is_replayed_stops_it_carrying_what_it_cost() -> None:
    stop = threading.Event()
    shown: list[str] = []

    def on_text(text: str) -> None:
        shown.append(text)
        stop.set()  # the plan is cancelled as its first words are shown

    with pytest.raises(CallCancelled) as raised:
        guarded_call(LongFallback(reported=PROVIDER), SPEC, REQUEST, on_text=on_text, should_stop=stop.is_set)
    assert len(shown) == 1  # the rest was not replayed
    assert raised.value.message == "model 'fake': cancelled while replaying"
    assert raised.value.usage == Usage(130, 5, "provider")  # the stream's and the fallback's tokens: waste


class RaisesAtStream(NoTextThenFallback):
    """A provider whose ``stream()`` itself raises (before anything is iterated)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
        raise self.error


def test_a_stream_that_cannot_start_falls_back_carrying_its_errors_usage() -> None:
    error = ProviderUnavailable("connection refused", usage=ESTIMATED)
    completion = guarded_call(RaisesAtStream(error), SPEC, REQUEST)
    assert completion.fallback and completion.fallback_reason == "error"
    assert completion.usage == Usage(40, 5, "estimated", "chars/4+provider")
    with pytest.raises(RateLimited):  # a non-streaming call would be refused too: no fallback
        guarded_call(RaisesAtStream(RateLimited("slow down", retry_after=2.0)), SPEC, REQUEST)


class Spoken:
    """A stream that reports its usage, then says two things; abortable or not."""

    def __init__(self) -> None:
        events: list[UsageReport | TextDelta] = [UsageReport(PROVIDER), TextDelta("Ship the"), TextDelta(" pilot.")]
        self._events = iter(events)

    def __iter__(self) -> Iterator[UsageReport | TextDelta]:
        return self._events


class AbortableSpoken(Spoken):
    def abort(self) -> None:
        pass


class SaysTwoThings(NoTextThenFallback):
    def __init__(self, stream: Spoken) -> None:
        super().__init__()
        self._stream = stream

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Any:
        return self._stream


@pytest.mark.parametrize("stream", [Spoken, AbortableSpoken], ids=["read-by-its-producer", "handed-over"])
def test_a_cancel_after_text_was_shown_stops_the_stream_carrying_its_reported_usage(stream: type[Spoken]) -> None:
    stop = threading.Event()
    shown: list[str] = []

    def on_text(text: str) -> None:
        shown.append(text)
        stop.set()

    with pytest.raises(CallCancelled) as raised:
        guarded_call(SaysTwoThings(stream()), SPEC, REQUEST, on_text=on_text, should_stop=stop.is_set)
    assert shown == ["Ship the"]
    assert raised.value.message == "model 'fake': cancelled" and raised.value.usage == PROVIDER


class NoTextThenFailingFallback(NoTextThenFallback):
    """A stream that reports what it spent and ends with no text, then a fallback that fails
    carrying ``fallback_carried`` (or nothing)."""

    def __init__(self, *, fallback_carried: Usage | None) -> None:
        super().__init__(reported=PROVIDER)
        self.fallback_carried = fallback_carried

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        raise RateLimited("slow down", usage=self.fallback_carried)


@pytest.mark.parametrize(("carried", "expected"), [
    (Usage(7, 2, "provider"), Usage(127, 2, "provider")),  # the stream's tokens plus the fallback's
    (None, PROVIDER),  # the fallback reported nothing: the stream's tokens
], ids=["fallback-reported", "fallback-silent"])
def test_a_failed_fallback_costs_the_stream_plus_what_it_reported(carried: Usage | None, expected: Usage) -> None:
    with pytest.raises(RateLimited, match="slow down") as raised:
        guarded_call(NoTextThenFailingFallback(fallback_carried=carried), SPEC, REQUEST)
    assert raised.value.usage == expected


# What a call that gives its stream up leaves behind ------------------------------------------------
#: a failure guard only: how long a fake stream blocks or a test waits before it gives up
LONG = 30.0


def unhurried(name: str) -> ModelSpec:
    """The spec of a call that only a cancellation or its stream's end can end: clocks of minutes."""
    return ModelSpec(name=name, provider="fake", first_chunk_timeout=600.0, idle_timeout=600.0, deadline=600.0)


def stream_thread(name: str) -> list[threading.Thread]:
    """The producer thread of the model ``name``, while it is alive."""
    return [t for t in threading.enumerate() if t.name == f"llm-stream-{name}"]


class BlocksUntilAborted:
    """An abortable stream whose first read blocks until ``abort()`` (a network read on a
    socket that ``abort()`` shuts down), then fails as an aborted network stream does."""

    def __init__(self) -> None:
        self.reading, self.unblocked = threading.Event(), threading.Event()
        self.aborts = self.closes = 0

    def __iter__(self) -> Iterator[TextDelta]:
        return self

    def __next__(self) -> TextDelta:
        self.reading.set()
        self.unblocked.wait(LONG)  # a failure guard: the test unblocks it at the latest
        raise StreamStalled("fake stream aborted")

    def abort(self) -> None:
        self.aborts += 1
        self.unblocked.set()

    def close(self) -> None:
        self.closes += 1


class Streams(NoTextThenFallback):
    """A provider whose ``stream()`` returns ``stream``."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self._stream = stream

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Any:
        return self._stream


def test_a_call_cancelled_before_it_waits_aborts_the_stream_its_producer_still_reads(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The caller finds ``should_stop()`` true at its first check, while the producer is blocked
    in the stream's first read: the guard aborts the stream so that the producer ends with the
    call. (The watchdog, which polls the same ``should_stop()`` and would abort the stream too, is
    given a watch that is never due: this is the case where the caller stops before it polls.)"""
    monkeypatch.setattr(guard, "JOIN_GRACE", 5.0)  # a failure guard for a loaded machine, not a clock
    spec = unhurried("held")
    stream = BlocksUntilAborted()
    try:
        with caplog.at_level(logging.INFO, logger="orchestrator.gateway.guard"), \
                pytest.raises(CallCancelled) as raised:
            _read_stream(Streams(stream), spec, REQUEST, Watch(spec, lambda: False), lambda text: None,
                         lambda: stream.reading.wait(LONG))  # stopped once the producer is in its read
        alive = stream_thread("held")
    finally:
        stream.unblocked.set()  # a mutant that never aborts must not leave it blocked
    assert raised.value.message == "model 'held': cancelled"
    assert stream.aborts == 1  # aborted once, by the caller that gave it up
    assert alive == []  # the producer ended with the call: no thread left behind
    assert stream.closes == 1  # and closed its stream in its own thread
    assert "action=stream_thread_left_behind" not in caplog.text


class EndsAtOnce:
    """An abortable stream that ends before its first event: it fails, or it is empty."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.aborts = self.closes = 0

    def __iter__(self) -> Iterator[TextDelta]:
        return self

    def __next__(self) -> TextDelta:
        if self.error is not None:
            raise self.error
        raise StopIteration

    def abort(self) -> None:
        self.aborts += 1

    def close(self) -> None:
        self.closes += 1


ENDINGS = [ProviderUnavailable("the stream broke before any text"), None]


@pytest.mark.parametrize("error", ENDINGS, ids=["fails-at-once", "empty"])
def test_a_stream_that_ended_is_never_aborted(error: Exception | None) -> None:
    """A network stream's ``abort()`` shuts its response's socket down; once the stream has ended
    that connection may be back in its pool, another call's (the fallback's, say), so the guard
    aborts only a stream its producer is still reading — here, one read to its end and falling
    back, and one whose call was cancelled after it ended but before its caller read the end."""
    read = EndsAtOnce(error)
    completion = guarded_call(Streams(read), unhurried("ended"), REQUEST)
    assert completion.fallback and completion.text == "Ship the pilot."
    assert (read.aborts, read.closes) == (0, 1)

    spec = unhurried("ended-unread")
    unread = EndsAtOnce(error)

    def producer_ended() -> bool:  # the cancellation comes once the producer has returned
        for thread in stream_thread("ended-unread"):
            thread.join(LONG)
        return True

    with pytest.raises(CallCancelled):
        _read_stream(Streams(unread), spec, REQUEST, Watch(spec, lambda: False), lambda text: None, producer_ended)
    assert (unread.aborts, unread.closes) == (0, 1)
    assert stream_thread("ended-unread") == []


class RecordsTrips:
    """The watchdog, keeping every trip it is given so that a test can call one late: the real
    watchdog decides a watch is due under its lock and calls its trip after releasing it, so a
    trip can come after its stream ended, even after its call returned."""

    def __init__(self) -> None:
        self.trips: list[Callable[[], None]] = []

    @contextmanager
    def watching(self, watch: Watch, trip: Callable[[], None]) -> Iterator[Watch]:
        self.trips.append(trip)
        with WATCHDOG.watching(watch, trip) as watched:
            yield watched


class AbortableEnds:
    """An abortable stream that says two things and ends, counting its aborts."""

    def __init__(self) -> None:
        self.aborts = self.closes = 0
        self._events = iter([TextDelta("Ship the"), TextDelta(" pilot.")])

    def __iter__(self) -> Iterator[TextDelta]:
        return self._events

    def abort(self) -> None:
        self.aborts += 1

    def close(self) -> None:
        self.closes += 1


def test_a_late_trip_never_aborts_a_stream_that_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """A network stream's ``abort()`` shuts its response's socket down, and a stream that ended
    has given that connection back to its pool (the fallback's POST may be on it already): the
    watchdog's trip aborts a stream only while it is read. Three ends, each tripped after it: a
    stream handed over and read to its end by its caller (tripped once the call returned), one
    that ended before its first event and fell back (likewise), and one whose producer ended
    it while the caller had not yet read the end (tripped then, inside the call)."""
    watchdog = RecordsTrips()
    monkeypatch.setattr(guard, "WATCHDOG", watchdog)

    read = AbortableEnds()
    completion = guarded_call(Streams(read), unhurried("read-to-its-end"), REQUEST)
    assert completion.text == "Ship the pilot." and not completion.truncated
    watchdog.trips[0]()  # the watchdog found the call due just as its stream ended
    assert (read.aborts, read.closes) == (0, 1)

    empty = EndsAtOnce(None)
    completion = guarded_call(Streams(empty), unhurried("ended-at-once"), REQUEST)
    assert completion.fallback and completion.text == "Ship the pilot."
    watchdog.trips[1]()  # the stream's trip (trips[2] is its fallback's)
    assert (empty.aborts, empty.closes) == (0, 1)

    spec = unhurried("ended-unread")
    unread = EndsAtOnce(None)

    def trip_once_the_producer_ended() -> bool:
        for thread in stream_thread("ended-unread"):
            thread.join(LONG)
        watchdog.trips[-1]()  # due now: the end is still in the queue, unread
        return False

    outcome = _read_stream(Streams(unread), spec, REQUEST, Watch(spec, lambda: False), lambda text: None,
                           trip_once_the_producer_ended)
    assert (outcome.reason, outcome.text) == ("end", "")  # the end was queued before the trip
    assert (unread.aborts, unread.closes) == (0, 1)


# How long a call waits for the producer it stops (``_Producer._stop_thread``) ----------------------
CLOSING = 0.5  # how long the slow streams below take to close: their connection's last bytes


class ClosesSlowly(EndsAtOnce):
    """A stream that ends at once, like :class:`EndsAtOnce`, and takes ``CLOSING`` to close (a
    network stream reads its body's last bytes so that its connection goes back to its pool)."""

    def close(self) -> None:
        time.sleep(CLOSING)
        super().close()


class AbortedClosesSlowly(BlocksUntilAborted):
    def close(self) -> None:
        time.sleep(CLOSING)
        super().close()


class FallbackSeesTheStream(Streams):
    """Records whether the stream was closed when the fallback was asked."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.closed_at_fallback: int | None = None

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        self.closed_at_fallback = self._stream.closes
        return super().complete(spec, request)


def test_a_stopped_producer_is_waited_for_while_it_closes_its_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer that ended its stream itself, or that the call aborted, is waited for while it
    closes the stream (up to ``JOIN_GRACE``): the call returns, or asks its fallback, once the
    stream is closed — a network stream's connection is back in its pool, so the fallback reuses
    it — and no producer thread outlives the call. ``JOIN_GRACE`` is raised so that a loaded
    machine cannot fail this: what is asserted is which wait the call chose."""
    monkeypatch.setattr(guard, "JOIN_GRACE", LONG)
    ended = ClosesSlowly(ProviderUnavailable("the stream broke before any text"))
    provider = FallbackSeesTheStream(ended)
    completion = guarded_call(provider, unhurried("closing"), REQUEST)
    assert completion.fallback and completion.text == "Ship the pilot."
    assert provider.closed_at_fallback == 1  # closed before the fallback was asked
    assert (ended.aborts, ended.closes) == (0, 1) and stream_thread("closing") == []

    spec = unhurried("aborted-closing")
    aborted = AbortedClosesSlowly()
    try:
        with pytest.raises(CallCancelled):
            _read_stream(Streams(aborted), spec, REQUEST, Watch(spec, lambda: False), lambda text: None,
                         lambda: aborted.reading.wait(LONG))
        alive = stream_thread("aborted-closing")
    finally:
        aborted.unblocked.set()
    assert aborted.aborts == 1 and aborted.closes == 1  # aborted, then closed before the call returned
    assert alive == []


class BlocksUntilReleased:
    """A stream whose first read blocks until the test releases it: without ``abort()``, or with
    an ``abort()`` that does not wake the read (a network stream aborted before its response is
    open: the connect it is blocked in goes on)."""

    def __init__(self) -> None:
        self.reading, self.released = threading.Event(), threading.Event()

    def __iter__(self) -> Iterator[TextDelta]:
        return self

    def __next__(self) -> TextDelta:
        self.reading.set()
        self.released.wait(LONG)
        raise StopIteration


class AbortDoesNotWake(BlocksUntilReleased):
    def abort(self) -> None:
        pass


@pytest.mark.parametrize(("stream", "grace", "abortable"), [
    (BlocksUntilReleased, LONG, False),  # not waited for at all: JOIN_GRACE is not its wait
    (AbortDoesNotWake, 0.2, True),  # waited for JOIN_GRACE, then left
], ids=["without-abort", "abort-does-not-wake"])
def test_a_producer_that_does_not_end_is_left_behind_and_logged(
        stream: type[BlocksUntilReleased], grace: float, abortable: bool,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A producer blocked in a read its stream cannot end is left behind when the call gives up —
    at once when the stream has no ``abort()``, after ``JOIN_GRACE`` when its abort did not wake
    it — and the worker log says so in the line an operator looks for: the model, and whether
    the stream could be aborted (a left-behind abortable stream means aborts are not working)."""
    monkeypatch.setattr(guard, "JOIN_GRACE", grace)
    spec = unhurried("stuck")
    held = stream()
    release = threading.Timer(LONG / 3, held.released.set)  # a failure guard: a call that waits is released
    release.start()
    try:
        with caplog.at_level(logging.INFO, logger="orchestrator.gateway.guard"), pytest.raises(CallCancelled):
            _read_stream(Streams(held), spec, REQUEST, Watch(spec, lambda: False), lambda text: None,
                         lambda: held.reading.wait(LONG))
        left = stream_thread("stuck")
    finally:
        held.released.set()
        release.cancel()
    assert [t.name for t in left] == ["llm-stream-stuck"]  # the call did not wait for the stream
    assert left[0].daemon  # the last resort: a thread left behind never keeps the worker from exiting
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        f"action=stream_thread_left_behind model=stuck abortable={abortable}"]
    left[0].join(LONG)
    assert not left[0].is_alive()  # released, it ends


class IteratesApart:
    """A stream whose iterator is another object — a generator, which waits for ``go`` after its
    first words — and which has a ``close()`` of its own. A ``Provider`` may return any iterable,
    so the guard closes both: the generator (its ``finally``: a response closed) and the stream."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.generator_closed = False
        self.closes = 0

    def _events(self) -> Iterator[TextDelta]:
        try:
            yield TextDelta("Ship the")
            self.go.wait(LONG)
            yield TextDelta(" pilot.")
        finally:
            self.generator_closed = True

    def __iter__(self) -> Iterator[TextDelta]:
        return self._events()

    def close(self) -> None:
        self.closes += 1


class AbortableIteratesApart(IteratesApart):
    def abort(self) -> None:
        self.go.set()


@pytest.mark.parametrize("stream", [IteratesApart, AbortableIteratesApart], ids=["read-by-its-producer", "handed-over"])
def test_a_stream_given_up_has_its_iterator_and_itself_closed(stream: type[IteratesApart]) -> None:
    """Cancelled after its first words: a stream read by its producer is closed by the producer once
    it wakes, one handed over by the call as it returns — both the iterator and the stream. (The
    raised error keeps the call's frames, and so the generator, alive: only an explicit close
    runs its ``finally`` here.)"""
    stop = threading.Event()
    held = stream()
    with pytest.raises(CallCancelled) as raised:
        guarded_call(Streams(held), unhurried("apart"), REQUEST, on_text=lambda text: stop.set(),
                     should_stop=stop.is_set)
    held.go.set()  # a producer left in the stream wakes, sees the stop and closes it
    for thread in stream_thread("apart"):
        thread.join(LONG)
    assert raised.value.message == "model 'apart': cancelled"
    assert held.generator_closed and held.closes == 1


class SaysWithoutReport(NoTextThenFallback):
    """A stream that shows three pieces of text and never reports its usage."""

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
        yield TextDelta("Ship the")
        yield TextDelta(" pilot")
        yield TextDelta(" first.")


class AbortableSaysWithoutReport(SaysWithoutReport):
    """The same words from an abortable stream: handed over after the first, read by the call."""

    class Stream:
        def __init__(self, events: Iterator[UsageReport | TextDelta]) -> None:
            self._events = events

        def __iter__(self) -> Iterator[UsageReport | TextDelta]:
            return self._events

        def abort(self) -> None:
            pass

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Any:
        return self.Stream(super().stream(spec, request))


@pytest.mark.parametrize("provider", [SaysWithoutReport, AbortableSaysWithoutReport],
                         ids=["read-by-its-producer", "handed-over"])
def test_a_cancelled_call_without_a_report_carries_an_estimate_of_what_it_showed(
        provider: type[SaysWithoutReport]) -> None:
    """What a cancellation costs when the provider reported nothing: an estimate of the text shown,
    labelled as one; nothing when nothing was shown."""
    shown: list[str] = []
    with pytest.raises(CallCancelled) as raised:  # cancelled once two pieces were shown
        guarded_call(provider(), SPEC, REQUEST, on_text=shown.append, should_stop=lambda: len(shown) == 2)
    assert shown == ["Ship the", " pilot"]
    assert raised.value.usage == estimate_usage(REQUEST, "Ship the pilot")
    assert raised.value.usage is not None and raised.value.usage.source == "estimated"
    with pytest.raises(CallCancelled) as raised:
        guarded_call(provider(), SPEC, REQUEST, should_stop=lambda: True)
    assert raised.value.usage is None


class TextThenBlocksUntilAborted(BlocksUntilAborted):
    """An abortable stream that says something, then blocks in its next read until aborted."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def __next__(self) -> TextDelta:
        if not self.said:
            self.said = True
            return TextDelta("Ship the")
        return super().__next__()


def test_the_worker_log_names_a_stall_as_one(caplog: pytest.LogCaptureFixture) -> None:
    """A stream the watchdog gave up: the log line names the clock that ran out and the error the
    reader saw — a stall — for a call that fell back and for one cut after text. (The streams
    never send: the clocks can only run out; how soon is not asserted.)"""
    spec = ModelSpec(name="fake", provider="fake", first_chunk_timeout=0.2, idle_timeout=0.2, deadline=LONG)
    silent, cut = BlocksUntilAborted(), TextThenBlocksUntilAborted()
    with caplog.at_level(logging.WARNING, logger="orchestrator.gateway.guard"):
        fell_back = guarded_call(Streams(silent), spec, REQUEST)
        truncated = guarded_call(Streams(cut), spec, REQUEST)
    assert fell_back.fallback and fell_back.fallback_reason == "first_chunk_timeout"
    assert truncated.truncated and truncated.text == "Ship the" and truncated.finish_reason == "idle_timeout"
    assert [r.getMessage() for r in caplog.records] == [
        "action=stream_fallback model=fake reason=first_chunk_timeout error=StreamStalled upstream=None",
        "action=stream_truncated model=fake reason=idle_timeout chars_shown=8 error=StreamStalled upstream=None",
    ]
    assert silent.aborts >= 1 and cut.aborts >= 1  # each stall ended by an abort, not by the failure guard


# The non-streaming fallback's own ends (``_bounded_complete``) --------------------------------------
class SilentThenSlowFallback(NoTextThenFallback):
    """A stream that reports what it spent and ends with no text; a fallback that blocks until
    released (then answers), or raises ``error``; ``finish_reason`` is the fallback's."""

    def __init__(self, *, error: Exception | None = None, finish_reason: str | None = None) -> None:
        super().__init__(reported=PROVIDER)
        self.error, self.finish_reason = error, finish_reason
        self.asked, self.release = threading.Event(), threading.Event()
        self.threads: list[threading.Thread] = []

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        self.threads.append(threading.current_thread())
        self.asked.set()
        if self.error is not None:
            raise self.error
        if self.finish_reason is None:
            self.release.wait(LONG)
        return Completion(text="Ship the pilot.", usage=self.fallback, finish_reason=self.finish_reason)


def test_a_fallback_cancelled_or_past_the_deadline_ends_carrying_the_streams_usage() -> None:
    """A fallback still running is given up: when the call is cancelled (the watchdog polls
    ``should_stop``), and at the deadline; either way the error carries what the stream spent.
    The fallback runs in a daemon thread named after the model, which is left to end alone."""
    cancelled = SilentThenSlowFallback()
    with pytest.raises(CallCancelled) as raised:
        guarded_call(cancelled, unhurried("slow-fallback"), REQUEST, should_stop=cancelled.asked.is_set)
    assert raised.value.message == "model 'slow-fallback': cancelled during fallback"
    assert raised.value.usage == PROVIDER
    assert [(t.name, t.daemon) for t in cancelled.threads] == [("llm-complete-slow-fallback", True)]
    cancelled.release.set()

    spec = ModelSpec(name="late-fallback", provider="fake", first_chunk_timeout=LONG, idle_timeout=LONG, deadline=0.5)
    late = SilentThenSlowFallback()
    try:
        with pytest.raises(StreamStalled) as stalled:
            guarded_call(late, spec, REQUEST)
    finally:
        late.release.set()
    assert stalled.value.message == "model 'late-fallback': fallback did not finish within the deadline of 0.5s"
    assert stalled.value.usage == PROVIDER


def test_a_fallback_that_breaks_or_stops_short_says_so() -> None:
    """A fallback that raises something other than a provider error ends the call as the provider
    being unavailable, naming the error, carrying the stream's usage and caused by the error; one
    that answers keeps its finish reason (a reply cut at its length limit stays marked so)."""
    bug = RuntimeError("a bug in complete()")
    with pytest.raises(ProviderUnavailable) as raised:
        guarded_call(SilentThenSlowFallback(error=bug), SPEC, REQUEST)
    assert raised.value.message == "model 'fake': RuntimeError in complete()"
    assert raised.value.usage == PROVIDER and raised.value.__cause__ is bug
    completion = guarded_call(SilentThenSlowFallback(finish_reason="length"), SPEC, REQUEST)
    assert completion.fallback and completion.finish_reason == "length"


# What a streamed call costs ---------------------------------------------------------------------
class Says(NoTextThenFallback):
    """A stream that may report ``reported`` first, says two things, then ends or raises ``error``."""

    def __init__(self, *, reported: Usage | None, error: Exception | None = None) -> None:
        super().__init__()
        self.reported_first, self.error = reported, error

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
        if self.reported_first is not None:
            yield UsageReport(self.reported_first)
        yield TextDelta("Ship the")
        yield TextDelta(" pilot.")
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize("error", [None, ProviderUnavailable("the stream broke")], ids=["ended", "cut"])
def test_a_streamed_call_costs_what_its_provider_reported_else_an_estimate(error: Exception | None) -> None:
    reported = guarded_call(Says(reported=PROVIDER, error=error), SPEC, REQUEST)
    silent = guarded_call(Says(reported=None, error=error), SPEC, REQUEST)
    assert reported.text == silent.text == "Ship the pilot."
    assert reported.truncated == silent.truncated == (error is not None)
    assert reported.usage == PROVIDER
    assert silent.usage == estimate_usage(REQUEST, "Ship the pilot.")


def test_a_rate_limit_after_a_report_carries_what_the_stream_reported() -> None:
    """Refused before any text (no fallback: a non-streaming call would be refused too), after the
    provider reported what the attempt spent: the error carries that report."""
    class ReportsThenRateLimited(NoTextThenFallback):
        def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
            yield UsageReport(PROVIDER)
            raise RateLimited("slow down", retry_after=2.0)

    with pytest.raises(RateLimited) as raised:
        guarded_call(ReportsThenRateLimited(), SPEC, REQUEST)
    assert raised.value.usage == PROVIDER


def test_a_fallback_is_replayed_in_order_in_pieces_of_replay_chunk_characters() -> None:
    shown: list[str] = []
    completion = guarded_call(LongFallback(), SPEC, REQUEST, on_text=shown.append)
    text = "Ship the pilot first, then the rest once it has paid for itself."
    assert completion.fallback and completion.text == text
    assert shown == [text[i:i + REPLAY_CHUNK] for i in range(0, len(text), REPLAY_CHUNK)]
    assert len(shown) == 3 and "".join(shown) == text  # 64 characters: 24 + 24 + 16
