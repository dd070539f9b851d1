"""A model's key and its configured header values, against a real HTTP server on
127.0.0.1: each is read from its variable when the call is made — a rotated value is
what the next call sends, a removed one fails the next call naming the variable — and
when the server echoes one back, the error's message never holds it and the body kept
for the worker's log is redacted of it, even when it looks like no token at all (so
only the redaction of the configured values, not the token patterns, removes it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.gateway.failures import AuthError, LLMError, ProviderMisconfigured
from orchestrator.gateway.providers.anthropic import AnthropicProvider
from orchestrator.gateway.providers.error_text import scrub
from orchestrator.gateway.providers.ollama import OllamaProvider
from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.types import ChatRequest, ModelSpec, Provider
from tests.llm_server import DEFAULT_REPLY, LLMServer

KEY_ENV = "SECRETS_TEST_LLM_KEY"
HEADER_ENV = "SECRETS_TEST_GATEWAY_KEY"
#: Secrets with nothing token-like about them: no digits, no prefix, short, no "key=" before them.
PLAIN_KEY = "opensesame-tulip"
PLAIN_HEADER = "hunter-two-hunter"
PROVIDERS: dict[str, Provider] = {"openai": OpenAIProvider(), "ollama": OllamaProvider(),
                                  "anthropic": AnthropicProvider()}
REQUEST = ChatRequest(system="You are the CFO.", prompt="Should we ship?")


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as running:
        yield running


def test_the_cases_prove_something() -> None:
    """The token patterns alone leave these secrets in an echoed body."""
    for secret in (PLAIN_KEY, PLAIN_HEADER):
        assert secret in scrub(f"Incorrect API key provided: {secret}.")


def drain(provider: Provider, spec: ModelSpec) -> str:
    return "".join(getattr(event, "text", "") for event in provider.stream(spec, REQUEST))


def failures(provider: Provider, spec: ModelSpec) -> list[LLMError]:
    """What the streaming and the non-streaming call raised."""
    raised: list[LLMError] = []
    for call in (lambda: drain(provider, spec), lambda: provider.complete(spec, REQUEST)):
        with pytest.raises(LLMError) as info:
            call()
        raised.append(info.value)
    return raised


@pytest.mark.parametrize("streaming", [False, True])
def test_a_rotated_key_and_header_value_are_what_the_next_call_sends(
        server: LLMServer, monkeypatch: pytest.MonkeyPatch, streaming: bool) -> None:
    provider = OpenAIProvider()
    spec = server.spec("normal", api_key_env=KEY_ENV, headers={"api-key": HEADER_ENV})
    for key, header in (("key-of-monday", "header-of-monday"), ("key-of-tuesday", "header-of-tuesday")):
        monkeypatch.setenv(KEY_ENV, key)
        monkeypatch.setenv(HEADER_ENV, header)
        text = drain(provider, spec) if streaming else provider.complete(spec, REQUEST).text
        assert text == DEFAULT_REPLY
        sent = server.requests[-1].headers
        assert (sent["authorization"], sent["api-key"]) == (f"Bearer {key}", header)
    sent_before = len(server.requests)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ProviderMisconfigured, match=KEY_ENV) as info:
        provider.complete(spec, REQUEST)
    assert "tuesday" not in str(info.value) and len(server.requests) == sent_before


@pytest.mark.parametrize("wire", PROVIDERS)
def test_an_echoed_key_is_redacted_even_when_it_looks_like_no_token(
        server: LLMServer, monkeypatch: pytest.MonkeyPatch, wire: str) -> None:
    monkeypatch.setenv(KEY_ENV, PLAIN_KEY)
    spec = server.spec("auth", wire, api_key_env=KEY_ENV, max_retries=0)
    for exc in failures(PROVIDERS[wire], spec):
        assert isinstance(exc, AuthError), exc
        assert PLAIN_KEY not in str(exc) and PLAIN_KEY not in repr(exc.args)
        assert "Incorrect API key provided: ***" in (exc.detail or ""), exc.detail  # the log's copy


@pytest.mark.parametrize("wire", ["openai", "ollama"])
def test_an_echoed_header_value_is_redacted_even_when_it_looks_like_no_token(
        server: LLMServer, monkeypatch: pytest.MonkeyPatch, wire: str) -> None:
    monkeypatch.setenv(HEADER_ENV, PLAIN_HEADER)
    spec = server.spec("auth", wire, headers={"api-key": HEADER_ENV}, max_retries=0)
    for exc in failures(PROVIDERS[wire], spec):
        assert isinstance(exc, AuthError), exc
        assert server.requests[-1].headers["api-key"] == PLAIN_HEADER  # it was sent, and echoed
        assert PLAIN_HEADER not in str(exc) and PLAIN_HEADER not in repr(exc.args)
        assert "Incorrect API key provided: ***" in (exc.detail or ""), exc.detail
