"""The stream guard's contract (failure report 001): no hang, no double broadcast,
no invented usage. Every case runs against the real HTTP test server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from orchestrator.gateway.failures import AuthError, CallCancelled, StreamStalled
from orchestrator.gateway.fallback import REPLAY_CHUNK
from orchestrator.gateway.guard import guarded_call
from orchestrator.gateway.providers.anthropic import AnthropicProvider
from orchestrator.gateway.providers.ollama import OllamaProvider
from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.tokens import estimate_usage
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Provider, TextDelta, Usage, UsageReport
from tests.llm_server import DEFAULT_REPLY, LLMServer

KEY_ENV = "CONCLAVE_TEST_LLM_KEY"
PROVIDERS: dict[str, Provider] = {
    "openai": OpenAIProvider(),
    "ollama": OllamaProvider(),
    "anthropic": AnthropicProvider(),
}
REQUEST = ChatRequest(system="You are the CFO.", prompt="Should we ship?")
TIMEOUT = 0.3
#: the clocks of a scenario that is not about them: far above a loaded machine's scheduling delay
#: (a 0.3 s first-chunk clock fired on a normal stream at load 8 on 2 cores), below the deadline
CALM = 3.0
HANGING = frozenset({"hang-first", "keepalive-hang", "stall-mid", "hang-all"})
# Hanging scenarios hang far longer than a call's deadline (the server spec's 5 s), so a
# guard that ignored a timeout would end in the deadline, never in the server giving up:
# the tests tell the two apart by the outcome and the reason, not by the clock.
HANG = 60.0


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    monkeypatch.setenv(KEY_ENV, "sk-test-guard")
    with LLMServer(hang_seconds=HANG) as running:
        yield running


def spec_for(server: LLMServer, scenario: str, wire: str = "openai", **overrides: object) -> ModelSpec:
    clock = TIMEOUT if scenario in HANGING else CALM
    values: dict[str, object] = {
        "first_chunk_timeout": clock,
        "idle_timeout": clock,
        "api_key_env": KEY_ENV,
    }
    values.update(overrides)
    return server.spec(scenario, wire, **values)


def run(
    server: LLMServer, scenario: str, wire: str = "openai", **overrides: object
) -> tuple[Completion, list[str]]:
    shown: list[str] = []
    completion = guarded_call(
        PROVIDERS[wire], spec_for(server, scenario, wire, **overrides), REQUEST, on_text=shown.append
    )
    return completion, shown


def fallback_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Why the guard fell back, as it logged it (``action=stream_fallback … reason=…``)."""
    return [r.getMessage().split("reason=")[1].split()[0] for r in caplog.records
            if "action=stream_fallback" in r.getMessage()]


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("llm-stream-")]


# (a) a normal stream is delivered chunk by chunk -------------------------------------------------
@pytest.mark.parametrize("wire", PROVIDERS)
def test_normal_stream_is_delivered_chunk_by_chunk(server: LLMServer, wire: str) -> None:
    completion, shown = run(server, "normal", wire)
    assert completion == Completion(text=DEFAULT_REPLY, usage=Usage(17, 42, "provider"))
    assert shown == [DEFAULT_REPLY[i : i + 8] for i in range(0, len(DEFAULT_REPLY), 8)]
    assert server.count(stream=False) == 0


# (b) no first chunk / empty / error before text -> fallback, replayed ------------------------------
@pytest.mark.parametrize("wire", PROVIDERS)
def test_no_first_chunk_falls_back_and_replays(server: LLMServer, wire: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    completion, shown = run(server, "hang-first", wire)
    assert fallback_reasons(caplog) == ["first_chunk_timeout"]  # not the deadline, not the server giving up
    assert completion.fallback and not completion.truncated
    assert completion.text == DEFAULT_REPLY
    assert "".join(shown) == DEFAULT_REPLY
    assert len(shown) > 1 and all(len(chunk) <= REPLAY_CHUNK for chunk in shown)
    assert completion.usage == Usage(17, 42, "provider")
    assert (server.count(stream=True), server.count(stream=False)) == (1, 1)
    assert stream_threads() == []  # the hung read was aborted, not left behind


def test_keepalive_comments_do_not_count_as_a_first_chunk(server: LLMServer) -> None:
    completion, shown = run(server, "keepalive-hang")
    assert completion.fallback and "".join(shown) == DEFAULT_REPLY


@pytest.mark.parametrize("wire", PROVIDERS)
def test_empty_stream_falls_back(server: LLMServer, wire: str) -> None:
    completion, shown = run(server, "empty", wire)
    assert completion.fallback and "".join(shown) == DEFAULT_REPLY
    # the empty stream's own report (17 in, 0 out) is added to the fallback's: both were billed
    assert completion.usage == Usage(34, 42, "provider")


@pytest.mark.parametrize("wire", PROVIDERS)
def test_error_before_any_text_falls_back(server: LLMServer, wire: str) -> None:
    completion, shown = run(server, "error-first", wire)
    assert completion.fallback and completion.text == DEFAULT_REPLY
    assert "".join(shown) == DEFAULT_REPLY
    if wire == "anthropic":  # message_start reported 17 in / 1 out before the error event
        assert completion.usage == Usage(34, 43, "provider")
    else:
        assert completion.usage == Usage(17, 42, "provider")


# (c) an error or stall after partial text -> truncated, never repeated -----------------------------
@pytest.mark.parametrize("wire", PROVIDERS)
def test_break_after_partial_text_is_truncated_without_double_broadcast(server: LLMServer, wire: str) -> None:
    completion, shown = run(server, "break-mid", wire)
    assert completion.truncated and not completion.fallback
    assert completion.text == DEFAULT_REPLY[:16] == "".join(shown)
    assert shown == [DEFAULT_REPLY[:8], DEFAULT_REPLY[8:16]]
    assert server.count(stream=False) == 0  # complete() was never called
    assert completion.usage == estimate_usage(REQUEST, DEFAULT_REPLY[:16])


def test_idle_timeout_after_partial_text_is_truncated(server: LLMServer) -> None:
    # the first chunk on a calm clock (a loaded machine may be slower than TIMEOUT to send it)
    completion, shown = run(server, "stall-mid", first_chunk_timeout=CALM)
    assert completion.truncated and completion.finish_reason == "idle_timeout"  # not "deadline"
    assert "".join(shown) == completion.text == DEFAULT_REPLY[:16]
    assert server.count(stream=False) == 0
    assert stream_threads() == []


# (d) usage: the provider's, or an estimate that says so --------------------------------------------
@pytest.mark.parametrize("wire", PROVIDERS)
def test_missing_usage_is_estimated_and_labelled(server: LLMServer, wire: str) -> None:
    completion, _ = run(server, "no-usage", wire)
    assert completion.usage == estimate_usage(REQUEST, DEFAULT_REPLY)
    assert completion.usage.source == "estimated" and completion.usage.method == "chars/4"


class ReportsThenFails:
    """A stream that reports usage and then fails fatally before any text."""

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[UsageReport | TextDelta]:
        yield UsageReport(Usage(120, 0, "provider"))
        raise AuthError("key revoked mid-call")

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        raise AssertionError("a fatal error must not fall back")


def test_failure_after_reported_usage_carries_it() -> None:
    spec = ModelSpec(name="fake", provider="fake", first_chunk_timeout=TIMEOUT, idle_timeout=TIMEOUT)
    with pytest.raises(AuthError) as raised:
        guarded_call(ReportsThenFails(), spec, REQUEST)
    assert raised.value.usage == Usage(120, 0, "provider")


# deadline and cancellation ---------------------------------------------------------------------------
def test_deadline_bounds_stream_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-guard")
    with LLMServer(hang_seconds=15.0) as hanging:  # past the deadline, the server would drop the call
        started = time.monotonic()
        with pytest.raises(StreamStalled, match=r"fallback did not finish within the deadline of 1\.0s"):
            run(hanging, "hang-all", deadline=1.0)
        assert time.monotonic() - started >= 1.0
        assert (hanging.count(stream=True), hanging.count(stream=False)) == (1, 1)


def test_should_stop_cancels_a_running_stream_promptly(server: LLMServer) -> None:
    server.reply = DEFAULT_REPLY * 20  # 210 pieces, 50 ms apart: still dripping when cancelled
    shown: list[str] = []
    caller = threading.current_thread()
    with pytest.raises(CallCancelled) as raised:
        guarded_call(
            PROVIDERS["openai"],
            spec_for(server, "drip"),
            REQUEST,
            on_text=shown.append,
            # cancelled once three pieces were shown — as the caller's thread sees it: the
            # watchdog, which polls too, would otherwise stop the stream in a gap between
            # pieces now and then, and the caller's own check would go untested
            should_stop=lambda: threading.current_thread() is caller and len(shown) >= 3,
        )
    assert len(shown) == 3  # polled before every event: not one more piece after the stop
    assert "".join(shown) == (DEFAULT_REPLY * 20)[: len("".join(shown))]
    assert raised.value.usage is not None and raised.value.usage.source == "estimated"
    assert stream_threads() == []


def test_should_stop_cancels_while_waiting_for_the_first_chunk(server: LLMServer) -> None:
    with pytest.raises(CallCancelled) as raised:
        guarded_call(
            PROVIDERS["openai"],
            spec_for(server, "hang-first", first_chunk_timeout=10, deadline=30),
            REQUEST,
            should_stop=lambda: server.count(stream=True) >= 1,  # cancelled once the request is out
        )
    assert raised.value.message == "model 'hang-first': cancelled"  # while waiting, not during a fallback
    assert server.count(stream=False) == 0


class NeverYields:
    """A plain generator that blocks without an abort(): the last-resort case."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed = threading.Event()

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[TextDelta]:
        try:
            self.release.wait(5)
            yield TextDelta("late")
        finally:
            self.closed.set()

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        return Completion(text="from complete", usage=Usage(5, 2, "provider"))


def test_a_stream_without_abort_is_closed_once_it_wakes() -> None:
    provider = NeverYields()
    spec = ModelSpec(name="fake", provider="fake", first_chunk_timeout=TIMEOUT, idle_timeout=TIMEOUT)
    shown: list[str] = []
    completion = guarded_call(provider, spec, REQUEST, on_text=shown.append)
    assert completion.fallback and shown == ["from complete"]
    provider.release.set()
    assert provider.closed.wait(2)  # the producer closed the generator; "late" was never shown
    assert shown == ["from complete"]


# an abortable stream is read on the caller's thread after its first event -----------------------
class Abortable:
    """An abortable stream that records which thread reads each of its events."""

    def __init__(self, pieces: int, gap: float = 0.0, hang_after: int | None = None) -> None:
        self.pieces, self.gap, self.hang_after = pieces, gap, hang_after
        self.readers: list[int] = []
        self.aborted = threading.Event()
        self.closed = threading.Event()

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Abortable:
        return self

    def __iter__(self) -> Iterator[TextDelta]:
        try:
            for n in range(self.pieces):
                if n == self.hang_after:
                    self.aborted.wait(HANG)
                if self.aborted.wait(self.gap) if self.gap else self.aborted.is_set():
                    raise StreamStalled("aborted")
                self.readers.append(threading.get_ident())
                yield TextDelta(f"p{n} ")
        finally:
            self.closed.set()

    def abort(self) -> None:
        self.aborted.set()

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        raise AssertionError("a stream that showed text is never completed again")


def test_an_abortable_stream_is_read_on_the_callers_thread() -> None:
    provider = Abortable(pieces=50)
    shown_on: list[int] = []
    spec = ModelSpec(name="fake", provider="fake", first_chunk_timeout=TIMEOUT, idle_timeout=TIMEOUT)
    completion = guarded_call(provider, spec, REQUEST, on_text=lambda text: shown_on.append(threading.get_ident()))
    caller = threading.get_ident()
    assert completion.text == "".join(f"p{n} " for n in range(50)) and not completion.truncated
    assert provider.readers[0] != caller  # the first event: a producer, which nothing can block
    assert set(provider.readers[1:]) == {caller}  # the other 49: no thread switch per chunk
    assert set(shown_on) == {caller} and len(shown_on) == 50
    assert provider.closed.is_set() and not provider.aborted.is_set()
    assert stream_threads() == []


def test_the_watchdog_ends_a_read_blocked_after_the_handover() -> None:
    provider = Abortable(pieces=10, hang_after=3)
    spec = ModelSpec(name="fake", provider="fake", first_chunk_timeout=TIMEOUT, idle_timeout=TIMEOUT, deadline=10)
    started = time.monotonic()
    completion = guarded_call(provider, spec, REQUEST)
    assert completion.truncated and completion.finish_reason == "idle_timeout"
    assert completion.text == "p0 p1 p2 "
    assert provider.aborted.is_set() and provider.closed.is_set()
    assert time.monotonic() - started < HANG / 2  # the abort woke the read, not the hang ending


def test_should_stop_cancels_a_read_blocked_after_the_handover(server: LLMServer) -> None:
    stop = threading.Event()
    shown: list[str] = []

    def show(text: str) -> None:
        shown.append(text)
        if len(shown) == 2:  # the server stalls after its second piece: cancel then, while it hangs
            threading.Timer(0.2, stop.set).start()

    started = time.monotonic()
    with pytest.raises(CallCancelled) as raised:
        guarded_call(PROVIDERS["openai"], spec_for(server, "stall-mid", idle_timeout=10, deadline=20),
                     REQUEST, on_text=show, should_stop=stop.is_set)
    assert raised.value.message == "model 'stall-mid': cancelled"
    assert "".join(shown) == DEFAULT_REPLY[:16]
    assert time.monotonic() - started < 5  # the watchdog's poll, not the idle timeout of 10 s
    assert server.count(stream=False) == 0
    assert stream_threads() == []


class StallsAfterText:
    """A plain generator without abort() that shows text, then blocks."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Iterator[TextDelta]:
        yield TextDelta("early ")
        self.release.wait(HANG)
        yield TextDelta("late")

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Completion:
        raise AssertionError("a stream that showed text is never completed again")


def test_a_stream_without_abort_that_stalls_after_text_is_truncated() -> None:
    provider = StallsAfterText()
    spec = ModelSpec(name="fake", provider="fake", first_chunk_timeout=TIMEOUT, idle_timeout=TIMEOUT, deadline=10)
    shown: list[str] = []
    before = set(stream_threads())
    try:
        completion = guarded_call(provider, spec, REQUEST, on_text=shown.append)
        left = [t for t in stream_threads() if t not in before]  # the call did not wait for the stream
    finally:
        provider.release.set()
    assert completion.truncated and completion.finish_reason == "idle_timeout"  # not "deadline"
    assert shown == ["early "] and completion.text == "early "
    assert [t.name for t in left] == ["llm-stream-fake"]
    left[0].join(10)
    assert not left[0].is_alive()  # released, the stream yields and its producer ends
