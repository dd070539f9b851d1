"""The Redis bus on a real Redis: messages arrive in publish order, a burst costs one
write, and publishing never waits on Redis — not when it is slow, not when it is
gone — while the messages queued meanwhile are bounded and dropped oldest first."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

from orchestrator.core.bus import RedisBus, drain
from tests.conftest import RedisServer


def collect(sub: Any, want: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(drain(sub, 0.2))
    return got


def test_a_burst_arrives_in_publish_order(redis_url: str) -> None:
    bus = RedisBus(redis_url)
    sub = bus.subscribe("p1")
    time.sleep(0.2)  # the subscription is registered before anything is published
    for seq in range(500):
        bus.publish("p1", {"type": "chunk", "seq": seq})
    assert bus.flush(5.0)
    assert [m["seq"] for m in collect(sub, 500)] == list(range(500))
    sub.close()
    bus.close()


def test_a_phases_text_arrives_whole_in_order_as_chunks_numbered_from_zero(redis_url: str) -> None:
    """Text that comes faster than the sender writes joins the chunk still waiting: fewer
    messages than pieces, every character in order, ``seq`` 0, 1, 2 … with no gap; another
    phase's chunks and a stored event between them keep their own order."""
    bus = RedisBus(redis_url)
    sub = bus.subscribe("p9")
    time.sleep(0.2)
    a, b = bus.chunks("p9", "r1.dana", "Dana"), bus.chunks("p9", "r1.ravi", None)
    pieces = [f"w{n} " for n in range(2000)]
    for n, piece in enumerate(pieces):
        a.add(piece)
        if n % 100 == 0:
            b.add(f"<{n}>")
            bus.publish("p9", {"type": "phase_started", "n": n})
            time.sleep(0.005)  # the sender takes what waits: later text starts a new chunk
    assert bus.flush(5.0)
    got = collect(sub, 2000, timeout=3.0)
    bus.close()
    sub.close()
    chunks = {key: [m for m in got if m.get("phase") == key] for key in ("r1.dana", "r1.ravi")}
    assert "".join(m["text"] for m in chunks["r1.dana"]) == "".join(pieces)
    assert "".join(m["text"] for m in chunks["r1.ravi"]) == "".join(f"<{n}>" for n in range(0, 2000, 100))
    for key, expert in (("r1.dana", "Dana"), ("r1.ravi", None)):
        assert [m["seq"] for m in chunks[key]] == list(range(len(chunks[key])))
        assert all(list(m) == ["type", "phase", "expert", "seq", "text"] and m["expert"] == expert
                   for m in chunks[key])
    assert 20 <= len(chunks["r1.dana"]) < len(pieces)  # joined while waiting, a new one after each write
    assert [m["n"] for m in got if m["type"] == "phase_started"] == list(range(0, 2000, 100))


def test_publishing_never_waits_on_a_redis_that_hangs() -> None:
    """A Redis that accepts connections and never answers: each PUBLISH sent by the
    caller would wait out the 5 s socket timeout. The caller only queues."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    bus = RedisBus(f"redis://127.0.0.1:{hung.getsockname()[1]}/0")
    done = threading.Event()

    def publish_many() -> None:
        for n in range(RedisBus.MAX_QUEUED + 500):
            bus.publish("p2", {"n": n})
        done.set()

    threading.Thread(target=publish_many, daemon=True).start()
    assert done.wait(60), "publish() waited on Redis"
    assert len(bus._queue) <= RedisBus.MAX_QUEUED  # bounded: the oldest were dropped
    hung.close()


def test_messages_flow_again_after_redis_restarts(redis_server: RedisServer) -> None:
    bus = RedisBus(redis_server.url(0))
    sub = bus.subscribe("p3")
    time.sleep(0.2)
    bus.publish("p3", {"n": 0})
    assert [m["n"] for m in collect(sub, 1)] == [0]
    redis_server.restart()
    bus.publish("p3", {"n": 1})  # sent to a Redis that went away: lost, logged, not raised
    bus.flush(5.0)
    sub2 = RedisBus(redis_server.url(0)).subscribe("p3")
    time.sleep(0.2)
    bus.publish("p3", {"n": 2})
    got = collect(sub2, 1)
    assert got and got[-1]["n"] == 2
    bus.close()


def test_a_forked_child_publishes_with_its_own_sender(redis_url: str) -> None:
    bus = RedisBus(redis_url)
    sub = bus.subscribe("p4")
    time.sleep(0.2)
    bus.publish("p4", {"from": "parent"})
    assert bus.flush(5.0)
    pid = os.fork()
    if pid == 0:  # the child: the parent's sender thread did not come along
        try:
            bus.publish("p4", {"from": "child"})
            os._exit(0 if bus.flush(5.0) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [m["from"] for m in collect(sub, 2)] == ["parent", "child"]
    bus.close()


def test_after_a_redis_restart_the_next_message_is_not_lost(redis_server: RedisServer) -> None:
    """The sender's connection has replies off, so nothing tells it that Redis went
    away; it must notice before it writes, not lose the first message after."""
    bus = RedisBus(redis_server.url(0))
    bus.publish("p5", {"n": 0})
    assert bus.flush(5.0)
    redis_server.restart()
    sub = RedisBus(redis_server.url(0)).subscribe("p5")
    time.sleep(0.2)
    bus.publish("p5", {"n": 1})
    assert bus.flush(5.0)
    assert [m["n"] for m in collect(sub, 1)] == [1]
    sub.close()
    bus.close()


class ProxyWithoutClientReply:
    """A RESP server that refuses every CLIENT command (as some proxies do), answers
    HELLO and PUBLISH, and records what it was published."""

    def __init__(self, refuse_publish: bool = False) -> None:
        self.published: list[tuple[str, str]] = []
        self.refused: list[str] = []
        self._refuse_publish = refuse_publish
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn.makefile("rb"), conn), daemon=True).start()

    def _client(self, reader: Any, conn: socket.socket) -> None:
        while (line := reader.readline()).startswith(b"*"):
            args = []
            for _ in range(int(line[1:])):
                size = int(reader.readline()[1:])
                args.append(reader.read(size + 2)[:-2].decode())
            if args[0].upper() == "HELLO":  # redis-py speaks RESP3: a map with the protocol
                conn.sendall(b"%1\r\n$5\r\nproto\r\n:3\r\n")
            elif args[0].upper() == "PUBLISH" and not self._refuse_publish:
                self.published.append((args[1], args[2]))
                conn.sendall(b":1\r\n")
            else:
                self.refused.append(" ".join(args[:2]).upper())
                conn.sendall(b"-ERR unknown command\r\n")

    def close(self) -> None:
        self._listener.close()


def test_a_server_without_client_reply_gets_every_message_and_its_replies_are_read() -> None:
    proxy = ProxyWithoutClientReply()
    bus = RedisBus(proxy.url)
    for seq in range(300):
        bus.publish("p6", {"seq": seq})
    assert bus.flush(10.0)
    assert [json.loads(data)["seq"] for _, data in proxy.published] == list(range(300))
    assert {channel for channel, _ in proxy.published} == {RedisBus.channel("p6")}
    assert "CLIENT REPLY" in proxy.refused  # it asked, was refused, and read the replies instead
    bus.close()
    proxy.close()


def test_an_error_reply_fails_the_batch_loudly(caplog: Any) -> None:
    proxy = ProxyWithoutClientReply(refuse_publish=True)
    bus = RedisBus(proxy.url)
    bus.publish("p7", {"n": 1})
    assert bus.flush(10.0)
    assert any("bus publish failed (1 messages lost)" in r.getMessage() for r in caplog.records)
    bus.close()
    proxy.close()


def test_while_redis_is_away_the_sender_backs_off(caplog: Any) -> None:
    """Nothing listens on the port: each try fails at once. The sender must not turn that
    into a connection attempt and a warning per message."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    bus = RedisBus(f"redis://127.0.0.1:{port}/0")
    for n in range(200):  # one second of chunks, 5 ms apart
        bus.publish("p8", {"n": n})
        time.sleep(0.005)
    failures = [r for r in caplog.records if "bus publish failed" in r.getMessage()]
    assert 1 <= len(failures) <= 8, len(failures)  # 50 ms, doubling: not one per message
    assert len(bus._queue) > 0  # what it could not send waits, bounded, for Redis to return
    bus.close(timeout=0.1)
