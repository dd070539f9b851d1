"""Live fan-out of what experts are saying: an accelerator, never the truth.

Messages are stored events (published after the commit that stored them, in the
shape of :meth:`storage.read_models.EventRecord.message`) and text chunks (bus-only:
``{"type": "chunk", "phase", "expert", "seq", "text"}``). They may be lost (Redis keeps nothing on disk by default);
a watcher that needs certainty re-reads stored events and contents.

A phase's text goes through :meth:`Bus.chunks`: its chunks get consecutive ``seq`` from 0,
and with Redis, text that arrives while the phase's last chunk still waits to be sent joins
that chunk (one message instead of several, every character in order).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from storage.read_models import EventRecord

log = logging.getLogger(__name__)


class Subscription(Protocol):
    def get(self, timeout: float) -> dict[str, Any] | None: ...

    def close(self) -> None: ...


class Bus(Protocol):
    def publish(self, plan_id: str, message: dict[str, Any]) -> None: ...

    def chunks(self, plan_id: str, phase: str, expert: str | None) -> Chunks: ...

    def subscribe(self, plan_id: str) -> Subscription: ...

    def close(self) -> None: ...


class Chunks(Protocol):
    """One phase's live text, published as chunks numbered from 0."""

    def add(self, text: str) -> None: ...


class _EachChunk:
    """A chunk message per piece of text (the in-process bus: nothing waits to be sent)."""

    def __init__(self, bus: Bus, plan_id: str, phase: str, expert: str | None) -> None:
        self._bus, self._plan_id, self._phase, self._expert = bus, plan_id, phase, expert
        self._seq = 0

    def add(self, text: str) -> None:
        self._bus.publish(self._plan_id, {"type": "chunk", "phase": self._phase, "expert": self._expert,
                                          "seq": self._seq, "text": text})
        self._seq += 1


def open_bus(redis_url: str | None) -> Bus:
    """Redis when the deployment has it, else the in-process bus (embedded mode)."""
    return RedisBus(redis_url) if redis_url else MemoryBus()


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

    def chunks(self, plan_id: str, phase: str, expert: str | None) -> Chunks:
        return _EachChunk(self, plan_id, phase, expert)

    def subscribe(self, plan_id: str) -> Subscription:
        q: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._subs.setdefault(plan_id, []).append(q)
        return _MemorySubscription(self, plan_id, q)

    def close(self) -> None:
        pass

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
    """Redis pub/sub, one channel per plan. Publishing never raises and never waits on
    Redis: a message is queued, and one sender thread per process sends everything
    queued in one write (:class:`_Sender`; a burst of chunks in publish order).
    A lost message costs a watcher some liveness, never a phase its result; when Redis
    is away the sender backs off (each failure logged), the queue is bounded and the
    oldest messages are dropped first.

    The sender writes at once what it finds when it wakes, then at most once every
    ``WINDOW`` while messages keep coming: a publish wakes it only when it is idle, so a
    busy process pays one wake-up and one write per window, not per message, and a lone
    message waits for nothing. A phase's chunk waits in the queue until its write: text
    of the same phase arriving meanwhile joins it (:class:`_JoiningChunks`)."""

    MAX_QUEUED = 10_000
    WINDOW = 0.002  # seconds between writes while messages keep coming
    BACKOFF, MAX_BACKOFF = 0.05, 5.0  # seconds before the next try after failures in a row: doubling, capped

    def __init__(self, url: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        lock = threading.Lock()
        self._lock = lock
        self._wake = threading.Condition(lock)  # the sender waits here for messages
        self._done = threading.Condition(lock)  # flush() waits here for the sender
        self._idle = False  # the sender waits for a message, not lingering: a publish wakes it
        self._queue: collections.deque[tuple[str, str | _Chunk]] = collections.deque()
        self._batch = 0  # how many batches the sender took: a chunk queued since the last one may grow
        self._sender: threading.Thread | None = None
        self._pid = 0
        self._closed = False
        self._sending = False  # a batch is out of the queue but not yet handed to Redis
        self._dropped = 0

    @staticmethod
    def channel(plan_id: str) -> str:
        return f"conclave:plan:{plan_id}"

    def publish(self, plan_id: str, message: dict[str, Any]) -> None:
        item = (self.channel(plan_id), json.dumps(message))
        with self._lock:
            self._put(item)

    def chunks(self, plan_id: str, phase: str, expert: str | None) -> Chunks:
        return _JoiningChunks(self, self.channel(plan_id), phase, expert)

    def _put(self, item: tuple[str, str | _Chunk]) -> None:
        """Queue ``item`` (the lock held) and wake an idle sender."""
        if self._closed:
            return
        if self._pid != os.getpid():  # first use, or a forked child: the thread did not survive
            self._pid, self._queue = os.getpid(), collections.deque()
            self._batch += 1  # what a parent queued is not this process's to join
            self._sender = threading.Thread(target=self._send_loop, name="conclave-bus", daemon=True)
            self._sender.start()
            atexit.register(self.flush, 1.0)  # a process ending sends what it queued
        if len(self._queue) >= self.MAX_QUEUED:
            self._queue.popleft()
            self._dropped += 1
        self._queue.append(item)
        if self._idle:
            self._idle = False
            self._wake.notify()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued so far was handed to Redis (or dropped)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._queue or self._sending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def close(self, timeout: float = 2.0) -> None:
        """Send what is queued (up to ``timeout``), then stop the sender."""
        self.flush(timeout)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            self._done.notify_all()

    def _send_loop(self) -> None:
        sender = _Sender(self._redis)
        failures = 0  # in a row: while Redis is away the sender backs off, the queue stays bounded
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._idle = True
                    self._wake.wait()
                self._idle = False
                if self._closed and not self._queue:
                    sender.reset()
                    return
                batch, self._queue = self._queue, collections.deque()
                self._batch += 1  # the chunks in it are final now
                self._sending = True
            try:
                sender.send(batch)
                failures = 0
            except Exception as exc:  # the bus is an accelerator; never fail a phase over it
                sender.reset()
                failures += 1
                log.warning("bus publish failed (%d messages lost): %s", len(batch), exc,
                            extra={"action": "bus.publish_failed"})
            finally:
                with self._lock:
                    self._sending = False
                    dropped, self._dropped = self._dropped, 0
                    self._done.notify_all()
                if dropped:
                    log.warning("bus queue full: %d oldest messages dropped", dropped,
                                extra={"action": "bus.publish_failed"})
            if failures:
                with self._lock:
                    if not self._closed:  # close() wakes it
                        self._wake.wait(min(self.MAX_BACKOFF, self.BACKOFF * 2 ** (failures - 1)))
            else:
                time.sleep(self.WINDOW)  # what comes meanwhile is written together (and chunks grow)

    def subscribe(self, plan_id: str) -> Subscription:
        return _RedisSubscription(self._redis, self.channel(plan_id))


class _Chunk:
    """A chunk waiting in the queue; its text grows until the sender takes its batch."""

    __slots__ = ("batch", "expert", "parts", "phase", "seq")

    def __init__(self, phase: str, expert: str | None, seq: int, text: str, batch: int) -> None:
        self.phase, self.expert, self.seq, self.parts, self.batch = phase, expert, seq, [text], batch

    def data(self) -> str:
        return json.dumps({"type": "chunk", "phase": self.phase, "expert": self.expert, "seq": self.seq,
                           "text": "".join(self.parts)})


class _JoiningChunks:
    """A phase's chunks on a :class:`RedisBus`: text joins the phase's last chunk while that
    one is still queued (the sender has not taken its batch), else becomes the next chunk."""

    def __init__(self, bus: RedisBus, channel: str, phase: str, expert: str | None) -> None:
        self._bus, self._channel, self._phase, self._expert = bus, channel, phase, expert
        self._seq = 0
        self._last: _Chunk | None = None

    def add(self, text: str) -> None:
        bus = self._bus
        with bus._lock:
            last = self._last
            if last is not None and last.batch == bus._batch:
                last.parts.append(text)
                return
            self._last = chunk = _Chunk(self._phase, self._expert, self._seq, text, bus._batch)
            self._seq += 1
            bus._put((self._channel, chunk))


class _Sender:
    """The sender thread's own connection. A batch is one write of PUBLISH commands
    packed here, not a redis-py pipeline. When the server has ``CLIENT REPLY``
    (Redis 3.2 and later) the connection turns replies off: a publish costs about a
    microsecond of CPU and nothing is read back. A server without it, or one that
    refuses it (some proxies), gets the same write and its replies read, an error
    among them failing the batch. A failed write drops the connection; the next
    batch connects again."""

    def __init__(self, client: Any) -> None:
        self._pool = client.connection_pool
        self._conn: Any = None
        self._quiet = False  # replies are off on this connection

    def send(self, batch: Iterable[tuple[str, str | _Chunk]]) -> None:
        from redis.exceptions import ConnectionError as Disconnected

        packed = [_command(b"PUBLISH", channel.encode(), (data if isinstance(data, str) else data.data()).encode())
                  for channel, data in batch]
        try:
            self._write(packed)
        except Disconnected:  # nothing of it reached a server that is still there: once more, anew
            self.reset()
            self._write(packed)

    def _write(self, packed: list[bytes]) -> None:
        conn = self._conn if self._conn is not None and not self._stale() else self._connect()
        conn.send_packed_command([b"".join(packed)], check_health=False)
        if not self._quiet:
            for _ in packed:
                conn.read_response()

    def _stale(self) -> bool:
        """A quiet connection is never sent anything: if it is readable, the server closed
        it (it restarted, or dropped an idle client), and a write would go nowhere."""
        if not self._quiet:
            return False
        try:
            stale = bool(self._conn.can_read(timeout=0))
        except Exception:
            stale = True
        if stale:
            self.reset()
        return stale

    def reset(self) -> None:
        if self._conn is not None:
            try:
                self._conn.disconnect()
            except Exception:
                pass
        self._conn = None

    def _connect(self) -> Any:
        from redis.exceptions import ResponseError

        conn = self._pool.make_connection()
        conn.connect()  # authenticates and selects the database, with replies
        # OFF sends no reply and ON answers OK, so one reply tells whether the server has it
        conn.send_packed_command([_command(b"CLIENT", b"REPLY", b"OFF"), _command(b"CLIENT", b"REPLY", b"ON")],
                                 check_health=False)
        try:
            self._quiet = conn.read_response() in (b"OK", "OK")
        except ResponseError:  # both were refused: two errors to read
            self._quiet = False
            with contextlib.suppress(ResponseError):
                conn.read_response()
        if self._quiet:
            conn.send_packed_command([_command(b"CLIENT", b"REPLY", b"OFF")], check_health=False)
        self._conn = conn
        return conn


def _command(*args: bytes) -> bytes:
    """One command in RESP, as redis-py would pack it."""
    return b"*%d\r\n%b" % (len(args), b"".join(b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args))



class _RedisSubscription:
    def __init__(self, client: Any, channel: str) -> None:
        self._client = client  # a collected client closes its pool, this connection included
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
