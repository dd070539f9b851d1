"""The Redis bus on a real Redis: messages arrive in publish order, a burst costs one
pipeline, and publishing never waits on Redis — not when it is slow, not when it is
gone — while the messages queued meanwhile are bounded and dropped oldest first."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from orchestrator.bus import RedisBus, drain
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
