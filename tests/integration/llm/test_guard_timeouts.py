"""The stream guard's two clocks when they differ, both ways: ``first_chunk_timeout``
bounds the wait for the first text and nothing after it; ``idle_timeout`` bounds each
gap after text and not the wait before it. Every case runs against the real HTTP test
server; each is built so that using the other clock (or both, or the first one for the
whole stream) changes the outcome, and the wrong clock is many times the right one, so
the elapsed time tells them apart with a wide margin."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from orchestrator.gateway.guard import guarded_call
from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.types import ChatRequest, Completion
from tests.llm_server import DEFAULT_REPLY, LLMServer

KEY_ENV = "CONCLAVE_TEST_LLM_KEY"
REQUEST = ChatRequest(system="You are the CFO.", prompt="Should we ship?")
PIECE = 30  # characters per streamed piece: DEFAULT_REPLY is three pieces
SHORT, LONG = 0.3, 8.0


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-guard")


def call(server: LLMServer, scenario: str, *, first: float, idle: float) -> tuple[Completion, list[str], float]:
    shown: list[str] = []
    spec = server.spec(scenario, "openai", first_chunk_timeout=first, idle_timeout=idle, api_key_env=KEY_ENV,
                       deadline=30.0)
    started = time.monotonic()
    completion = guarded_call(OpenAIProvider(), spec, REQUEST, on_text=shown.append)
    return completion, shown, time.monotonic() - started


@pytest.fixture()
def dripping(request: pytest.FixtureRequest) -> Iterator[LLMServer]:
    """Every event (the opening one without text, each piece, the end, the usage) ``param`` seconds apart."""
    with LLMServer(chunk_chars=PIECE, drip_delay=request.param, hang_seconds=60) as server:
        yield server


@pytest.fixture()
def stalling() -> Iterator[LLMServer]:
    with LLMServer(chunk_chars=8, hang_seconds=60) as server:
        yield server


def test_before_text_the_first_chunk_timeout_applies_not_the_idle_one(stalling: LLMServer) -> None:
    completion, shown, elapsed = call(stalling, "hang-first", first=SHORT, idle=LONG)
    assert completion.fallback and completion.text == DEFAULT_REPLY == "".join(shown)
    assert elapsed < LONG / 2, f"the wait for the first text took {elapsed:.1f}s: not first_chunk_timeout"


@pytest.mark.parametrize("dripping", [0.8], indirect=True)
def test_a_first_text_later_than_the_idle_timeout_is_waited_for(dripping: LLMServer) -> None:
    """The first text comes 0.8 s in (the first-chunk clock allows 8 s; the idle clock,
    0.3 s, is not running yet); the next gap is 0.8 s too: the idle clock ends it there."""
    completion, shown, elapsed = call(dripping, "drip", first=LONG, idle=SHORT)
    assert not completion.fallback, "the idle timeout was applied before the first text"
    assert completion.truncated and completion.finish_reason == "idle_timeout"
    assert completion.text == DEFAULT_REPLY[:PIECE] == "".join(shown)
    assert elapsed < LONG / 2, f"the gap after text took {elapsed:.1f}s to end: not idle_timeout"


def test_after_text_the_idle_timeout_applies_not_the_first_chunk_one(stalling: LLMServer) -> None:
    completion, shown, elapsed = call(stalling, "stall-mid", first=LONG, idle=SHORT)
    assert completion.truncated and not completion.fallback and completion.finish_reason == "idle_timeout"
    assert completion.text == DEFAULT_REPLY[:16] == "".join(shown)
    assert elapsed < LONG / 2, f"the stall after text took {elapsed:.1f}s to end: not idle_timeout"


@pytest.mark.parametrize("dripping", [0.5], indirect=True)
def test_the_first_chunk_timeout_stops_counting_once_text_arrived(dripping: LLMServer) -> None:
    """Six events 0.5 s apart: 3 s in all, well past first_chunk_timeout (1.5 s), every gap
    well within idle_timeout (8 s): the whole reply, neither cut nor replayed."""
    completion, shown, elapsed = call(dripping, "drip", first=1.5, idle=LONG)
    assert not completion.truncated and not completion.fallback, completion.finish_reason
    assert completion.text == DEFAULT_REPLY and shown == [DEFAULT_REPLY[i:i + PIECE]
                                                          for i in range(0, len(DEFAULT_REPLY), PIECE)]
    assert elapsed > 1.5  # the stream did outlast the first-chunk timeout
