"""Costs independent of history (issue 9, goal 4), measured in one run.

A fleet's database keeps every finished plan (with its phases, contents, usage rows and
events) until retention prunes what it prunes; what an operator runs every few seconds must
not grow with that history. This bench seeds two Postgres databases, one with 100 and one
with 100,000 finished plans, by bulk ``INSERT … SELECT generate_series`` (each plan: 6
completed phases, 6 contents, 6 usage rows, 14 events — the shape of a small board), each
beside the same number of live plans submitted through the coordinator, and times on both:

- ``/metrics``: one scrape of the API's exposition (``orchestrator.api.ops.scrape``);
- one reconciler pass (``Coordinator.reconcile``) that finds every live plan stalled and
  re-derives it (their marks, leases and timestamps are reset before each pass, untimed, so
  each pass does the same work; the dispatcher records instead of sending) — dominated by
  the live plans' own work — and one in a healthy fleet, where it finds nothing (the
  stalled-plan query alone: where history would show);
- the first page of the plan listing, an admin's (every tenant) and a tenant's;
- a retention pass (``Coordinator.prune``, hourly, within the same sweep; goal 4's "retention
  covers every table that grows") in the steady state: retention has run all along (each
  site is caught up once after seeding, untimed), whole-plan deletion is on
  (``retain_finished_days=30``, the seeded plans finished 20 days ago) and nothing is due —
  the pass is its three keyset queries, where history would show;
- a retention pass that deletes ``DUE`` plans come due (made due before each pass, untimed),
  the opening of each shared with another plan as a what-if fork's copy is: it deletes their
  rows and the contents only they referenced, and keeps the shared ones — each content's
  references looked up through ``ix_phases_content_id``, so its cost is the batch's.

Each figure is the median of ``--runs`` timed calls after one warm-up, the two databases
taking turns call by call (a noisy moment of a shared machine hits both alike); the tables are
ANALYZEd after seeding, as autovacuum would. The ratio large/small is the figure (goal ~1.0x).

Usage: python bench/history.py [--small 100] [--large 100000] [--live 20] [--runs 15] [--keep]
Needs Postgres on 127.0.0.1 (make services). Creates and drops its own databases.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch import PG  # noqa: E402

PHASES = ("opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary", "final")
TEXT = "A finished phase's full text, as the content store keeps it. " * 8
SPEC = {"kind": "board", "title": "finished", "question": "Should we?", "rounds": 1,
        "moderator": {"name": "Morgan", "role": "Chair"},
        "experts": [{"name": n, "role": "Expert"} for n in ("Dana", "Ravi", "Sofia")]}


def live_board(i: int) -> dict[str, Any]:
    return {**SPEC, "title": f"live {i}", "question": f"Should we open office number {i}?"}


# One statement per table; :lo..:hi are the finished plans' numbers. Ids are UUID-shaped and
# ordered by (plan, phase) — appended at the right edge of each index, which is what makes the
# seeding fast — so a second call with the next range appends without colliding.
_PLAN_ID = "('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))"
_PHASE_ID = "(lpad(to_hex(i), 8, '0') || '-' || lpad(to_hex(k), 4, '0') || '-4000-8000-000000000000')"
_CONTENT_ID = "(lpad(to_hex(i), 8, '0') || '-' || lpad(to_hex(k), 4, '0') || '-4000-9000-000000000000')"
# created within the retention period (nothing to prune: a retention pass is its scan alone)
_CREATED = "((now() at time zone 'utc') - interval '20 days' + i * interval '1 second')"
SEED = (
    f"""INSERT INTO plans (id, tenant, task_id, title, kind, spec, status, cancel_requested, max_debates, labels,
                          created_at, updated_at, finished_at)
        SELECT {_PLAN_ID}, CASE WHEN i % 2 = 0 THEN 'default' ELSE 'acme' END, NULL, 'finished ' || i, 'board',
               CAST(:spec AS json), 'completed', false, 0, '[]'::json,
               {_CREATED}, {_CREATED} + interval '9 seconds', {_CREATED} + interval '9 seconds'
        FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS i""",
    f"""INSERT INTO contents (id, text, chars, sha256, created_at)
        SELECT {_CONTENT_ID}, :text, length(:text), encode(sha256(convert_to(:text, 'UTF8')), 'hex'),
               {_CREATED} + (k + 1) * interval '1 second'
        FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS i, generate_series(0, 5) AS k""",
    f"""INSERT INTO phases (id, plan_id, key, kind, expert, round, group_key, position, depends_on, inputs, meta,
                           status, attempt, retries_requested, summary, truncated, created_at, started_at,
                           finished_at, content_id)
        SELECT {_PHASE_ID}, {_PLAN_ID}, (CAST(:keys AS text[]))[k + 1], 'expert', NULL, 1, NULL, k,
               CASE WHEN k = 0 THEN '[]'::json ELSE json_build_array((CAST(:keys AS text[]))[k]) END,
               '[]'::json, '{{}}'::json, 'completed', 1, 0, 'a summary', false,
               {_CREATED}, {_CREATED} + k * interval '1 second', {_CREATED} + (k + 1) * interval '1 second',
               {_CONTENT_ID}
        FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS i, generate_series(0, 5) AS k""",
    f"""INSERT INTO usage (plan_id, phase_id, attempt, seq, purpose, model, input_tokens, output_tokens, source,
                          method, created_at)
        SELECT {_PLAN_ID}, {_PHASE_ID}, 1, 1, 'phase', 'offline:offline', 400 + k, 120,
               CASE WHEN k % 2 = 0 THEN 'provider' ELSE 'estimated' END,
               CASE WHEN k % 2 = 0 THEN NULL ELSE 'chars/4' END, {_CREATED} + (k + 1) * interval '1 second'
        FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS i, generate_series(0, 5) AS k""",
    f"""INSERT INTO events (plan_id, phase_key, type, data, created_at)
        SELECT {_PLAN_ID}, CASE WHEN e BETWEEN 1 AND 12 THEN (CAST(:keys AS text[]))[(e - 1) / 2 + 1] END,
               CASE WHEN e = 0 THEN 'plan_submitted' WHEN e = 13 THEN 'plan_finished'
                    WHEN e % 2 = 1 THEN 'phase_started' ELSE 'phase_completed' END,
               '{{}}'::json, {_CREATED} + e * interval '0.5 seconds'
        FROM generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) AS i, generate_series(0, 13) AS e""",
)


def seed_finished(engine: Any, lo: int, hi: int) -> float:
    """Append finished plans ``lo..hi`` (and their rows); seconds taken, ANALYZE included."""
    from sqlalchemy import text

    t0 = time.perf_counter()
    params = {"lo": lo, "hi": hi, "spec": json.dumps(SPEC), "keys": list(PHASES), "text": TEXT}
    with engine.begin() as c:
        # the rows are consistent by construction: skip the per-row foreign-key triggers
        c.execute(text("SET LOCAL session_replication_role = replica"))
        for statement in SEED:
            c.execute(text(statement), params)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("ANALYZE"))
    return time.perf_counter() - t0


DUE = 5  # finished plans each timed deletion pass finds due


def come_due(engine: Any) -> None:
    """Make the ``DUE`` oldest seeded plans due for whole-plan deletion (finished 40 days ago),
    the opening of each also pointed at by the next plan's opening — as a what-if fork's copy
    points at its source's content: the pass deletes their phases and the contents only they
    referenced, and keeps those ``DUE`` openings' contents (another plan still uses them)."""
    from sqlalchemy import text

    with engine.begin() as c:
        ids = [r[0] for r in c.execute(text(
            "SELECT id FROM plans WHERE status = 'completed' AND title LIKE 'finished %' "
            "AND finished_at > (now() at time zone 'utc') - interval '30 days' ORDER BY finished_at, id LIMIT :n"),
            {"n": 2 * DUE})]
        due, forks = ids[:DUE], ids[DUE:]
        assert len(forks) == DUE, "the site ran out of finished plans: seed more, or run fewer runs"
        c.execute(text("UPDATE plans SET finished_at = (now() at time zone 'utc') - interval '40 days' "
                       "WHERE id = ANY(:due)"), {"due": due})
        for source, fork in zip(due, forks, strict=True):
            c.execute(text("UPDATE phases SET content_id = (SELECT content_id FROM phases WHERE plan_id = :s "
                           "AND key = 'opening') WHERE plan_id = :f AND key = 'opening'"), {"s": source, "f": fork})


def stall(engine: Any, live: list[str]) -> None:
    """Make every live plan look stopped, the same way before each pass: half lost their
    messages (nothing marked, no progress for an hour), half had their worker die (the
    opening running under an expired lease)."""
    from sqlalchemy import text

    with engine.begin() as c:
        c.execute(text("UPDATE plans SET updated_at = (now() at time zone 'utc') - interval '1 hour' "
                       "WHERE id = ANY(:ids)"), {"ids": live})
        c.execute(text("UPDATE phases SET enqueued_at = NULL, status = 'pending', lease_owner = NULL, "
                       "lease_expires_at = NULL WHERE plan_id = ANY(:ids)"), {"ids": live})
        c.execute(text("UPDATE phases SET status = 'running', attempt = 1, lease_owner = 'gone:1:x', "
                       "lease_expires_at = (now() at time zone 'utc') - interval '1 minute' "
                       "WHERE plan_id = ANY(:ids) AND key = 'opening'"), {"ids": live[::2]})


def settle(engine: Any, live: list[str]) -> None:
    """Make every live plan look healthy: moving now, its ready phases just sent, its running
    ones on live leases — a reconciler pass then finds nothing to do."""
    from sqlalchemy import text

    with engine.begin() as c:
        c.execute(text("UPDATE plans SET updated_at = now() at time zone 'utc' WHERE id = ANY(:ids)"), {"ids": live})
        c.execute(text("UPDATE phases SET enqueued_at = now() at time zone 'utc', "
                       "lease_expires_at = CASE WHEN status = 'running' "
                       "THEN (now() at time zone 'utc') + interval '1 hour' END WHERE plan_id = ANY(:ids)"),
                  {"ids": live})


class Site:
    """One seeded database: its engine (for seeding and resetting), the coordinator a
    process would run on it (recording dispatcher), and its live plans."""

    def __init__(self, url: str, finished: int, live: int) -> None:
        from sqlalchemy import create_engine

        from orchestrator.control.coordinator import Coordinator
        from orchestrator.control.dispatch import RecordingDispatcher
        from orchestrator.core.bus import MemoryBus
        from orchestrator.core.settings import Settings
        from storage import connect, upgrade

        upgrade(url)
        self.finished = finished
        self.engine = create_engine(url)
        self.db = connect(url, pool_size=4)
        settings = Settings(database_url=url, broker_url="memory://", allow_plan_models=True, submit_rate=0,
                            retain_finished_days=30)
        self.coordinator = Coordinator(self.db, settings, RecordingDispatcher(), MemoryBus())
        self.live = [self.coordinator.submit({**live_board(i), "models": {"default": {"provider": "offline"}}})
                     .plan_id for i in range(live)]
        self.nudged: set[int] = set()

    def seed(self) -> float:
        return seed_finished(self.engine, 1, self.finished)

    def catch_up(self) -> float:
        """Run retention until it has seen every seeded plan, as a fleet that ran it all along
        would have (untimed for the figures); seconds taken."""
        from storage import retention
        from storage.models import utcnow

        t0 = time.perf_counter()
        while True:
            now = utcnow()
            done = retention.prune(self.db, older_than=now - timedelta(days=30), max_events_per_plan=5000,
                                   delete_before=now - timedelta(days=30), batch=1000, per_pass=20_000, now=now)
            if not (done.trimmed or done.plans):
                return time.perf_counter() - t0

    def counts(self) -> dict[str, int]:
        from sqlalchemy import text

        with self.engine.connect() as c:
            return {t: int(c.scalar(text(f"SELECT count(*) FROM {t}")) or 0)
                    for t in ("plans", "phases", "contents", "usage", "events")}

    def operations(self) -> dict[str, tuple[Callable[[], Any], Callable[[], None] | None]]:
        """What is timed, each with what must run (untimed) before it."""
        from orchestrator.api.ops import scrape
        from storage import listing

        def reconcile() -> None:
            self.nudged.add(len(self.coordinator.reconcile()))
            self.coordinator.dispatcher.take()  # type: ignore[attr-defined]

        def idle() -> None:
            assert self.coordinator.reconcile() == [], "a healthy plan was taken for stalled"

        def delete_due() -> None:
            done = self.coordinator.prune()
            assert done is not None and done.plans == DUE, done

        return {
            "/metrics scrape": (lambda: scrape(self.db), None),
            "reconciler pass, all stalled": (reconcile, lambda: stall(self.engine, self.live)),
            "reconciler pass, none stalled": (idle, lambda: settle(self.engine, self.live)),
            "listing page 1 (admin)": (lambda: listing.list_plans(self.db, tenant=None), None),
            "listing page 1 (a tenant)": (lambda: listing.list_plans(self.db, tenant="default"), None),
            "retention pass (hourly)": (self.coordinator.prune, None),  # caught up: nothing due
            # DUE plans due, their openings shared with forks: their rows and unshared contents go
            f"retention deleting {DUE} plans": (delete_due, lambda: come_due(self.engine)),
        }

    def close(self) -> None:
        self.db.dispose()
        self.engine.dispose()


def side_by_side(sites: list[Site], runs: int) -> dict[str, dict[int, float]]:
    """Median milliseconds of each operation on each site, the sites taking turns run by run
    (so a noisy moment hits both alike), after one warm-up each."""
    ops = [site.operations() for site in sites]
    figures: dict[str, dict[int, float]] = {}
    for what in ops[0]:
        samples: dict[int, list[float]] = {site.finished: [] for site in sites}
        for i in range(runs + 1):
            for site, mine in zip(sites, ops, strict=True):
                fn, before = mine[what]
                if before is not None:
                    before()
                t0 = time.perf_counter()
                fn()
                if i:
                    samples[site.finished].append((time.perf_counter() - t0) * 1000)
        figures[what] = {size: statistics.median(ms) for size, ms in samples.items()}
    for site in sites:
        assert site.nudged == {len(site.live)}, f"every pass re-derives every live plan: {site.nudged}"
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=100, help="finished plans in the small database")
    parser.add_argument("--large", type=int, default=100_000, help="finished plans in the large one")
    parser.add_argument("--live", type=int, default=20, help="running plans beside them, in each")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the seeded databases (their URLs are printed)")
    args = parser.parse_args()

    from sqlalchemy import create_engine, text

    admin = create_engine(f"{PG}/postgres", isolation_level="AUTOCOMMIT")
    names = {size: f"conclave_bench_{size}_{uuid.uuid4().hex[:6]}" for size in (args.small, args.large)}
    sites: list[Site] = []
    try:
        for size, name in names.items():
            with admin.connect() as c:
                c.execute(text(f'CREATE DATABASE "{name}"'))
            site = Site(f"{PG}/{name}", size, args.live)
            sites.append(site)
            took = site.seed()
            print(f"[goal 4] seeded {size} finished plans in {took:.1f}s: "
                  + ", ".join(f"{t} {n}" for t, n in site.counts().items()))
            print(f"[goal 4] retention caught up with them in {site.catch_up():.1f}s (untimed)")
        figures = side_by_side(sites, args.runs)
        print(f"[goal 4] median of {args.runs} runs each, the two databases taking turns:")
        for what, by_size in figures.items():
            print(f"  {what:<28} " + " | ".join(f"{size} finished: {ms:7.2f} ms" for size, ms in by_size.items()))
        for what, by_size in figures.items():
            small, large = by_size[args.small], by_size[args.large]
            print(f"RATIO {what} with {args.large} vs {args.small} finished plans: "
                  f"{large:.2f} / {small:.2f} ms = {large / small:.2f}x (goal ~1.0x)")
    finally:
        for site in sites:
            site.close()
        with admin.connect() as c:
            for name in names.values():
                if args.keep:
                    print(f"kept the database: {PG}/{name}")
                    continue
                c.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


if __name__ == "__main__":
    main()
