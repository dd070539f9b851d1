"""``GET /v1/plans/{id}/events``: a plan's stored events as Server-Sent Events, with
live text chunks in between.

Stored events are the record: each is sent with ``id:`` = its stored id, so a
client that reconnects with ``Last-Event-ID`` (or ``?after=``) gets exactly the
events after it. The database is polled every ``poll`` seconds, and at once when
the bus announces a transition. Chunks come from the bus only; they are not
stored, so they carry no ``id:`` (a reconnecting client resumes from the last
stored event and may miss chunks — the phase's full text is at
``/phases/{key}/content``). The stream ends once the plan is final and every
event up to its end was sent.

The bus carries two shapes: a stored event as it was stored (``id``, ``type``,
``phase``, ``data``, published after its commit) and a chunk. A stored event from
the bus is never forwarded as it is: it triggers the database read that sends it
with its ``id:`` (an event the stream already sent is skipped), so every stored
event reaches the client exactly once, in id order.

A stream waits on its live feed (:mod:`orchestrator.api.feed`): a chunk is sent as
soon as the bus delivers it, and an idle stream holds no thread (database reads run
in the thread pool, one query at a time). The number of open streams is bounded, and so
is each tenant's share of them (``CONCLAVE_MAX_STREAMS``, ``CONCLAVE_MAX_STREAMS_PER_TENANT``):
one tenant's watchers cannot take the slots another tenant's need. A stream opened with a
principal's token checks every ``recheck`` seconds that the token still stands, and ends
when it was revoked (a client that reconnects gets the 401).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool

from orchestrator.api.feed import Feed, FeedSubscription
from orchestrator.control.reads import PlanReads
from orchestrator.core.errors import PlanNotFound, ServiceUnavailable, TooManyStreams
from storage.read_models import EventRecord

log = logging.getLogger("orchestrator.api")

PAGE = 500


def stored_event(e: EventRecord) -> str:
    data = {"id": e.id, "type": e.type, "phase": e.phase_key, "data": e.data, "created_at": e.created_at.isoformat()}
    return f"id: {e.id}\nevent: {_field(e.type)}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def chunk_event(message: dict[str, Any]) -> str:
    return f"event: chunk\ndata: {json.dumps(message, separators=(',', ':'))}\n\n"


def _field(value: str) -> str:
    return value.replace("\r", " ").replace("\n", " ")


def _already_sent(msg: dict[str, Any], last: int) -> bool:
    """A published stored event whose id the stream has already sent."""
    event_id = msg.get("id")
    return isinstance(event_id, int) and event_id <= last


class Slot:
    """One open stream's share of the limits; released once, however many times asked."""

    def __init__(self, streams: EventStreams, tenant: str) -> None:
        self._streams: EventStreams | None = streams
        self.tenant = tenant

    def release(self) -> None:
        if self._streams is not None:
            self._streams.by_tenant[self.tenant] -= 1
            if not self._streams.by_tenant[self.tenant]:
                del self._streams.by_tenant[self.tenant]
            self._streams = None


class EventStreams:
    def __init__(self, reads: PlanReads, feed: Feed, *, max_streams: int = 256, per_tenant: int | None = None,
                 poll: float = 0.5, keepalive: float = 10.0, recheck: float = 5.0) -> None:
        self.reads = reads
        self.feed = feed
        self.max_streams = max_streams
        self.per_tenant = min(max_streams, per_tenant or max(1, max_streams // 4))
        self.poll = poll
        self.keepalive = keepalive
        self.recheck = recheck
        self.by_tenant: Counter[str] = Counter()  # touched only on the event loop

    @property
    def open(self) -> int:
        return sum(self.by_tenant.values())

    def reserve(self, tenant: str) -> Slot:
        """Take one of the ``max_streams`` slots for ``tenant``, within its share
        (``per_tenant``), or raise :class:`TooManyStreams`. The checks and the count happen
        with no await in between, so the limits hold however many requests arrive at once;
        the slot is given back when its stream ends."""
        if self.by_tenant[tenant] >= self.per_tenant:
            raise TooManyStreams(f"tenant {tenant!r} has {self.by_tenant[tenant]} event streams open on this API "
                                 f"process, its share of {self.max_streams} (CONCLAVE_MAX_STREAMS_PER_TENANT="
                                 f"{self.per_tenant})",
                                 details=[{"field": "path", "message": "too many open event streams for the tenant"}])
        if self.open >= self.max_streams:
            raise TooManyStreams(f"{self.open} event streams are open, the limit is {self.max_streams} "
                                 "(CONCLAVE_MAX_STREAMS)",
                                 details=[{"field": "path", "message": "too many open event streams"}])
        self.by_tenant[tenant] += 1
        return Slot(self, tenant)

    def _read(self, plan_id: str, after: int) -> tuple[bool, list[EventRecord]]:
        # status first: if the plan was final before the events were read, they include its end
        final = self.reads.get_plan(plan_id).final
        return final, self.reads.list_events(plan_id, after=after, limit=PAGE)

    async def stream(self, plan_id: str, after: int, slot: Slot,
                     still_allowed: Callable[[], bool] | None = None) -> AsyncIterator[str]:
        """The stream; ``still_allowed`` (None: nothing to re-check) is asked in the thread
        pool every ``recheck`` seconds, and the stream ends once it says no."""
        sub: FeedSubscription | None = None
        try:
            sub = await self.feed.subscribe(plan_id)  # before the first read: no gap
            yield "retry: 2000\n\n"
            last, pending = after, deque[dict[str, Any]]()
            next_poll, last_write = 0.0, time.monotonic()
            next_check = time.monotonic() + self.recheck
            while True:
                if still_allowed is not None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.recheck
                    try:
                        allowed = await run_in_threadpool(still_allowed)
                    except ServiceUnavailable:
                        allowed = True  # the database is away: the next check decides
                    if not allowed:
                        log.info("event stream of plan %s ends: its token was revoked", plan_id,
                                 extra={"action": "api.stream_revoked"})
                        return
                if time.monotonic() >= next_poll:
                    try:
                        final, events = await run_in_threadpool(self._read, plan_id, last)
                    except ServiceUnavailable as exc:
                        log.warning("event stream: %s", exc.message, extra={"action": "api.stream_retry"})
                        next_poll = time.monotonic() + 2.0
                        final, events = False, []
                    except PlanNotFound:
                        return
                    for e in events:
                        yield stored_event(e)
                        last = e.id
                    if events:
                        last_write = time.monotonic()
                    if final and len(events) < PAGE:
                        return
                    if len(events) == PAGE:
                        continue
                    next_poll = max(next_poll, time.monotonic() + self.poll)
                if not pending:  # wait for the feed until the next read or keep-alive is due
                    now = time.monotonic()
                    wait = min(next_poll - now, self.keepalive - (now - last_write))
                    if still_allowed is not None:
                        wait = min(wait, next_check - now)
                    pending.extend(await sub.get(wait))
                wrote = False
                while pending:
                    msg = pending.popleft()
                    if msg.get("type") == "chunk":
                        yield chunk_event(msg)
                        wrote = True
                    elif not _already_sent(msg, last):  # read it from the database before later chunks
                        next_poll = 0.0
                        break
                if wrote:
                    last_write = time.monotonic()
                elif time.monotonic() - last_write >= self.keepalive:
                    yield ": keep-alive\n\n"
                    last_write = time.monotonic()
        finally:
            slot.release()
            if sub is not None:
                with anyio.CancelScope(shield=True):
                    await sub.close()
