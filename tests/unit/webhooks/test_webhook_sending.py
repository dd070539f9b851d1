"""One POST's deadline is the whole request's, not each read's: a receiver that answers a
byte at a time, each within the read timeout, is still cut off at ``timeout``; and a URL the
operator's allowlist no longer admits is refused before any connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from orchestrator.gateway.egress import EgressPolicy
from orchestrator.webhooks.sending import send


@pytest.fixture()
def dripping() -> Iterator[tuple[int, list[float]]]:
    """A server that reads a request and answers one byte every 0.2 s, for 3 s, then hangs up."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted: list[float] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(time.monotonic())
            conn.recv(65536)
            try:
                for byte in (b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000)[:15]:
                    if stop.is_set():
                        break
                    conn.sendall(bytes([byte]))
                    time.sleep(0.2)
            except OSError:
                pass
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(5)
    server.close()


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_deadline(dripping: tuple[int, list[float]]) -> None:
    port, accepted = dripping
    policy = EgressPolicy.from_patterns([f"http://127.0.0.1:{port}"], setting="CONCLAVE_WEBHOOK_URLS")
    started = time.monotonic()
    sent = send(policy, f"http://127.0.0.1:{port}/hook", b"{}", {}, timeout=1.0)
    took = time.monotonic() - started
    assert len(accepted) == 1 and 1.0 <= took < 1.8, took  # each byte came within the read timeout, yet it ended
    assert not sent.delivered and sent.status_code is None and sent.error is not None
    assert sent.error.startswith("no answer within 1 s"), sent.error


def test_a_url_the_allowlist_no_longer_admits_is_refused_before_connecting(dripping: tuple[int, list[float]]) -> None:
    port, accepted = dripping
    policy = EgressPolicy.from_patterns(["https://hooks.example.com"], setting="CONCLAVE_WEBHOOK_URLS")
    sent = send(policy, f"http://127.0.0.1:{port}/hook", b"{}", {}, timeout=1.0)  # loopback, not listed
    assert not sent.delivered and sent.error == f"refused: http://127.0.0.1:{port}/hook is a loopback address"
    elsewhere = send(policy, "https://other.example.com/hook", b"{}", {}, timeout=1.0)
    assert elsewhere.error == ("refused: https://other.example.com/hook matches no entry of the operator's allowlist "
                               "(CONCLAVE_WEBHOOK_URLS)")
    assert accepted == []
