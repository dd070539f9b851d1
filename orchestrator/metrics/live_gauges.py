"""The API's gauges: what is live across the fleet, read from the database on every scrape
(:func:`storage.stats.live_counts`), so every API replica reports the same numbers. Only live
rows are counted, each through an index: a scrape costs the same with a hundred or a hundred
thousand finished plans. Counts of what happened — phases run, calls, tokens, takeovers —
are the workers' (:mod:`orchestrator.metrics.recorder`).

- ``conclave_plans_running`` — plans running now;
- ``conclave_plans_cancelling`` — running plans whose cancel was requested;
- ``conclave_phases{status}`` — the phases of running plans, by status (every status
  shown, zeros included);
- ``conclave_phases_lease_expired`` — running phases whose lease has expired (their
  worker died; the reconciler hands them to another within ``CONCLAVE_RECONCILE_INTERVAL``);
- ``conclave_webhook_deliveries_pending`` — webhook deliveries not yet delivered nor failed;
- ``conclave_webhook_deliveries_overdue`` — of those, the ones due for over a minute that no
  courier has taken (no worker has ``CONCLAVE_WEBHOOK_SECRET_KEY``, or the couriers are saturated).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from orchestrator.core.errors import storage_boundary
from storage import Database
from storage.models import utcnow
from storage.stats import LiveCounts, live_counts
from storage.status import PhaseStatus


def _families(counts: LiveCounts | None) -> list[Metric]:
    plans = GaugeMetricFamily("conclave_plans_running", "Plans running now.")
    cancelling = GaugeMetricFamily("conclave_plans_cancelling", "Running plans whose cancel was requested.")
    phases = GaugeMetricFamily("conclave_phases", "Phases of running plans, by status.", labels=["status"])
    expired = GaugeMetricFamily("conclave_phases_lease_expired",
                                "Running phases whose lease has expired (their worker died), awaiting a takeover.")
    hooks = GaugeMetricFamily("conclave_webhook_deliveries_pending",
                              "Webhook deliveries not yet delivered nor failed (retrying, or due).")
    overdue = GaugeMetricFamily("conclave_webhook_deliveries_overdue",
                                "Pending webhook deliveries due for over a minute that no courier has taken.")
    if counts is not None:
        plans.add_metric([], counts.plans)
        cancelling.add_metric([], counts.cancelling)
        for status in sorted({*PhaseStatus, *counts.phases}):
            phases.add_metric([str(status)], counts.phases.get(status, 0))
        expired.add_metric([], counts.expired_leases)
        hooks.add_metric([], counts.webhooks_pending)
        overdue.add_metric([], counts.webhooks_overdue)
    return [plans, cancelling, phases, expired, hooks, overdue]


class FleetCollector:
    """A prometheus_client collector over the database: three indexed statements per scrape
    (one transaction). A database outage raises ``ServiceUnavailable`` (the route's 503)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def describe(self) -> Iterable[Metric]:
        return _families(None)  # registering reads nothing

    def collect(self) -> Iterable[Metric]:
        with storage_boundary():
            counts = live_counts(self._db, now=utcnow())
        return _families(counts)
