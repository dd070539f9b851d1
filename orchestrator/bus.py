"""Live fan-out of what experts are saying: an accelerator, never the truth.

Messages are stored events (published after the commit that stored them, in the
shape of :meth:`storage.records.EventRecord.message`) and text chunks (bus-only:
``{"type": "chunk", "phase", "expert", "seq", "text"}``). They may be lost (Redis keeps nothing on disk by default);
a watcher that needs certainty re-reads stored events and contents.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from storage.records import EventRecord

log = logging.getLogger(__name__)


class Subscription(Protocol):
    def get(self, timeout: float) -> dict[str, Any] | None: ...

    def close(self) -> None: ...


class Bus(Protocol):
    def publish(self, plan_id: str, message: dict[str, Any]) -> None: ...

    def subscribe(self, plan_id: str) -> Subscription: ...


class MemoryBus:
    """In-process bus for the embedded mode."""

    def __init__(self) -> None:
        self._subs: dict[str, list[queue.Queue[dict[str, Any]]]] = {}
        self._lock = threading.Lock()

    def publish(self, plan_id: str, message: dict[str, Any]) -> None:
        with self._lock:
            targets = list(self._subs.get(plan_id, ()))
        for q in targets:
            q.put(message)

    def subscribe(self, plan_id: str) -> Subscription:
        q: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._subs.setdefault(plan_id, []).append(q)
        return _MemorySubscription(self, plan_id, q)

    def _drop(self, plan_id: str, q: queue.Queue[dict[str, Any]]) -> None:
        with self._lock:
            subs = self._subs.get(plan_id, [])
            if q in subs:
                subs.remove(q)


class _MemorySubscription:
    def __init__(self, bus: MemoryBus, plan_id: str, q: queue.Queue[dict[str, Any]]) -> None:
        self._bus, self._plan_id, self._q = bus, plan_id, q

    def get(self, timeout: float) -> dict[str, Any] | None:
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self._bus._drop(self._plan_id, self._q)


class RedisBus:
    """Redis pub/sub, one channel per plan. Publishing never raises: a lost chunk
    costs a watcher some liveness, never a phase its result."""

    def __init__(self, url: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)

    @staticmethod
    def channel(plan_id: str) -> str:
        return f"conclave:plan:{plan_id}"

    def publish(self, plan_id: str, message: dict[str, Any]) -> None:
        try:
            self._redis.publish(self.channel(plan_id), json.dumps(message))
        except Exception as exc:  # the bus is an accelerator; never fail a phase over it
            log.warning("bus publish failed: %s", exc, extra={"action": "bus.publish_failed"})

    def subscribe(self, plan_id: str) -> Subscription:
        return _RedisSubscription(self._redis, self.channel(plan_id))


class _RedisSubscription:
    def __init__(self, client: Any, channel: str) -> None:
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._channel = channel
        self._ok = self._try(lambda: self._pubsub.subscribe(channel))

    def _try(self, fn: Any) -> bool:
        try:
            fn()
            return True
        except Exception as exc:
            log.warning("bus subscribe failed: %s", exc, extra={"action": "bus.subscribe_failed"})
            return False

    def get(self, timeout: float) -> dict[str, Any] | None:
        if not self._ok:
            self._ok = self._try(lambda: self._pubsub.subscribe(self._channel))
            if not self._ok:
                threading.Event().wait(timeout)
                return None
        try:
            msg = self._pubsub.get_message(timeout=timeout)
        except Exception:
            self._ok = False
            return None
        if not msg or msg.get("type") != "message":
            return None
        try:
            data: dict[str, Any] = json.loads(msg["data"])
            return data
        except (ValueError, TypeError):
            return None

    def close(self) -> None:
        try:
            self._pubsub.close()
        except Exception:
            pass


def publish_events(bus: Bus, plan_id: str, events: Iterable[EventRecord]) -> None:
    """Publish stored events, after the commit that stored them: the bus message is the
    stored event itself (:meth:`EventRecord.message`), so there is one shape per type."""
    for event in events:
        bus.publish(plan_id, event.message())


def drain(sub: Subscription, timeout: float) -> Iterator[dict[str, Any]]:
    """Everything already waiting on a subscription, then stop."""
    msg = sub.get(timeout)
    while msg is not None:
        yield msg
        msg = sub.get(0)
