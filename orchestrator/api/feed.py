"""The API's live feed: what the bus publishes, handed to open event streams as it arrives.

A stream waits on its feed subscription instead of polling the bus: with Redis, one
asyncio pub/sub connection per API process subscribes to the channel of every plan
someone watches (one SUBSCRIBE per plan, however many watch it) and a reader task routes
each message to the queues of that plan's streams — a chunk reaches the client as soon as
Redis delivers it, and an idle stream costs no thread and no wake-ups. Without Redis (the
embedded mode's in-process bus) the feed polls the bus's subscription every ``tick``.

Like the bus, the feed may lose messages (a full queue drops the oldest, a lost Redis
connection drops what was in flight until redis-py reconnects and subscribes again); a
stream's stored events come from the database either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Protocol

import anyio
from starlette.concurrency import run_in_threadpool

from orchestrator.core.bus import Bus, RedisBus, Subscription

log = logging.getLogger("orchestrator.api")

MAX_QUEUED = 1000  # per stream: a client that reads slower than its plan speaks loses the oldest chunks


class FeedSubscription(Protocol):
    async def get(self, timeout: float) -> list[dict[str, Any]]:
        """Wait up to ``timeout`` seconds for a message; return every one waiting (maybe none)."""
        ...

    async def close(self) -> None: ...


class Feed(Protocol):
    async def subscribe(self, plan_id: str) -> FeedSubscription: ...

    async def close(self) -> None: ...


def open_feed(bus: Bus, redis_url: str | None) -> Feed:
    return RedisFeed(redis_url) if redis_url and isinstance(bus, RedisBus) else PolledFeed(bus)


class RedisFeed:
    """One asyncio pub/sub connection for the whole process, shared by every stream."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._queues: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        self._redis: Any = None
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # SUBSCRIBE / UNSUBSCRIBE, one at a time

    async def subscribe(self, plan_id: str) -> FeedSubscription:
        channel = RedisBus.channel(plan_id)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(MAX_QUEUED)
        async with self._lock:
            self._start()
            first = channel not in self._queues
            self._queues.setdefault(channel, set()).add(queue)
            if first:
                try:
                    await self._pubsub.subscribe(channel)
                except Exception as exc:  # redis-py subscribes again when it reconnects
                    log.warning("live feed: subscribe failed: %s", exc, extra={"action": "bus.subscribe_failed"})
        return _RedisFeedSubscription(self, channel, queue)

    def _start(self) -> None:
        if self._reader is None:
            import redis.asyncio

            self._redis = redis.asyncio.Redis.from_url(self._url, socket_connect_timeout=2,
                                                       health_check_interval=30)
            self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            self._reader = asyncio.get_running_loop().create_task(self._read(), name="conclave-live-feed")

    async def _leave(self, channel: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        async with self._lock:
            waiting = self._queues.get(channel)
            if waiting is None:
                return
            waiting.discard(queue)
            if not waiting:
                del self._queues[channel]
                try:
                    await self._pubsub.unsubscribe(channel)
                except Exception as exc:
                    log.debug("live feed: unsubscribe failed: %s", exc, extra={"action": "bus.subscribe_failed"})

    async def _read(self) -> None:
        delay = 0.1
        while True:
            try:
                if not self._pubsub.subscribed:
                    await asyncio.sleep(0.05)
                    continue
                msg = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                delay = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: redis-py reconnects and resubscribes on the next read
                log.warning("live feed: %s", exc, extra={"action": "bus.subscribe_failed"})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if not msg or msg.get("type") != "message":
                continue
            channel = msg["channel"].decode() if isinstance(msg["channel"], bytes) else str(msg["channel"])
            queues = self._queues.get(channel)
            if not queues:
                continue
            try:
                data = json.loads(msg["data"])
            except (ValueError, TypeError):
                continue
            for queue in list(queues):
                if queue.full():
                    queue.get_nowait()  # the oldest goes: the stream re-reads stored events anyway
                queue.put_nowait(data)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            with contextlib.suppress(Exception):
                await self._redis.aclose()
            self._reader = None


class _RedisFeedSubscription:
    def __init__(self, feed: RedisFeed, channel: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self._feed, self._channel, self._queue = feed, channel, queue

    async def get(self, timeout: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._queue.empty():
            with contextlib.suppress(TimeoutError):
                out.append(await asyncio.wait_for(self._queue.get(), max(timeout, 0.0)))
        while not self._queue.empty() and len(out) < MAX_QUEUED:
            out.append(self._queue.get_nowait())
        return out

    async def close(self) -> None:
        await self._feed._leave(self._channel, self._queue)


class PolledFeed:
    """A bus without an async client (the in-process one): drain its subscription in the
    thread pool, one short non-blocking step at a time, every ``tick``."""

    def __init__(self, bus: Bus, tick: float = 0.05) -> None:
        self._bus = bus
        self._tick = tick

    async def subscribe(self, plan_id: str) -> FeedSubscription:
        return _PolledSubscription(await run_in_threadpool(self._bus.subscribe, plan_id), self._tick)

    async def close(self) -> None:
        pass


class _PolledSubscription:
    def __init__(self, sub: Subscription, tick: float) -> None:
        self._sub, self._tick = sub, tick

    async def get(self, timeout: float) -> list[dict[str, Any]]:
        deadline = anyio.current_time() + max(timeout, 0.0)
        while True:
            out = await run_in_threadpool(self._drain)
            if out or anyio.current_time() >= deadline:
                return out
            await anyio.sleep(min(self._tick, max(deadline - anyio.current_time(), 0.0)))

    def _drain(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < MAX_QUEUED:
            msg = self._sub.get(0)
            if msg is None:
                break
            out.append(msg)
        return out

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await run_in_threadpool(self._sub.close)
