"""Sampling a benchmark's worker with py-spy (``pip install py-spy``, in the dev extra), and
reading the samples back as shares of the worker's busy time.

``Sampler(pid, path)`` runs ``py-spy record --gil --format raw --threads --nonblocking`` on a
process (without pausing it) until :meth:`Sampler.stop`: each sample is the stack of the thread
holding the GIL, so the samples approximate where the process spends CPU in Python (a thread
blocked in a read, or in C code that released the GIL, is not sampled). :func:`summary` reads
the collapsed stacks and says which source files and functions the samples were in (inclusive:
the function or anything it called) and where they ended (self), as shares of all samples.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("--profile needs py-spy: pip install py-spy (it is in the dev extra)")
    return found


class Sampler:
    def __init__(self, pid: int, path: Path, rate: int = 100) -> None:
        self.path = path
        self.proc = subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                                      "--gil", "--threads", "--nonblocking", "-o", str(path)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> Path:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
        self.proc.wait(timeout=60)
        return self.path


def _frame(frame: str) -> tuple[str, str]:
    """``function (path:line)`` → (``function (file)``, ``package/file``): lines of one
    function count together."""
    name, _, where = frame.partition(" (")
    path = Path(where.rsplit(":", 1)[0].rstrip(")"))
    return f"{name} ({path.name})", f"{path.parent.name}/{path.name}"


def summary(path: Path, top: int = 25) -> list[str]:
    inclusive: Counter[str] = Counter()
    files: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")[1:]]  # the first is the thread
        total += n
        for f in {f for f, _ in frames}:
            inclusive[f] += n
        for f in {f for _, f in frames}:
            files[f] += n
        if frames:
            own[frames[-1][0]] += n
    if not total:
        return ["no samples"]
    lines = [f"{total} samples holding the GIL; inclusive share by source file:"]
    lines += [f"  {100 * n / total:5.1f} %  {f}" for f, n in files.most_common(top)]
    lines.append("inclusive share by function (the function and what it called):")
    lines += [f"  {100 * n / total:5.1f} %  {f}" for f, n in inclusive.most_common(top)]
    lines.append("self share (where the samples ended):")
    lines += [f"  {100 * n / total:5.1f} %  {f}" for f, n in own.most_common(top)]
    return lines


def shares(path: Path, rules: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """Each sample counted once, under the first rule one of whose strings occurs in its
    stack (thread name included); the rest is "other"."""
    counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        counts[next((name for name, keys in rules if any(k in stack for k in keys)), "other")] += int(count)
    if not total:
        return ["no samples"]
    return [f"  {100 * n / total:5.1f} %  {name}" for name, n in counts.most_common()]
