"""The API's live feed on a real Redis: one SUBSCRIBE per watched plan however many
streams watch it, each message to every stream of its plan and to no other, the channel
given up with its last stream, and messages flowing again after Redis restarts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis

from orchestrator.api.feed import RedisFeed
from orchestrator.core.bus import RedisBus
from tests.conftest import RedisServer


def subscribers(url: str, plan_id: str) -> int:
    return int(redis.Redis.from_url(url).pubsub_numsub(RedisBus.channel(plan_id))[0][1])


async def until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_streams_of_a_plan_share_one_subscription_and_get_only_their_plans_messages(redis_url: str) -> None:
    async def main() -> None:
        feed = RedisFeed(redis_url)
        bus = RedisBus(redis_url)
        a1, a2, b = await feed.subscribe("a"), await feed.subscribe("a"), await feed.subscribe("b")
        await until(lambda: subscribers(redis_url, "a") == 1 and subscribers(redis_url, "b") == 1)
        for seq in range(3):
            bus.publish("a", {"type": "chunk", "seq": seq})
        bus.publish("b", {"type": "chunk", "seq": "b"})
        got: dict[str, list[Any]] = {"a1": [], "a2": [], "b": []}
        for name, sub, want in (("a1", a1, 3), ("a2", a2, 3), ("b", b, 1)):
            while len(got[name]) < want:
                got[name] += [m["seq"] for m in await sub.get(5.0)]
        assert got == {"a1": [0, 1, 2], "a2": [0, 1, 2], "b": ["b"]}
        assert await b.get(0.2) == []  # nothing of plan a reached b
        await a1.close()
        assert subscribers(redis_url, "a") == 1  # a2 still watches
        await a2.close()
        await until(lambda: subscribers(redis_url, "a") == 0)
        await b.close()
        await feed.close()
        bus.close()

    asyncio.run(main())


def test_messages_flow_again_after_redis_restarts(redis_server: RedisServer) -> None:
    url = redis_server.url(0)

    async def main() -> None:
        feed = RedisFeed(url)
        sub = await feed.subscribe("p")
        await until(lambda: subscribers(url, "p") == 1)
        redis_server.restart()
        await until(lambda: subscribers(url, "p") == 1, timeout=30)  # redis-py subscribed again
        bus = RedisBus(url)
        bus.publish("p", {"type": "chunk", "seq": "after"})
        got: list[Any] = []
        while not got:
            got = await sub.get(5.0)
        assert got[-1]["seq"] == "after"
        await sub.close()
        await feed.close()
        bus.close()

    asyncio.run(main())
