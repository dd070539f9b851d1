"""Every process of the fleet, of this release and of the next, computes the same advisory-lock
key for a name, or "one at a time" is one per process: sweeps overlap and a tenant's limits
can be exceeded through different API processes (issue 18; survivors of the systematic
mutation run, docs/mutation.md). The locks themselves contend in tests/integration."""

from __future__ import annotations

import os
import subprocess
import sys

from storage import connect, locks, tenancy

# Pinned: a release that changed a key would not exclude the previous release's workers
# during a rolling upgrade.
PINNED = {"reconciler": 2345828861684659645, "admit:acme": 5008602260312079440}


def test_keys_are_pinned_signed_64_bit_integers() -> None:
    assert {name: locks.lock_key(name) for name in PINNED} == PINNED
    assert tenancy.lock_key("acme") == PINNED["admit:acme"]
    keys = {locks.lock_key(n) for n in ("reconciler", "Reconciler", "admit:acme", "admit:acme2", "", "acme")}
    assert len(keys) == 6
    assert all(-(2**63) <= k < 2**63 for k in keys) and any(k < 0 for k in map(locks.lock_key, map(str, range(64))))


def test_another_process_computes_the_same_keys() -> None:
    code = "from storage import locks, tenancy; print(locks.lock_key('reconciler'), tenancy.lock_key('acme'))"
    seen = set()
    for seed in ("1", "2"):  # str hashes differ between these two processes; the keys must not
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                             timeout=60)
        seen.add(out.stdout.split()[0] + " " + out.stdout.split()[1])
    assert seen == {f"{PINNED['reconciler']} {PINNED['admit:acme']}"}


def test_embedded_mode_always_holds_the_lock(sqlite_url: str) -> None:
    db = connect(sqlite_url)  # a copy of the migrated template
    try:
        with locks.exclusive(db, "reconciler", stalled_after=1.0) as mine, \
                locks.exclusive(db, "reconciler", stalled_after=1.0) as again:
            assert mine is True and again is True  # one process: nobody else to exclude
    finally:
        db.dispose()
