"""The person at this terminal: ``conclave run`` (and ``resume --follow``, ``watch``) at a
terminal asks them for their seat's answer, and for their decision on a draft, right where
the meeting streams — embedded or on a cluster, the same calls (:meth:`Conclave.answer
<orchestrator.client.conclave.Conclave.answer>`, ``approve``, ``send_back``, ``cancel``).

Nothing here holds the plan: the seat waits in the database whatever this terminal does. A
blank answer leaves the seat to someone else (the page, ``conclave answer``, the API); Ctrl-D
the same. A refusal (the seat was answered elsewhere, its time is up) is said and the meeting
goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from orchestrator.client.conclave import Conclave
from orchestrator.core.errors import ConclaveError
from orchestrator.plan.views import PhaseView, PlanView

END = "."  # a line holding only this ends a multi-line answer


class TerminalPerson:
    """Asks at the terminal; ``read_line`` is the input (``Console.input`` by default), which
    returns None at the end of input."""

    def __init__(self, console: Console, read_line: Callable[[str], str | None] | None = None) -> None:
        self.console = console
        self._read = read_line or self._console_line
        self.asked: set[tuple[str, int]] = set()  # (seat key, attempt) already put to this person
        self.decided: set[str] = set()  # drafts already put to this person

    def _console_line(self, prompt: str) -> str | None:
        try:
            return self.console.input(escape(prompt))
        except EOFError:
            return None

    def take_turns(self, conclave: Conclave, view: PlanView) -> bool:
        """Ask for each seat waiting now that this terminal has not asked about; True when
        something was stored (the caller reads the plan again)."""
        acted = False
        for seat in [p for p in view.phases if p.status == "awaiting_input"]:
            if (seat.key, seat.attempt) in self.asked:
                continue
            self.asked.add((seat.key, seat.attempt))
            said = self._ask_seat(view, seat)
            if said is None:
                self.console.print(Text(f"left for someone else: conclave answer {view.id} {seat.key} TEXT "
                                        "(or the plan page)", style="dim"))
                continue
            acted |= self._store(partial(conclave.answer, view.id, seat.key, said), f"{seat.key} answered")
        if view.status == "awaiting_approval" and view.approval and view.approval.get("phase") not in self.decided:
            self.decided.add(str(view.approval.get("phase")))
            acted |= self._decide(conclave, view)
        return acted

    def _ask_seat(self, view: PlanView, seat: PhaseView) -> str | None:
        due = f" · answer by {datetime.fromisoformat(seat.due_at):%Y-%m-%d %H:%M} UTC" if seat.due_at else ""
        self.console.print(Panel(Text(seat.asked or "(your turn)"), title=f"[bold yellow]Your turn, "
                                 f"{escape(seat.expert or '')}[/] · {escape(seat.key)}{escape(due)}",
                                 title_align="left", border_style="yellow"))
        self.console.print(Text(f"Write your answer; end it with a line holding only '{END}' (a blank first line "
                                "leaves it for someone else).", style="dim"))
        lines: list[str] = []
        while True:
            line = self._read("> ")
            if line is None or (line.strip() == END):
                break
            if not lines and not line.strip():
                return None
            lines.append(line)
        text = "\n".join(lines).strip()
        return text or None

    def _decide(self, conclave: Conclave, view: PlanView) -> bool:
        approval = view.approval or {}
        what = "the revision" if approval.get("revision") else "the draft"
        self.console.print(Text(f"The answer is written as a draft ({approval.get('phase')}): it goes out only once "
                                "it is approved.", style="bold yellow"))
        while True:
            choice = (self._read(f"[a]pprove {what}, [s]end it back with a note"
                                 + ", [c]ancel the plan, "
                                 "or Enter to leave it waiting: ") or "").strip().lower()
            if choice in ("", "l"):
                self.console.print(Text(f"left waiting: conclave approve {view.id} | conclave send-back {view.id} "
                                        "NOTE", style="dim"))
                return False
            if choice in ("a", "approve"):
                return self._store(lambda: conclave.approve(view.id), "approved")
            if choice in ("c", "cancel"):
                return self._store(lambda: conclave.cancel(view.id), "cancel requested")
            if choice in ("s", "send back", "send-back"):
                note = (self._read("note: ") or "").strip()
                if note:
                    return self._store(partial(conclave.send_back, view.id, note), "sent back for a revision")

    def _store(self, call: Callable[[], Any], done: str) -> bool:
        try:
            call()
        except ConclaveError as exc:
            self.console.print(Text(f"not stored: [{exc.code}] {exc.message}", style="red"))
            return False
        self.console.print(Text(f"✓ {done}", style="green"))
        return True
