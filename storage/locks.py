"""Fleet-wide "one at a time" without a singleton: a Postgres advisory lock taken without
waiting and held by its own transaction for as long as the holder works.

A holder that dies — SIGKILL, a lost network, a crashed host — loses its connection and
with it the lock, so the next process to ask gets it: nobody has to notice the death.
SQLite (embedded mode) has one process, which always holds it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import func, select, text

from storage.db import Database
from storage.exceptions import translated


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(f"conclave:{name}".encode()).digest()[:8], "big", signed=True)


@contextmanager
def exclusive(db: Database, name: str, *, stalled_after: float) -> Iterator[bool]:
    """Yield True while this process holds the fleet-wide lock ``name``, False when another
    process holds it (no waiting). The lock lasts until the block ends.

    A holder that stops without dying (SIGSTOP, a long pause, a partition that keeps the
    socket open) would keep the lock: its transaction is then idle, and Postgres ends the
    session after ``stalled_after`` seconds idle (``idle_in_transaction_session_timeout``),
    releasing the lock. The work the lock guards must be safe to run twice (it is an
    economy, not the safety: the reconciler's sends are fenced by enqueue marks)."""
    if db.dialect != "postgresql":
        yield True
        return
    with translated(), db.engine.connect() as conn, conn.begin():
        conn.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {max(1, int(stalled_after * 1000))}"))
        yield bool(conn.scalar(select(func.pg_try_advisory_xact_lock(lock_key(name)))))
