"""``conclave run examples/board-human.yaml`` at a terminal, embedded (no services): the person
at the terminal is asked for their turn in each round where the meeting streams, then for their
decision on the draft — sent back once with a note, then the revision approved. Driven through a
pseudo-terminal, as a person types; the embedded SQLite file holds what they did afterwards."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage import connect, outbox, plans
from storage.status import PhaseStatus, PlanStatus
from tests.conftest import ROOT


class Terminal:
    """A subprocess on a pseudo-terminal: read what it shows, type what a person types."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
        env.update({"TERM": "dumb", "COLUMNS": "120", "LINES": "50", "PYTHONUNBUFFERED": "1"})
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(args, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.seen = b""
        self.at = 0  # where the next expectation starts reading

    def expect(self, pattern: bytes, timeout: float = 90) -> bytes:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.compile(pattern).search(self.seen, self.at)
            if m:
                self.at = m.end()
                return m.group(0)
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the process ended and closed the terminal
                    if self.proc.poll() is not None:
                        break
        raise AssertionError(f"{pattern!r} never shown; the terminal's last words:\n"
                             f"{self.seen[-3000:].decode(errors='replace')}")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(60)
        finally:
            os.close(self.master)


@pytest.mark.slow
def test_embedded_run_asks_the_person_at_the_terminal_for_their_turns_and_their_approval(tmp_path: Path) -> None:
    term = Terminal([sys.executable, "-m", "orchestrator.cli", "run", str(ROOT / "examples" / "board-human.yaml")],
                    tmp_path)
    try:
        term.expect(rb"Your turn, You \xc2\xb7 r1\.you \xc2\xb7 answer by \d{4}-\d\d-\d\d \d\d:\d\d UTC")
        term.expect(rb"Position:")  # asked for the line that records their view
        term.expect(rb"> ")
        term.type("We built Ledgerly on a flat price.\nPosition: CONDITIONAL - only with a pilot first\n.\n")
        term.expect(rb"r1\.you answered")
        term.expect(rb"Your turn, You \xc2\xb7 r2\.you")
        term.expect(rb"> ")
        term.type("Round two: a pilot with two segments.\nPosition: CONDITIONAL - the pilot must keep churn flat\n.\n")
        term.expect(rb"r2\.you answered")
        term.expect(rb"\[a\]pprove the draft, \[s\]end it back with a note")
        term.type("s\n")
        term.expect(rb"note: ")
        term.type("Lead with the pilot and its churn threshold.\n")
        term.expect(rb"sent back for a revision")
        term.expect(rb"\[a\]pprove the revision", timeout=120)
        term.type("a\n")
        term.expect(rb"approved")
        term.expect(rb"completed \xc2\xb7 11/11 phases")
    finally:
        code = term.close()
    assert code == 0, term.seen[-2000:].decode(errors="replace")

    db = connect(f"sqlite:///{tmp_path / '.conclave' / 'conclave.db'}")
    try:
        with db.engine.connect() as c:  # closed before the next read: SQLite takes its lock per transaction
            [listed] = c.exec_driver_sql("SELECT id FROM plans").all()
        state = plans.load_state(db, listed[0])
        assert state.plan.status == PlanStatus.COMPLETED
        by_key = state.by_key()
        assert by_key["r1.you"].status == by_key["r2.you"].status == PhaseStatus.COMPLETED
        assert by_key["final.revised"].meta["note"] == "Lead with the pilot and its churn threshold."
        kinds = [e.type for e in outbox.list_events(db, state.plan.id)]
        assert kinds.count("input_requested") == kinds.count("input_received") == 2
        assert kinds.count("awaiting_approval") == 2 and kinds.count("sent_back") == kinds.count("approved") == 1
    finally:
        db.dispose()
