"""The live meeting in a terminal: who is speaking, their words as they stream,
k/N done, and each finished contribution printed in full as it lands.

Streamed chunks come from the bus (fast, may be lost); everything printed as
final comes from the database (the record), so a lost chunk never shows wrong text.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.markdown import Markdown
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from orchestrator.bus import drain
from orchestrator.client import Conclave
from orchestrator.views import PhaseView, PlanView

TITLES = {
    "opening": "Opening", "turn": "Round {round}", "round_summary": "Round {round} summary",
    "final_summary": "Final summary", "expert": "{key}", "divergence": "Divergence check",
    "debate": "Debate", "synthesis": "Synthesis",
}
STATUS_STYLE = {"completed": "green", "failed": "red", "cancelled": "yellow", "skipped": "dim",
                "running": "cyan", "pending": "dim"}


def phase_title(p: PhaseView) -> str:
    title = TITLES.get(p.kind, p.kind).format(round=p.round, key=p.key)
    return f"{title} · {p.expert}" if p.expert else title


class MeetingView:
    def __init__(self, console: Console, conclave: Conclave, plan_id: str, *, poll: float = 0.3) -> None:
        self.console = console
        self.conclave = conclave
        self.plan_id = plan_id
        self.poll = poll
        self.streams: dict[str, str] = {}
        self.printed: set[str] = set()

    def follow(self) -> PlanView:
        from rich.live import Live

        sub = self.conclave.subscribe(self.plan_id)
        view = self.conclave.get(self.plan_id)
        self.console.print(Rule(f"[bold]{view.title}[/bold]"))
        try:
            with Live(self._render(view), console=self.console, refresh_per_second=8, transient=True) as live:
                next_poll = 0.0
                while True:
                    for msg in drain(sub, 0.1):
                        self._on_message(msg)
                    if time.monotonic() >= next_poll:
                        view = self.conclave.get(self.plan_id)
                        self._print_finished(view)
                        next_poll = time.monotonic() + self.poll
                        if view.final:
                            break
                    live.update(self._render(view))
        finally:
            sub.close()
        self._print_finished(view)
        self._print_outcome(view)
        return view

    def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") == "chunk":
            key = str(msg.get("phase"))
            self.streams[key] = self.streams.get(key, "") + str(msg.get("text", ""))

    def _print_finished(self, view: PlanView) -> None:
        for p in view.phases:
            if p.key in self.printed or p.status in ("pending", "running"):
                continue
            self.printed.add(p.key)
            self.streams.pop(p.key, None)
            if p.kind == "divergence":
                text = self.conclave.phase_text(self.plan_id, p.key) or ""
                self.console.print(Text(f"⚖  divergence check ({p.key}): {text.strip()[:200]}", style="magenta"))
                continue
            if p.status == "completed":
                text = self.conclave.phase_text(self.plan_id, p.key) or ""
                note = " [yellow](stream broke: partial text)[/yellow]" if p.truncated else ""
                style = "bold blue" if p.kind in ("opening", "round_summary", "final_summary", "synthesis") else "bold"
                self.console.print(Panel(Markdown(text), title=f"[{style}]{phase_title(p)}[/]{note}",
                                         title_align="left", border_style=STATUS_STYLE[p.status]))
            elif p.status == "failed":
                self.console.print(Text(f"✗ {phase_title(p)} — missing: {p.error_code}: {p.error}", style="red"))
            elif p.status == "cancelled":
                self.console.print(Text(f"■ {phase_title(p)} — cancelled", style="yellow"))

    def _render(self, view: PlanView) -> Group:
        running = [p for p in view.phases if p.status == "running"]
        header = Text.assemble(
            (f"{view.done}/{len(view.phases)} done", "bold"), "  ·  ",
            (f"{view.usage.total_tokens:,} tokens" + (" (est.)" if view.usage.estimated else ""), "dim"), "  ·  ",
            ("speaking: " + (", ".join(p.expert or p.key for p in running) or "—"), "cyan"))
        panels: list[Any] = [header]
        for p in running:
            tail = self.streams.get(p.key, "")[-600:]
            panels.append(Panel(Text(tail or "…", overflow="fold"), title=f"[cyan]{phase_title(p)}[/cyan] ▌",
                                title_align="left", border_style="cyan", height=min(10, 3 + tail.count("\n") + len(tail) // 90)))
        return Group(*panels)

    def _print_outcome(self, view: PlanView) -> None:
        style = {"completed": "bold green", "cancelled": "bold yellow"}.get(view.status, "bold red")
        usage = f"{view.usage.total_tokens:,} tokens" + (" (estimated)" if view.usage.estimated else "")
        self.console.print(Rule(f"[{style}]{view.status}[/] · {view.done}/{len(view.phases)} phases · {usage}"))
        if view.error and view.status != "completed":
            self.console.print(Text(view.error, style="red"))
