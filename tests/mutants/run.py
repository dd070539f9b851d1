"""``make mutants``: every invariant in DESIGN.md is broken on purpose, and the suite must notice.

For each mutation of :mod:`tests.mutants.catalogue` the runner copies the tree to a
scratch directory, applies the mutation there, and runs the mutation's tests with
the scratch copy first on ``PYTHONPATH`` and as the working directory — so the
mutant is what the test process imports, and what the worker, API and CLI
subprocesses those tests start import too (they inherit both). The project's
editable install resolves after ``PYTHONPATH``; a preflight in every mutant's test process
checks that the mutated module really is imported from there, mutated.

Mutations run ``--jobs`` at a time (3 by default: the work is mostly waiting on worker
subprocesses and timers), each in its own scratch copy and on its own Redis database
(``CONCLAVE_TEST_REDIS_DB`` plus the job's slot); each test process copies its Postgres
database from the template ``tests/conftest.py`` migrates once, so no mutation migrates.

A mutation is caught when every test it names fails on the mutant (a test file
named whole: at least one of its tests) — the catalogue says which tests catch what,
and the table printed at the end shows it. The named tests must pass on an unmutated
copy first (the baseline), or a failure would prove nothing. ``--baseline-from FILE``
takes that from a JUnit report instead (``make test`` writes one: CI runs ``make mutants``
right after it) when the report's run started after the tree's last change and every
named test passed in it; otherwise the baseline runs as before, saying why.

It exits 1 when a mutation survives (any named test passes) or cannot be run, and 2
— before anything runs, naming what to fix — when an invariant of DESIGN.md has no
mutation or the catalogue is stale (an ``old`` snippet that does not occur exactly
once, an unknown invariant id, a named test that pytest does not collect).

Usage::

    python -m tests.mutants.run                 # validate, baseline, every mutation
    python -m tests.mutants.run --baseline-from .conclave/test-results.xml   # make test's run as the baseline
    python -m tests.mutants.run --check         # validate the catalogue only
    python -m tests.mutants.run --only fence-dropped --only count-every-attempt
    python -m tests.mutants.run --jobs 1        # one mutation at a time
    python -m tests.mutants.run --list
    python -m tests.mutants.run --table         # rewrite docs/invariants.md from the catalogue
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tests import mutant_preflight as preflight
from tests.mutants.catalogue import MUTATIONS
from tests.mutants.catalogue_types import Mutation
from tests.mutants.invariants_doc import DESIGN, invariant_ids, write

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                                ".hypothesis", ".conclave", "*.egg-info", "*.pyc", "mutmut-*", "mutants")
TIMEOUT = 900.0  # per mutation; pytest-timeout bounds each test well before this
JOBS = 3  # mutations at a time (on 2 cores: most of a mutation is waiting on subprocesses and timers)
REDIS_DB = int(os.environ.get("CONCLAVE_TEST_REDIS_DB", "11"))  # job k uses REDIS_DB + k


def problems(root: Path, mutations: Sequence[Mutation], *, complete: bool = True) -> list[str]:
    """Everything stale or missing in the catalogue, as messages that say what to fix.
    ``complete`` False checks only the mutations given (``--only``): not whether every
    invariant has one."""
    out: list[str] = []
    ids = invariant_ids((root / DESIGN).read_text())
    if not ids:
        out.append(f"{DESIGN}: no invariant rows found (rows must start with '| I<n> |')")
    if len(set(ids)) != len(ids):
        out.append(f"{DESIGN}: duplicate invariant ids {sorted(i for i in ids if ids.count(i) > 1)}")
    names = [m.name for m in mutations]
    for name in sorted({n for n in names if names.count(n) > 1}):
        out.append(f"mutation {name!r} is defined twice")
    for inv in ids if complete else ():
        if not any(m.invariant == inv for m in mutations):
            out.append(f"invariant {inv} of {DESIGN} has no mutation in tests/mutants/catalogue/")
    for m in mutations:
        where = f"mutation {m.name!r} ({m.file})"
        if m.invariant not in ids:
            out.append(f"{where}: invariant {m.invariant!r} is not in {DESIGN}'s table")
        path = root / m.file
        if not path.is_file():
            out.append(f"{where}: no such file")
            continue
        source = path.read_text()
        if not m.edits:
            out.append(f"{where}: no edits")
        for i, edit in enumerate(m.edits, 1):
            n = source.count(edit.old)
            if n != 1:
                first = edit.old.strip().splitlines()[0] if edit.old.strip() else repr(edit.old)
                out.append(f"{where}: edit {i}: `old` occurs {n} times, expected exactly once — "
                           f"re-anchor it (starts with: {first!r})")
            if edit.old == edit.new:
                out.append(f"{where}: edit {i}: `new` equals `old`")
        if not m.tests:
            out.append(f"{where}: names no tests")
        for node in m.tests:
            out.extend(f"{where}: {msg}" for msg in _node_problems(root, node))
    return out


def uncollected(root: Path, mutations: Sequence[Mutation]) -> list[str]:
    """Named test ids pytest does not collect (e.g. a parametrisation that changed)."""
    nodes = sorted({t for m in mutations for t in m.tests})
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0",
                          *nodes], cwd=root, capture_output=True, text=True, timeout=300)
    if res.returncode == 0:
        return []
    lines = [line for line in (res.stdout + res.stderr).splitlines() if "not found" in line or "ERROR" in line]
    return [f"pytest does not collect a named test: {line.strip()}" for line in lines] or [res.stdout[-2000:]]


def _node_problems(root: Path, node: str) -> list[str]:
    file, _, rest = node.partition("::")
    path = root / file
    if not path.exists():
        return [f"test {node!r}: no such file"]
    if rest:
        func = rest.split("::")[-1].split("[")[0]
        if not re.search(rf"^\s*def {re.escape(func)}\(", path.read_text(), re.MULTILINE):
            return [f"test {node!r}: no function {func!r} in {file}"]
    return []


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    verdict: str  # caught (every named test failed) | survived | error
    seconds: float
    failed: tuple[str, ...]  # the tests that failed on the mutant
    detail: str = ""


def scratch_copy(root: Path, into: Path) -> Path:
    dest = into / "tree"
    shutil.copytree(root, dest, ignore=IGNORE, symlinks=True)
    return dest


def apply(tree: Path, m: Mutation) -> None:
    path = tree / m.file
    source = path.read_text()
    for edit in m.edits:
        assert source.count(edit.old) == 1, f"{m.name}: stale anchor (run --check)"
        source = source.replace(edit.old, edit.new)
    path.write_text(source)


def env_for(tree: Path, slot: int = 0) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CONCLAVE_TEST_REDIS_DB"] = str(REDIS_DB + slot)
    return env


class Slots:
    """The job slots of a parallel run: a running mutation holds one, and with it its Redis
    database, so no two mutations share one."""

    def __init__(self, n: int) -> None:
        self._free = list(range(n))
        self._cond = threading.Condition()

    @contextmanager
    def taken(self) -> Iterator[int]:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._free))
            slot = self._free.pop(0)
        try:
            yield slot
        finally:
            with self._cond:
                self._free.append(slot)
                self._cond.notify()


def mutant_env(tree: Path, m: Mutation) -> dict[str, str]:
    """What :mod:`tests.mutant_preflight` checks in the mutant's test process: that ``m.file``
    is imported from ``tree`` and holds the mutant (nothing for a file that is not a module)."""
    if not m.file.endswith(".py"):
        return {}
    module = m.file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    snippet = next((e.new for e in m.edits if e.new.strip()), "")
    return {"CONCLAVE_MUTANT_TREE": str(tree), "CONCLAVE_MUTANT_MODULE": module, "CONCLAVE_MUTANT_SNIPPET": snippet}


def run_tests(tree: Path, tests: Iterable[str], *, junit: Path, timeout: float = TIMEOUT, slot: int = 0,
              workers: int = 1, extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``tests`` in ``tree`` (on ``workers`` pytest-xdist workers when more than one), with
    the preflight plugin (:mod:`tests.mutant_preflight`), which ``extra_env`` may switch on."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.mutant_preflight",
           f"--junitxml={junit}", "-n", str(workers if workers > 1 else 0), *tests]  # 0: no xdist (pyproject's -n auto)
    try:
        res = subprocess.run(cmd, cwd=tree, env={**env_for(tree, slot), **(extra_env or {})}, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f}s"
    return res.returncode, (res.stdout + res.stderr)[-4000:]


def failed_tests(junit: Path) -> tuple[str, ...]:
    """Node ids (``tests/x/test_y.py::name[param]``) of the tests that failed or errored."""
    if not junit.exists():
        return ()
    return tuple(node for node, outcome in _cases(ET.parse(junit).getroot()) if outcome == "failed")


def _cases(report: ET.Element) -> Iterator[tuple[str, str]]:
    """Each test case of a JUnit report: its node id and passed | failed | skipped."""
    for case in report.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        failed = case.find("failure") is not None or case.find("error") is not None
        outcome = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
        yield f"{module}.py::{case.get('name')}", outcome


def recorded_baseline(root: Path, mutations: Sequence[Mutation], report: Path) -> str | None:
    """Why the JUnit ``report`` cannot stand for the baseline (None: it can): it must be of a
    run that started after every file of the tree (as the scratch copies take it) last
    changed, and every named test must have passed in it (a file named whole: none of its
    tests failed or was skipped, and at least one ran)."""
    if not report.is_file():
        return f"no report at {report}"
    try:
        top = ET.parse(report).getroot()
        suite = top if top.tag == "testsuite" else top.find("testsuite")
        started = datetime.fromisoformat(suite.get("timestamp", "") if suite is not None else "").timestamp()
    except (ET.ParseError, ValueError) as exc:
        return f"{report} is not a JUnit report with a start time ({exc})"
    assert suite is not None  # fromisoformat("") raised otherwise
    changed = max(path.stat().st_mtime for path in _tree_files(root))
    if changed >= started:
        return f"the tree changed after the run that wrote {report} started"
    outcomes = list(_cases(suite))
    for node in sorted({t for m in mutations for t in m.tests}):
        mine = [outcome for case, outcome in outcomes if _under(case, node)]
        if not mine or any(outcome != "passed" for outcome in mine):
            return f"{node} did not pass in {report} ({', '.join(mine) or 'not run'})"
    return None


def _tree_files(root: Path) -> Iterator[Path]:
    """The files :func:`scratch_copy` takes."""
    for directory, dirs, files in os.walk(root):
        ignored = IGNORE(directory, [*dirs, *files])
        dirs[:] = [d for d in dirs if d not in ignored]
        yield from (Path(directory, f) for f in files if f not in ignored)


def missed(named: Sequence[str], failed: Sequence[str]) -> list[str]:
    """The named tests (or test files) under which nothing failed."""
    return [n for n in named if not any(_under(f, n) for f in failed)]


def _under(case: str, named: str) -> bool:
    """Whether the test ``case`` is the named test, one of its parametrisations, or in the named file."""
    return case == named or case.startswith(named + ("[" if "::" in named else "::"))


def run_one(root: Path, m: Mutation, slot: int = 0) -> Outcome:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{m.name}-") as tmp:
        tree = scratch_copy(root, Path(tmp))
        apply(tree, m)
        code, output = run_tests(tree, m.tests, junit=Path(tmp) / "junit.xml", slot=slot,
                                 extra_env=mutant_env(tree, m))
        failed = failed_tests(Path(tmp) / "junit.xml")
    seconds = time.monotonic() - started
    if code == 0:
        return Outcome(m, "survived", seconds, ())
    if code == -1:
        return Outcome(m, "error", seconds, failed, f"the tests hung until the runner's timeout:\n{output}")
    if code == preflight.EXIT_CODE:
        return Outcome(m, "error", seconds, (), next((ln for ln in output.splitlines() if "preflight:" in ln), output))
    if code != 1:
        return Outcome(m, "error", seconds, failed, f"pytest exit code {code}:\n{output}")
    passed = missed(m.tests, failed)
    if passed:  # every test the catalogue names must catch the mutant, or the catalogue says too much
        return Outcome(m, "survived", seconds, failed, f"these named tests passed on the mutant: {passed}")
    return Outcome(m, "caught", seconds, failed)


def baseline(root: Path, mutations: Sequence[Mutation], jobs: int = 1) -> tuple[bool, str, float]:
    """Run every test the catalogue names on the unmutated tree: they must pass there,
    or a 'caught' would mean nothing. On ``jobs`` xdist workers (each on its slot's Redis
    database)."""
    tests = sorted({t for m in mutations for t in m.tests})
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutant-baseline-") as tmp:
        tree = scratch_copy(root, Path(tmp))
        code, output = run_tests(tree, tests, junit=Path(tmp) / "junit.xml", workers=min(jobs, len(tests)))
    return code == 0, output, time.monotonic() - started


def run_all(mutations: Sequence[Mutation], jobs: int) -> list[Outcome]:
    """Every mutation, ``jobs`` at a time; each outcome printed as it lands, all returned
    in catalogue order. Those naming integration or e2e tests (worker subprocesses,
    timers) start first, so a long one does not run alone at the end."""
    slots = Slots(jobs)

    def one(m: Mutation) -> Outcome:
        with slots.taken() as slot:
            return run_one(ROOT, m, slot)

    done: dict[str, Outcome] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        heavy_first = sorted(mutations, key=lambda m: all(t.startswith("tests/unit/") for t in m.tests))
        for future in as_completed([pool.submit(one, m) for m in heavy_first]):
            o = future.result()
            done[o.mutation.name] = o
            print(f"  {o.mutation.name}: {o.verdict} ({o.seconds:.1f}s){' — ' + o.detail if o.detail else ''}",
                  flush=True)
    return [done[m.name] for m in mutations]


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [("mutation", "invariant", "tests", "result", "seconds")]
    for o in outcomes:
        tests = ", ".join(_short(t) for t in o.mutation.tests)
        rows.append((o.mutation.name, o.mutation.invariant, tests, o.verdict, f"{o.seconds:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _short(node: str) -> str:
    file, _, rest = node.partition("::")
    return f"{Path(file).stem}::{rest}" if rest else Path(file).stem


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants.run", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="validate the catalogue against the tree, run nothing")
    parser.add_argument("--list", action="store_true", help="list the mutations")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these mutations")
    parser.add_argument("--table", action="store_true",
                        help="rewrite docs/invariants.md (each invariant's mutations and tests) from the catalogue")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    parser.add_argument("--baseline-from", type=Path, metavar="JUNIT",
                        help="a JUnit report of a run of this tree (make test's) that stands for the baseline "
                             "when it started after the tree's last change and every named test passed in it")
    parser.add_argument("--jobs", type=int, default=JOBS, metavar="N",
                        help=f"mutations run at a time, each on its own Redis database (default {JOBS})")
    args = parser.parse_args(argv)

    if args.table:
        print(f"wrote {write(ROOT, MUTATIONS).relative_to(ROOT)}")
        return 0
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:34} {m.invariant:4} {m.file:32} {m.why}")
        return 0
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    unknown = set(args.only) - {m.name for m in MUTATIONS}
    if unknown:
        print(f"unknown mutation(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    found = problems(ROOT, chosen, complete=not args.only)
    if not found:
        found = uncollected(ROOT, chosen)
    if found:
        print("The mutation catalogue is stale or incomplete:", file=sys.stderr)
        for p in found:
            print(f"  - {p}", file=sys.stderr)
        return 2
    ids = invariant_ids((ROOT / DESIGN).read_text())
    if not args.only:
        print(f"catalogue: {len(MUTATIONS)} mutations cover all {len(ids)} invariants of {DESIGN}")
    if args.check:
        return 0
    unusable = recorded_baseline(ROOT, chosen, args.baseline_from) if args.baseline_from else "not asked"
    if args.baseline_from and unusable is None:
        print(f"baseline: the catalogue's tests passed on this tree in {args.baseline_from}")
    elif not args.no_baseline:
        if args.baseline_from:
            print(f"baseline: run here, as {unusable}")
        ok, output, seconds = baseline(ROOT, chosen, args.jobs)
        if not ok:
            print(f"baseline: the catalogue's tests fail on the unmutated tree ({seconds:.0f}s):\n{output}",
                  file=sys.stderr)
            return 1
        print(f"baseline: the catalogue's tests pass on the unmutated tree ({seconds:.0f}s)")
    started = time.monotonic()
    outcomes = run_all(chosen, max(1, args.jobs))
    print()
    print(table(outcomes))
    bad = [o for o in outcomes if o.verdict != "caught"]
    total = sum(o.seconds for o in outcomes)
    print(f"\n{len(outcomes) - len(bad)}/{len(outcomes)} mutations caught in {time.monotonic() - started:.0f}s "
          f"({total:.0f}s of mutation time, {args.jobs} at a time)")
    for o in bad:
        print(f"NOT CAUGHT: {o.mutation.name} ({o.mutation.invariant}): {o.verdict} — {o.mutation.why}",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
