"""An eval's progress in a terminal: per arm, done/total, running, accuracy so far, tokens per item.

Everything shown is read from the stored plans as they finish (the harness's view of them),
so a run resumed after an interruption shows the items it found finished as done (reused).
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator.evaluation.harness import ArmStats
from orchestrator.evaluation.statistics import wilson_interval


class LiveProgress:
    def __init__(self, console: Console, name: str) -> None:
        self.name = name
        self.console = console
        self.live = Live(Text(f"eval {name}: starting…"), console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> LiveProgress:
        self.live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.live.stop()
        if not self.console.is_terminal:
            self.console.line()  # the last frame was written without its line's end

    def update(self, stats: list[ArmStats], note: str = "") -> None:
        self.live.update(render(self.name, stats, note))


def render(name: str, stats: list[ArmStats], note: str = "") -> Group:
    table = Table(title=f"eval {name}", title_justify="left", box=None, padding=(0, 1), pad_edge=False,
                  header_style="bold")
    for header in ("arm", "done", "running", "accuracy [95% CI]", "tokens/item", "failed"):
        table.add_column(header, justify="left" if header == "arm" else "right", no_wrap=True)
    for s in stats:
        low, high = wilson_interval(s.correct, s.done)
        accuracy = "-" if s.accuracy is None else f"{100 * s.accuracy:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"
        table.add_row(s.name, f"{s.done}/{s.total}", str(s.running), accuracy,
                      f"{s.tokens / s.done:,.0f}" if s.done else "-", str(s.failed))
    parts: list[Table | Text] = [table]
    reused = sum(s.reused for s in stats)
    if reused:
        parts.append(Text(f"{reused} plan(s) had finished before this run: read, not run again", style="dim"))
    if note:
        parts.append(Text(note, style="yellow"))
    return Group(*parts)
