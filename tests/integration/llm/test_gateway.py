"""Gateway: retries, hooks, summarisation through the same door, against the real test server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from orchestrator.gateway.failures import (
    AuthError,
    BudgetExhausted,
    CallCancelled,
    LLMError,
    ProviderMisconfigured,
    ProviderUnavailable,
    RateLimited,
)
from orchestrator.gateway.model_gateway import CallHook, Gateway, default_providers
from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.types import ChatRequest, ContextBlock, ModelSpec, Usage
from tests.llm_server import DEFAULT_REPLY, LLMServer

KEY_ENV = "CONCLAVE_TEST_LLM_KEY"
KEY = "sk-test-gateway-SECRET-77"
REQUEST = ChatRequest(system="You are the CFO.", prompt="Should we ship?")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with LLMServer() as running:
        yield running


@dataclass
class Recorder(CallHook):
    before: list[ChatRequest] = field(default_factory=list)
    after: list[tuple[str, Usage | None, LLMError | None]] = field(default_factory=list)

    def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
        self.before.append(request)

    def after_call(
        self, spec: ModelSpec, request: ChatRequest, usage: Usage | None, error: LLMError | None
    ) -> None:
        self.after.append((request.purpose, usage, error))


@dataclass
class Sleeps:
    calls: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)

    @property
    def total(self) -> float:
        return sum(self.calls)


def gateway(hooks: tuple[CallHook, ...] = (), sleep: Sleeps | None = None) -> Gateway:
    return Gateway({"openai": OpenAIProvider()}, hooks, sleep=sleep or Sleeps())


def spec_for(server: LLMServer, scenario: str, **overrides: Any) -> ModelSpec:
    # no test here is about the stream's clocks: generous, so a loaded machine never trips them
    values: dict[str, Any] = {"first_chunk_timeout": 3.0, "idle_timeout": 3.0, "api_key_env": KEY_ENV}
    values.update(overrides)
    return server.spec(scenario, **values)


def test_normal_call_streams_and_records_usage(server: LLMServer) -> None:
    hook, shown = Recorder(), list[str]()
    completion = gateway((hook,)).call(spec_for(server, "normal"), REQUEST, on_text=shown.append)
    assert completion.text == DEFAULT_REPLY == "".join(shown)
    assert hook.after == [("phase", Usage(17, 42, "provider"), None)]


def test_rate_limit_is_retried_after_retry_after(server: LLMServer) -> None:
    hook, sleeps = Recorder(), Sleeps()
    completion = gateway((hook,), sleeps).call(spec_for(server, "rate-limit-then-ok"), REQUEST)
    assert completion.text == DEFAULT_REPLY and not completion.fallback
    assert server.count("rate-limit-then-ok") == 2
    assert sleeps.total == pytest.approx(2.0)  # the server's Retry-After: 2
    assert len(hook.before) == 2
    assert isinstance(hook.after[0][2], RateLimited) and hook.after[1] == (
        "phase",
        Usage(17, 42, "provider"),
        None,
    )


def test_retry_after_http_date_is_honoured(server: LLMServer) -> None:
    sleeps = Sleeps()
    gateway(sleep=sleeps).call(spec_for(server, "rate-limit-date-then-ok"), REQUEST)
    assert server.count("rate-limit-date-then-ok") == 2
    assert 1.0 <= sleeps.total <= 3.5


def test_retries_are_bounded_with_exponential_backoff(server: LLMServer) -> None:
    sleeps, hook = Sleeps(), Recorder()
    with pytest.raises(ProviderUnavailable):
        gateway((hook,), sleeps).call(spec_for(server, "server-error", max_retries=2), REQUEST)
    assert len(hook.before) == 3  # the first attempt and two retries
    # each attempt: the stream fails before any text, then the guard's fallback fails too
    assert server.count("server-error") == 6
    first, second = sum(sleeps.calls[:2]), sleeps.total - sum(sleeps.calls[:2])
    assert 0.8 <= first <= 1.0 and 1.6 <= second <= 2.0


def test_fatal_errors_are_raised_at_once_without_the_key(server: LLMServer) -> None:
    sleeps, hook = Sleeps(), Recorder()
    with pytest.raises(AuthError) as raised:
        gateway((hook,), sleeps).call(spec_for(server, "auth"), REQUEST)
    assert server.count("auth") == 1 and sleeps.calls == []
    assert KEY not in str(raised.value)
    assert hook.after[0][2] is raised.value


def test_partial_text_is_not_retried(server: LLMServer) -> None:
    shown: list[str] = []
    completion = gateway().call(spec_for(server, "break-mid"), REQUEST, on_text=shown.append)
    assert completion.truncated and completion.text == "".join(shown) == DEFAULT_REPLY[:16]
    assert server.count("break-mid") == 1


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ProviderMisconfigured, match="known providers: openai"):
        gateway().call(ModelSpec(name="x", provider="nope"), REQUEST)


def test_before_call_can_refuse_the_call(server: LLMServer) -> None:
    class Broke(Recorder):
        def before_call(self, spec: ModelSpec, request: ChatRequest) -> None:
            raise BudgetExhausted("plan budget spent")

    hook = Broke()
    with pytest.raises(BudgetExhausted):
        gateway((hook,)).call(spec_for(server, "normal"), REQUEST)
    assert server.requests == [] and hook.after == []


def test_cancellation_during_backoff(server: LLMServer) -> None:
    sleeps = Sleeps()
    with pytest.raises(CallCancelled):
        gateway(sleep=sleeps).call(
            spec_for(server, "rate-limit-then-ok"), REQUEST, should_stop=lambda: len(sleeps.calls) >= 1
        )
    assert server.count() == 1


def test_small_window_forces_a_summary_through_the_hooks(server: LLMServer) -> None:
    def reply(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        return "Alice backs the pilot." if "Summarise the material above" in text else DEFAULT_REPLY

    server.reply = reply
    old = ContextBlock(source="r1.alice", title="Alice, round 1", text="I back the pilot. " * 200)
    new = ContextBlock(source="r1.bob", title="Bob, round 1", text="Costs worry me. " * 100)
    request = ChatRequest(system="You are the CFO.", prompt="Should we ship?", context=(old, new))
    hook, shown = Recorder(), list[str]()

    completion = gateway((hook,)).call(
        spec_for(server, "normal", context_window=1400, max_output_tokens=200), request, on_text=shown.append
    )

    assert completion.text == DEFAULT_REPLY == "".join(shown)  # the summary was not shown to watchers
    assert [purpose for purpose, _, _ in hook.after] == ["summarise", "phase"]
    assert hook.after[0][1] == Usage(17, 42, "provider")
    assert [r.purpose for r in hook.before] == ["summarise", "phase"]
    summary_request, phase_request = (r.body["messages"][-1]["content"] for r in server.requests)
    assert "I back the pilot." in summary_request
    assert "Alice backs the pilot." in phase_request and "I back the pilot." not in phase_request
    assert "[r1.alice]" in phase_request and "Costs worry me." in phase_request


def test_default_providers() -> None:
    providers = default_providers()
    assert {"openai", "ollama", "anthropic"} <= set(providers)
    sentinel = OpenAIProvider()
    assert default_providers(offline=sentinel)["offline"] is sentinel
