"""The three wire formats against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import pickle
import re
import threading
import time
from collections.abc import Iterator

import pytest

from orchestrator.gateway.failures import (
    AuthError,
    BadRequest,
    ContextOverflow,
    LLMError,
    ModelNotFound,
    ProviderMisconfigured,
    ProviderUnavailable,
    RateLimited,
    StreamStalled,
)
from orchestrator.gateway.providers.anthropic import AnthropicProvider
from orchestrator.gateway.providers.http import endpoint
from orchestrator.gateway.providers.ollama import OllamaProvider
from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.types import ChatRequest, ContextBlock, ModelSpec, Provider, TextDelta, Usage, UsageReport
from tests.llm_server import DEFAULT_REPLY, UTF8_REPLY, LLMServer

KEY_ENV = "CONCLAVE_TEST_LLM_KEY"
KEY = "sk-test-DO-NOT-LEAK-4f9a"
PROVIDERS: dict[str, Provider] = {
    "openai": OpenAIProvider(),
    "ollama": OllamaProvider(),
    "anthropic": AnthropicProvider(),
}
REQUEST = ChatRequest(
    system="You are the CFO.",
    prompt="Should we ship?",
    context=(ContextBlock(source="r1.ceo", title="CEO opening", text="We must decide."),),
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with LLMServer() as running:
        yield running


def spec_for(server: LLMServer, scenario: str, wire: str, **overrides: object) -> ModelSpec:
    return server.spec(scenario, wire, api_key_env=KEY_ENV, **overrides)


def drain(provider: Provider, spec: ModelSpec) -> tuple[str, list[Usage]]:
    text, usages = [], []
    stream = provider.stream(spec, REQUEST)
    try:
        for event in stream:
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, UsageReport):
                usages.append(event.usage)
    finally:
        stream.close()
    return "".join(text), usages


@pytest.mark.parametrize("wire", PROVIDERS)
def test_stream_yields_text_and_provider_usage(server: LLMServer, wire: str) -> None:
    text, usages = drain(PROVIDERS[wire], spec_for(server, "normal", wire))
    assert text == DEFAULT_REPLY
    assert usages == [Usage(17, 42, "provider")]
    (sent,) = server.requests
    assert sent.stream is True


@pytest.mark.parametrize("wire", PROVIDERS)
def test_complete_is_non_streaming(server: LLMServer, wire: str) -> None:
    completion = PROVIDERS[wire].complete(spec_for(server, "normal", wire), REQUEST)
    assert completion.text == DEFAULT_REPLY
    assert completion.usage == Usage(17, 42, "provider")
    assert server.count("normal", stream=False) == 1


def test_openai_request_shape(server: LLMServer) -> None:
    drain(PROVIDERS["openai"], spec_for(server, "normal", "openai", temperature=0.2, options={"seed": 7}))
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["max_tokens"] == 1024 and sent.body["temperature"] == 0.2 and sent.body["seed"] == 7
    assert [m["role"] for m in sent.body["messages"]] == ["system", "user"]
    assert "[r1.ceo]" in sent.body["messages"][1]["content"]


def test_openai_base_url_with_v1_path(server: LLMServer) -> None:
    drain(PROVIDERS["openai"], spec_for(server, "normal", "openai", base_url=server.url + "/v1/"))
    assert server.requests[0].path == "/v1/chat/completions"


def test_endpoint_rules() -> None:
    assert endpoint("https://api.deepseek.com", "/v1", "/chat/completions") == (
        "https://api.deepseek.com/v1/chat/completions"
    )
    assert endpoint("http://gpu:8000/v1", "/v1", "/chat/completions") == "http://gpu:8000/v1/chat/completions"
    assert endpoint("https://x/compatible-mode/v1/", "/v1", "/chat/completions") == (
        "https://x/compatible-mode/v1/chat/completions"
    )
    assert (
        endpoint("https://x/v1/chat/completions", "/v1", "/chat/completions")
        == "https://x/v1/chat/completions"
    )


def test_anthropic_request_shape(server: LLMServer) -> None:
    drain(PROVIDERS["anthropic"], spec_for(server, "normal", "anthropic"))
    (sent,) = server.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert sent.body["system"] == "You are the CFO."
    assert [m["role"] for m in sent.body["messages"]] == ["user"]


def test_ollama_request_shape(server: LLMServer) -> None:
    drain(
        PROVIDERS["ollama"], spec_for(server, "normal", "ollama", context_window=8192, options={"top_k": 5})
    )
    (sent,) = server.requests
    assert sent.path == "/api/chat"
    assert sent.body["options"] == {"num_predict": 1024, "num_ctx": 8192, "top_k": 5}
    assert sent.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("wire", PROVIDERS)
@pytest.mark.parametrize("scenario", ["crlf", "cr", "comments", "multiline-data", "usage-last"])
def test_framing_variants(server: LLMServer, wire: str, scenario: str) -> None:
    text, usages = drain(PROVIDERS[wire], spec_for(server, scenario, wire))
    assert text == DEFAULT_REPLY
    assert usages == [Usage(17, 42, "provider")]


@pytest.mark.parametrize("wire", PROVIDERS)
def test_utf8_split_across_reads(server: LLMServer, wire: str) -> None:
    text, _ = drain(PROVIDERS[wire], spec_for(server, "utf8-split", wire))
    assert text == UTF8_REPLY


@pytest.mark.parametrize("wire", PROVIDERS)
def test_missing_done_marker_still_ends(server: LLMServer, wire: str) -> None:
    text, usages = drain(PROVIDERS[wire], spec_for(server, "no-done", wire))
    assert text == DEFAULT_REPLY
    if wire == "ollama":
        assert usages == []  # usage lives on the done object, which never came: none is invented
    else:
        assert usages == [Usage(17, 42, "provider")]


@pytest.mark.parametrize("wire", PROVIDERS)
def test_no_usage_is_not_invented(server: LLMServer, wire: str) -> None:
    text, usages = drain(PROVIDERS[wire], spec_for(server, "no-usage", wire))
    assert text == DEFAULT_REPLY and usages == []
    completion = PROVIDERS[wire].complete(spec_for(server, "no-usage", wire), REQUEST)
    assert completion.usage.source == "estimated" and completion.usage.method == "chars/4"


ERRORS = [
    ("auth", AuthError),
    ("no-model", ModelNotFound),
    ("overflow", ContextOverflow),
    ("bad-request", BadRequest),
    ("server-error", ProviderUnavailable),
    ("rate-limit-then-ok", RateLimited),
]


@pytest.mark.parametrize("wire", PROVIDERS)
@pytest.mark.parametrize(("scenario", "error"), ERRORS)
def test_http_errors_are_mapped_without_leaking_the_key(
    server: LLMServer, wire: str, scenario: str, error: type[LLMError]
) -> None:
    spec = spec_for(server, scenario, wire)
    with pytest.raises(error) as raised:
        drain(PROVIDERS[wire], spec)
    raised_all: list[LLMError] = [raised.value]
    if not scenario.endswith("-then-ok"):  # those fail once only
        with pytest.raises(error) as raised_complete:
            PROVIDERS[wire].complete(spec, REQUEST)
        raised_all.append(raised_complete.value)
    for exc in raised_all:
        assert KEY not in str(exc) and KEY not in repr(exc.args) and KEY not in (exc.detail or "")
        # the public message is built from safe parts: never what the server said
        assert re.fullmatch(rf"{wire} HTTP \d{{3}}( \([a-z_]+\))?", exc.message), exc.message
        assert exc.detail and "***" not in exc.message
        assert pickle.loads(pickle.dumps(exc)).detail is None  # the body never crosses a process
    if scenario == "auth":
        assert "Incorrect API key provided: ***" in (raised.value.detail or "")  # echoed key, redacted for the log
    if scenario == "rate-limit-then-ok":
        assert raised.value.retry_after == 2.0


@pytest.mark.parametrize("wire", PROVIDERS)
def test_retry_after_as_http_date(server: LLMServer, wire: str) -> None:
    with pytest.raises(RateLimited) as raised:
        drain(PROVIDERS[wire], spec_for(server, "rate-limit-date-then-ok", wire))
    assert raised.value.retry_after is not None and 1.0 <= raised.value.retry_after <= 3.5


@pytest.mark.parametrize("wire", PROVIDERS)
def test_missing_key_names_the_variable(
    server: LLMServer, wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ProviderMisconfigured, match=KEY_ENV):
        drain(PROVIDERS[wire], spec_for(server, "normal", wire))
    assert server.requests == []


def test_anthropic_and_hosted_openai_require_a_key_env() -> None:
    with pytest.raises(ProviderMisconfigured):
        PROVIDERS["anthropic"].complete(
            ModelSpec(name="a", provider="anthropic", base_url="http://127.0.0.1:9"), REQUEST
        )
    with pytest.raises(ProviderMisconfigured):
        PROVIDERS["openai"].complete(ModelSpec(name="o", provider="openai"), REQUEST)


@pytest.mark.parametrize("wire", PROVIDERS)
def test_connection_refused_is_unavailable(wire: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with LLMServer() as gone:
        spec = spec_for(gone, "normal", wire)
    with pytest.raises(ProviderUnavailable):
        drain(PROVIDERS[wire], spec)


@pytest.mark.parametrize("wire", PROVIDERS)
def test_abort_from_another_thread_unblocks_a_hung_read(wire: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with LLMServer(hang_seconds=120) as hanging:  # it would hold the read past every bound below
        outcome = _abort_a_hung_read(hanging, wire)
    assert isinstance(outcome, StreamStalled) and "aborted" in outcome.message  # not a read timeout


def _abort_a_hung_read(server: LLMServer, wire: str) -> BaseException:
    # read timeout (first_chunk/idle + 1 s) 61 s: only abort() can end the read within the join below
    spec = spec_for(server, "hang-first", wire, first_chunk_timeout=60, idle_timeout=60)
    stream = PROVIDERS[wire].stream(spec, REQUEST)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            for _ in stream:
                pass
        except BaseException as exc:
            outcome.append(exc)
        finally:
            stream.close()

    reader = threading.Thread(target=read)
    reader.start()
    while not server.requests:
        time.sleep(0.01)
    time.sleep(0.1)  # the reader is now (most likely) blocked inside iter_bytes; abort works either way
    stream.abort()
    reader.join(30)
    assert not reader.is_alive(), "abort() did not unblock the read"
    assert len(outcome) == 1
    return outcome[0]
