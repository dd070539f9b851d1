"""Run a document's code blocks as a reader would, one after another in one terminal.

The runnable blocks of a document (:mod:`tests.doc_blocks`) become one bash script, in
document order: shell blocks as written, Python blocks fed to ``python`` (the one on
``PATH``, i.e. the venv's), so a variable a block exports, a directory it enters and a process
it starts in the background are there for the blocks after it. ``set -e -o pipefail``: the
first command that fails stops the session, and ``curl`` answers an HTTP error as a failure
(``--fail-with-body``: the body is still shown), so a request that a document shows
succeeding must succeed.

Only literal strings the test names are substituted (the test cluster's database, Redis
database and port, where a document shows the default ones); each must occur, so the table
cannot go stale. Each block's output (stdout and stderr, as a terminal shows them) is kept
apart. Everything the session started is stopped at the end, by its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.doc_blocks import PYTHON, Block

_PY_END = "CONCLAVE_DOC_PYTHON_BLOCK"


@dataclass(frozen=True)
class Ran:
    """A block that ran: its output, and whether it completed."""

    block: Block
    output: str
    completed: bool


@dataclass(frozen=True)
class Session:
    """The outcome of running a document's blocks."""

    ran: list[Ran]
    returncode: int

    def output(self, block: Block) -> str:
        return next(r.output for r in self.ran if r.block == block)

    def failure(self) -> str:
        """Which block stopped the session, with its output (for an assertion message)."""
        failed = next((r for r in self.ran if not r.completed), None)
        if failed is None:
            return f"the session exited {self.returncode} after its last block"
        return f"{failed.block.where} failed (exit {self.returncode}):\n{failed.block.text}\n--- output ---\n" \
               f"{failed.output[-4000:]}"


def substitute(text: str, substitutions: Mapping[str, str]) -> str:
    for literal, value in substitutions.items():
        text = text.replace(literal, value)
    return text


def script(chosen: Sequence[Block], out: Path, substitutions: Mapping[str, str]) -> str:
    """The bash script that runs ``chosen`` in order, each block's output into ``out``."""
    lines = ["set -e -o pipefail", 'curl() { command curl --fail-with-body "$@"; }']
    for n, block in enumerate(chosen):
        lines.append(f"exec >{out / f'{n}.out'} 2>&1")
        text = substitute(block.text, substitutions)
        if block.lang in PYTHON:
            assert _PY_END not in text
            lines += [f"python - <<'{_PY_END}'", text.rstrip("\n"), _PY_END]
        else:
            lines.append(text.rstrip("\n"))
        lines.append(f": >{out / f'{n}.done'}")
    return "\n".join(lines) + "\n"


def run(chosen: Sequence[Block], *, cwd: Path, env: Mapping[str, str], out: Path,
        substitutions: Mapping[str, str], timeout: float = 300) -> Session:
    """Run ``chosen`` in one bash process under ``cwd`` with exactly ``env``; stop whatever
    it left running (a worker started with ``&``) before returning."""
    text = "".join(b.text for b in chosen)
    unused = [literal for literal in substitutions if literal not in text]
    assert not unused, f"substitutions for text the documents no longer hold: {unused}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "session.sh"
    path.write_text(script(chosen, out, substitutions))
    proc = subprocess.Popen(["bash", str(path)], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        returncode = -1
    finally:
        stop_group(proc)
    ran = []
    for n, block in enumerate(chosen):
        output = out / f"{n}.out"
        if output.exists():
            ran.append(Ran(block, output.read_text(errors="replace"), (out / f"{n}.done").exists()))
    return Session(ran, returncode)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the session's process group (the shell and all it started), SIGKILL what lingers."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            continue
        break
    proc.wait(timeout=10)
