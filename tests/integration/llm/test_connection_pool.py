"""One pooled client per process and destination, against a real HTTP model server:
calls one after another reuse one keep-alive connection, a stream aborted by its guard
closes its own connection and no other call notices, and a forked child opens its own."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.types import ChatRequest, TextDelta
from tests.integration.llm.test_providers import KEY, KEY_ENV, REQUEST, drain
from tests.llm_server import DEFAULT_REPLY, LLMServer

SHORT = ChatRequest(system="s", prompt="p")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with LLMServer(drip_delay=0.05) as running:
        yield running


def test_calls_in_turn_share_one_connection(server: LLMServer) -> None:
    provider = OpenAIProvider()
    spec = server.spec("normal", "openai", api_key_env=KEY_ENV)
    before = len(server.connections)
    for _ in range(5):
        assert drain(provider, spec)[0] == DEFAULT_REPLY
    provider.complete(spec, REQUEST)
    # six calls (five streamed, one not), one new connection at most: the pool kept it alive
    assert len(server.connections) - before <= 1


def test_aborting_one_stream_leaves_the_others_alone(server: LLMServer) -> None:
    provider = OpenAIProvider()
    drip = server.spec("drip", "openai", api_key_env=KEY_ENV)
    results: dict[str, str] = {}

    def call(name: str) -> None:
        results[name] = drain(provider, drip)[0]

    others = [threading.Thread(target=call, args=(f"t{i}",)) for i in range(3)]
    for t in others:
        t.start()
    victim = provider.stream(drip, SHORT)
    first = next(e for e in victim if isinstance(e, TextDelta))
    assert first.text
    victim.abort()  # what the stream guard does on a cancel, a lost lease or a timeout
    with pytest.raises(Exception) as stopped:
        for _ in victim:
            pass
    assert stopped.type.__name__ == "StreamStalled"
    for t in others:
        t.join(30)
    assert results == {f"t{i}": DEFAULT_REPLY for i in range(3)}
    # and the pool still works afterwards
    assert drain(provider, server.spec("normal", "openai", api_key_env=KEY_ENV))[0] == DEFAULT_REPLY


def test_a_forked_child_does_not_use_its_parents_connections(server: LLMServer) -> None:
    provider = OpenAIProvider()
    spec = server.spec("normal", "openai", api_key_env=KEY_ENV)
    assert drain(provider, spec)[0] == DEFAULT_REPLY
    before = len(server.connections)
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if drain(provider, spec)[0] == DEFAULT_REPLY else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(server.connections) == before + 1  # the child connected on its own
    assert drain(provider, spec)[0] == DEFAULT_REPLY  # the parent's connection is intact


def test_a_late_abort_of_a_stream_that_ended_leaves_its_pooled_connection_alone(server: LLMServer) -> None:
    """The watchdog trips after deciding, outside its lock: its abort may reach a stream
    that has just ended on its caller's thread, whose connection is back in the pool."""
    provider = OpenAIProvider()
    spec = server.spec("normal", "openai", api_key_env=KEY_ENV)
    assert drain(provider, spec)[0] == DEFAULT_REPLY
    before = len(server.connections)
    stream = provider.stream(spec, SHORT)
    assert "".join(e.text for e in stream if isinstance(e, TextDelta)) == DEFAULT_REPLY  # read to its end
    stream.abort()  # late
    for _ in range(3):
        assert drain(provider, spec)[0] == DEFAULT_REPLY
    assert len(server.connections) == before  # the pooled connection is the one every call used
