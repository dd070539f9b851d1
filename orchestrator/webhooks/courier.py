"""Every worker's deliverer: no singleton, nothing lost when one dies.

A pass (:meth:`Courier.deliver_due`) takes up to ``CONCLAVE_WEBHOOK_CONCURRENCY`` deliveries
that are due (:func:`storage.webhook_outbox.claim_due`: ``FOR UPDATE SKIP LOCKED``, so couriers on
every worker share the outbox and never take the same row; each taken row is leased by
moving its ``next_attempt_at`` past the request's deadline, in a transaction committed
before anything is sent), sends each (:func:`orchestrator.webhooks.sending.send`, on this
courier's threads, no database connection held), and records each outcome in its own
statement, fenced by the attempt number (:func:`storage.webhook_outbox.record_attempt`): delivered;
or due again after the backoff (:mod:`orchestrator.webhooks.schedule`); or, past the
horizon, failed. The order of writes is claim → POST → record, so a courier killed anywhere
leaves the row pending under a lease that passes: the delivery is made again by whichever
courier looks next — at least once; the receiver dedupes on ``Conclave-Delivery``.

A pass takes ``now=`` (tests move the clock instead of waiting out backoffs); the loop
(:meth:`start`) passes again at once while a pass finds a full batch, else every
``CONCLAVE_WEBHOOK_INTERVAL``. A worker without ``CONCLAVE_WEBHOOK_SECRET_KEY`` has no
courier (it could sign nothing).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from orchestrator.core.settings import Settings
from orchestrator.gateway.egress import Resolver
from orchestrator.webhooks import request, schedule
from orchestrator.webhooks.sending import Sent, send
from storage import Database, webhook_outbox
from storage.models import utcnow
from storage.webhook_outbox import Due

log = logging.getLogger(__name__)


class Courier:
    def __init__(self, db: Database, settings: Settings, *, resolve: Resolver | None = None,
                 draw: Callable[[], float] = random.random) -> None:
        key = settings.webhook_key
        if key is None:
            raise ValueError("a courier signs: it needs CONCLAVE_WEBHOOK_SECRET_KEY")
        self.db = db
        self.key = key
        self.policy = settings.webhook_policy
        self.timeout = settings.webhook_timeout
        self.horizon = timedelta(hours=settings.webhook_retry_hours)
        self.interval = settings.webhook_interval
        self.batch = settings.webhook_concurrency
        self.resolve = resolve  # tests only: the system resolver otherwise
        self.draw = draw
        self._pool = ThreadPoolExecutor(self.batch, thread_name_prefix="conclave-webhook")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def deliver_due(self, *, now: datetime | None = None) -> int:
        """One pass at ``now`` (default: the clock): take what is due, send it, record what
        came of it. Returns how many deliveries it attempted."""
        now = now or utcnow()
        due = webhook_outbox.claim_due(self.db, now=now, lease_until=now + schedule.lease(self.timeout),
                                       limit=self.batch)
        for _ in self._pool.map(lambda d: self._deliver(d, now), due):
            pass
        return len(due)

    def _deliver(self, due: Due, now: datetime) -> None:
        payload = request.body(due)
        try:
            sent = send(self.policy, due.url, payload, request.headers(due, payload, key=self.key, now=now),
                        timeout=self.timeout, resolve=self.resolve)
        except Exception as exc:  # a bug: the attempt counts as failed, the traceback goes to the log
            log.exception("webhook delivery %s failed unexpectedly", due.id, extra={"action": "webhook.error"})
            sent = Sent(False, None, f"conclave.internal ({type(exc).__name__})")
        retry_at = None if sent.delivered else schedule.next_attempt(due.attempt, now=now, since=due.created_at,
                                                                     horizon=self.horizon, draw=self.draw())
        try:
            recorded = webhook_outbox.record_attempt(self.db, due.id, attempt=due.attempt, now=now,
                                               delivered=sent.delivered, next_attempt_at=retry_at,
                                               status_code=sent.status_code, error=sent.error)
        except Exception as exc:  # the row stays leased; when the lease passes it is sent again
            log.warning("webhook delivery %s: its outcome could not be recorded (%s); it will be sent again",
                        due.id, type(exc).__name__, extra={"action": "webhook.unrecorded"})
            return
        _log(due, sent, retry_at, recorded)

    def start(self) -> None:
        """Pass now, then again and again on a daemon thread, until :meth:`stop`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="conclave-webhooks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                attempted = self.deliver_due()
            except Exception as exc:  # an outage skips a pass; the next one tries again
                log.warning("webhook pass failed: %s", type(exc).__name__, extra={"action": "webhook.pass_failed"})
                attempted = 0
            if attempted < self.batch and self._stop.wait(self.interval):
                return

    def stop(self, timeout: float = 5.0) -> None:
        """Stop passing; a delivery in flight ends within its deadline (or, if the process exits
        first, is sent again once its lease passes)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _log(due: Due, sent: Sent, retry_at: datetime | None, recorded: bool) -> None:
    """One line per attempt: ids, the attempt, the outcome in our words — never the URL (its
    path may be a credential), a secret or anything the receiver said."""
    where = f"webhook delivery {due.id} ({due.event_type}) to endpoint {due.endpoint_id}, attempt {due.attempt}"
    if not recorded:
        log.info("%s: %s, but another courier holds it now", where, "delivered" if sent.delivered else sent.error,
                 extra={"action": "webhook.fenced"})
    elif sent.delivered:
        log.info("%s: delivered (HTTP %s)", where, sent.status_code, extra={"action": "webhook.delivered"})
    elif retry_at is None:
        log.warning("%s: %s; retried until its horizon, now failed", where, sent.error,
                    extra={"action": "webhook.failed"})
    else:
        log.info("%s: %s; next attempt at %s", where, sent.error, retry_at.isoformat(),
                 extra={"action": "webhook.retrying"})
