"""Egress with real sockets: a model server on 127.0.0.1 that records every TCP
connection it accepts. A refused URL never produces a connection (each one is first
shown to reach the listener when nothing checks it); an allowed one does; a name is
resolved once and the request goes to the address that was checked; redirects are
never followed; plan-defined models read neither Conclave's variables nor headers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.gateway.egress import EgressPolicy
from orchestrator.gateway.failures import AuthError, EgressRefused, LLMError, ModelNotAllowed, ProviderUnavailable
from orchestrator.gateway.model_gateway import Gateway, default_providers
from orchestrator.gateway.providers.openai import OpenAIProvider
from orchestrator.gateway.types import ChatRequest, ModelSpec
from tests.llm_server import DEFAULT_REPLY, LLMServer

REQUEST = ChatRequest(system="You are the CFO.", prompt="Should we ship?")
HEADER_VALUE = "gw-secret-77aa41c9e0"


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as running:
        yield running


def plan_model(base_url: str, allowed: list[str], **extra: Any) -> ModelSpec:
    """A plan-defined model as the registry builds it in a cluster: untrusted, with the
    operator's egress policy."""
    values: dict[str, Any] = {"name": "planned", "provider": "openai", "model": "normal", "base_url": base_url,
                              "first_chunk_timeout": 2.0, "idle_timeout": 2.0, "deadline": 10.0, "max_retries": 0,
                              "trusted": False, "egress": EgressPolicy.from_patterns(allowed)}
    values.update(extra)
    return ModelSpec(**values)


def both_paths(spec: ModelSpec) -> list[BaseException]:
    """Call through the gateway (stream, then the guard's fallback) and the non-streaming
    path directly; return what each raised."""
    raised: list[BaseException] = []
    for call in (lambda: Gateway(default_providers()).call(spec, REQUEST),
                 lambda: OpenAIProvider().complete(spec, REQUEST)):
        try:
            call()
        except LLMError as exc:
            raised.append(exc)
    return raised


def reaches(server: LLMServer, url: str) -> bool:
    """Whether a plain client (no egress policy) reaches the listener through ``url``."""
    before = len(server.connections)
    try:
        httpx.post(url + "/v1/chat/completions", json={"model": "normal"}, timeout=5)
    except httpx.HTTPError:
        pass
    return len(server.connections) > before


def tricky(port: int) -> list[tuple[str, list[str]]]:
    """(base_url, allowlist): each URL reaches 127.0.0.1:port when nothing checks it."""
    return [
        (f"http://127.0.0.1:{port}", []),                                      # not listed
        (f"http://127.0.0.1:{port}", [f"http://127.0.0.2:{port}"]),             # another address listed
        (f"http://2130706433:{port}", []),                                     # decimal IPv4
        (f"http://0x7f000001:{port}", []),                                     # hex IPv4
        (f"http://127.1:{port}", []),                                          # short IPv4
        (f"http://[::ffff:127.0.0.1]:{port}", []),                             # IPv4-mapped IPv6
        (f"http://allowed.test@127.0.0.1:{port}", ["http://allowed.test"]),    # userinfo
        (f"http://localhost:{port}", [f"http://localhost:{port}"]),           # a listed NAME resolving to loopback
        (f"http://LocalHost:{port}", [f"http://localhost:{port}"]),           # … in mixed case
    ]


def test_refused_urls_never_produce_a_connection(server: LLMServer) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    for base_url, allowed in tricky(port):
        assert reaches(server, base_url), f"{base_url} does not reach the listener: the case proves nothing"
        before = len(server.connections)
        raised = both_paths(plan_model(base_url, allowed))
        assert [type(e) for e in raised] == [EgressRefused, EgressRefused], (base_url, raised)
        assert len(server.connections) == before, f"{base_url} connected: {server.connections[before:]}"
        assert all(e.code == "llm.egress_refused" for e in raised)  # type: ignore[attr-defined]


def test_an_allowed_url_connects_to_the_checked_address(server: LLMServer) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    spec = plan_model(f"http://127.0.0.1:{port}/v1", [f"http://127.0.0.1:{port}/v1"])
    completion = Gateway(default_providers()).call(spec, REQUEST)
    assert completion.text == DEFAULT_REPLY
    assert len(server.connections) >= 1 and all(peer[0] == "127.0.0.1" for peer in server.connections)
    assert server.requests[-1].headers["host"] == f"127.0.0.1:{port}"


def test_a_name_is_resolved_once_and_the_checked_address_is_the_one_dialled(
        server: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: the first answer is public (it passes), every later answer would be
    the listener on loopback. The call must dial the first answer and never ask again."""
    port = int(server.url.rsplit(":", 1)[1])
    real_getaddrinfo = socket.getaddrinfo
    lookups: list[str] = []
    dialled: list[tuple[str, int]] = []

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "model.rebind.test":
            lookups.append(host)
            answer = "93.184.216.34" if len(lookups) == 1 else "127.0.0.1"
            return real_getaddrinfo(answer, *args, **kwargs)
        return real_getaddrinfo(host, *args, **kwargs)

    def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        dialled.append(address)
        if address[0] == "93.184.216.34":  # no internet in tests: the pinned dial stops here
            raise ConnectionRefusedError("test: not dialling out")
        return socket_create_connection(address, *args, **kwargs)

    socket_create_connection = socket.create_connection
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    spec = plan_model(f"http://model.rebind.test:{port}/v1", [f"http://model.rebind.test:{port}"])
    with pytest.raises(ProviderUnavailable):
        OpenAIProvider().complete(spec, REQUEST)
    assert lookups == ["model.rebind.test"]
    assert dialled == [("93.184.216.34", port)]
    assert server.connections == []


def test_redirects_are_never_followed(server: LLMServer) -> None:
    for spec in (server.spec("redirect"), plan_model(f"{server.url}/v1", [], trusted=True)):
        spec = ModelSpec(**{**spec.__dict__, "model": "redirect", "name": "redirect"})
        with pytest.raises(EgressRefused, match="redirect"):
            Gateway(default_providers()).call(spec, REQUEST)
        with pytest.raises(EgressRefused, match="never follow redirects"):
            OpenAIProvider().complete(spec, REQUEST)
    assert server.count("redirect") == 4  # one request per call: the Location was never visited


def test_a_plan_defined_model_never_reads_conclave_variables(
        server: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCLAVE_DATABASE_URL", "postgresql://conclave:hunter2@db/conclave")
    port = int(server.url.rsplit(":", 1)[1])
    allowed = [f"http://127.0.0.1:{port}"]
    spec = plan_model(server.url, allowed, api_key_env="CONCLAVE_DATABASE_URL")
    raised = both_paths(spec)
    assert [type(e) for e in raised] == [ModelNotAllowed, ModelNotAllowed]
    assert server.connections == [] and "hunter2" not in str(raised)


def test_configured_headers_are_read_at_call_time_and_redacted(
        server: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGRESS_TEST_GATEWAY_KEY", HEADER_VALUE)
    registered = server.spec("normal", headers={"api-key": "EGRESS_TEST_GATEWAY_KEY"})
    assert Gateway(default_providers()).call(registered, REQUEST).text == DEFAULT_REPLY
    assert server.requests[-1].headers["api-key"] == HEADER_VALUE
    echoed = server.spec("auth", headers={"api-key": "EGRESS_TEST_GATEWAY_KEY"}, max_retries=0)
    with pytest.raises(AuthError) as info:
        OpenAIProvider().complete(echoed, REQUEST)
    assert HEADER_VALUE not in str(info.value) and info.value.message == "openai HTTP 401 (invalid_api_key)"
    assert HEADER_VALUE not in (info.value.detail or "") and "***" in (info.value.detail or "")  # the log's copy
    # a plan-defined model may not send configured headers, even to an allowed URL
    before = len(server.connections)
    port = int(server.url.rsplit(":", 1)[1])
    planned = plan_model(server.url, [f"http://127.0.0.1:{port}"], headers={"api-key": "EGRESS_TEST_GATEWAY_KEY"})
    assert [type(e) for e in both_paths(planned)] == [ModelNotAllowed, ModelNotAllowed]
    assert len(server.connections) == before
