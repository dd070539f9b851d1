"""The live meeting in a terminal: who is speaking, their words as they stream,
k/N done, and each finished contribution printed in full as it lands.

Streamed chunks come from the bus (fast, may be lost); everything printed as
final comes from the database (the record), so a lost chunk never shows wrong
text. A stored event announced on the bus only makes the next database read
come sooner. Dynamic events — a divergence verdict, a debate inserted (or refused by
``max_debates``), an expert who went missing — are derived from stored phases
too, never from a bus message.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from orchestrator.briefing.documents import CitationView
from orchestrator.client.conclave import Conclave
from orchestrator.client.live_text import live_text
from orchestrator.core.bus import drain
from orchestrator.plan.spending import dollars, spent_text
from orchestrator.plan.views import EARLY_STOP, PhaseView, PlanView
from storage.status import PHASE_FINAL, PhaseStatus, PlanStatus

TITLES = {
    "opening": "Opening", "turn": "Round {round}", "round_summary": "Round {round} summary",
    "final_summary": "Final summary", "expert": "{key}", "divergence": "Divergence check",
    "debate": "Debate", "synthesis": "Synthesis", "decision": "Decision (tallied by code)",
    "review": "Review of round 1",
}
STATUS_STYLE = {PhaseStatus.COMPLETED: "green", PhaseStatus.FAILED: "red", PhaseStatus.CANCELLED: "yellow",
                PhaseStatus.SKIPPED: "dim", PhaseStatus.RUNNING: "cyan", PhaseStatus.PENDING: "dim",
                PhaseStatus.AWAITING_INPUT: "yellow"}
CHAIR_KINDS = ("opening", "round_summary", "final_summary", "synthesis")


def phase_title(p: PhaseView) -> str:
    title = TITLES.get(p.kind, p.kind).format(round=p.round, key=p.key)
    return f"{title} · {p.expert}" if p.expert else title


def readable(text: str) -> str:
    """Markdown joins single line breaks: keep each ``Position:`` line on a line of its own."""
    return re.sub(r"\n(?=[ \t>*_]*(?:Revised position|Position)\b)", "\n\n", text.strip())


def verdict_line(p: PhaseView, text: str, view: PlanView) -> list[Text]:
    """What a divergence check decided, and what the plan did about it."""
    try:
        verdict = json.loads(text[text.index("{"): text.rindex("}") + 1])
    except ValueError:
        return [Text(f"⚖  {p.key}: no usable verdict — no debate", style="magenta")]
    method = " (lexical)" if verdict.get("method") == "lexical" else ""
    who = " and ".join(verdict.get("participants") or []) or "the experts"
    if not verdict.get("diverged"):
        return [Text(f"⚖  {p.key}{method}: no material disagreement — the plan goes on", style="magenta")]
    lines = [Text(f"⚖  {p.key}{method}: {who} disagree on: {verdict.get('topic', '')}", style="bold magenta")]
    group = f"debate-{p.key}"
    debaters = [d for d in view.phases if d.kind == "debate" and d.key.startswith(group + ".")]
    if debaters:
        waiting = [q.key for q in view.phases if any(d.key in q.depends_on for d in debaters)
                   and q.kind != "debate"]
        groups = len({d.key.rsplit(".", 1)[0] for d in view.phases if d.kind == "debate"})
        who_debates = " ↔ ".join(d.expert or d.key for d in debaters)
        rewired = f"; {', '.join(waiting)} now wait for it" if waiting else ""
        lines.append(Text(f"   ↳ debate inserted ({groups} so far): {who_debates}{rewired}", style="magenta"))
    else:
        lines.append(Text("   ↳ no debate: the plan's max_debates is reached", style="magenta"))
    return lines


def early_stop_line(view: PlanView) -> Text | None:
    """The rounds an early stop skipped, why, and the tokens that saved; None without one."""
    stop = view.early_stop
    if not stop:
        return None
    return Text(f"⏭ round(s) {', '.join(map(str, stop.get('rounds', [])))} skipped: {stop.get('reason')} "
                f"(about {stop.get('tokens_saved', 0):,} tokens saved)", style="magenta")


def decision_lines(view: PlanView) -> list[Text]:
    """The panel's decision in a line or two (protocol, answer, agreement, the chair's
    consistency), and what weakens it; empty for a plan that declares no answer."""
    lines = [Text(f"⚠ {w}", style="yellow") for w in view.warnings]
    d = view.decision
    if d is None:
        return lines
    chair = d.get("chair") or {}
    if d.get("protocol") == "chair":
        lines.append(Text(f"Decision (the chair): {chair.get('answer')}", style="bold"))
        return lines
    votes = d.get("votes") or []
    agree = next((len(c.get("voters") or []) for c in d.get("candidates") or [] if c.get("key") == d.get("key")), 0)
    answer = d.get("key") if d.get("key") is not None else "no answer"
    facts = [f"{agree} of {len(votes)} agree", f"margin {d.get('margin', 0):g}"]
    if d.get("abstentions"):
        facts.append(f"{d['abstentions']} abstained")
    if d.get("tie_break"):
        facts.append(f"tie broken by {d['tie_break']['by']}")
    if d.get("consensus"):
        facts.append("consensus reached" if d["consensus"]["reached"] else "no consensus")
    lines.append(Text(f"Decision ({d.get('protocol')}): {answer} — {', '.join(facts)}", style="bold"))
    if chair.get("failed"):
        lines.append(Text(f"⚠ the chair failed on every model ({chair['failed'].get('code')}): the decision record "
                          "is the result", style="yellow"))
    elif chair.get("matches") is False:
        lines.append(Text(f"✗ the chair's synthesis states {chair.get('answer')!r}, not the tally's answer: flagged",
                          style="red"))
    elif chair.get("matches"):
        lines.append(Text("✓ the chair's synthesis states the same answer", style="green"))
    return lines


def citation_lines(cited: Sequence[CitationView]) -> list[Text]:
    """A "Citations" list: each passage cited once, ``[ref] → title and headings`` (with how
    often it is cited), unresolved ones flagged in red; empty when nothing is cited."""
    if not cited:
        return []
    counts = Counter(c.ref for c in cited)
    first = {c.ref: c for c in reversed(cited)}
    unresolved = sum(1 for ref in counts if first[ref].unresolved)
    state = f"{unresolved} unresolved" if unresolved else "all resolved to passages of the briefing"
    lines = [Text(f"Citations ({len(counts)} passage(s) cited, {state})", style="bold")]
    for ref, n in counts.items():
        c = first[ref]
        times = f"  \u00d7{n}" if n > 1 else ""
        if c.unresolved:
            lines.append(Text(f"  [{ref}] → unresolved: no such passage in the briefing{times}", style="red"))
        else:
            lines.append(Text.assemble(f"  [{ref}] → ", (c.where, "cyan"), (times, "dim")))
    return lines


class MeetingView:
    """``person``: the person at this terminal (:class:`~orchestrator.client.terminal_person.TerminalPerson`),
    asked for their seat's answer and their decision on a draft as the meeting reaches them;
    without one, the view says who is awaited and how to answer."""

    def __init__(self, console: Console, conclave: Conclave, plan_id: str, *, poll: float = 0.3,
                 person: Any = None) -> None:
        self.console = console
        self.conclave = conclave
        self.plan_id = plan_id
        self.poll = poll
        self.person = person
        self.announced: set[str] = set()  # seats and drafts whose wait was said
        self.streams: dict[str, str] = {}
        self.printed: set[str] = set()
        self.seen_running: dict[str, float] = {}  # phase key -> when we first saw it running
        self.rounds_shown: set[int] = set()
        self.rounds = 0

    def follow(self) -> PlanView:
        from rich.live import Live

        sub = self.conclave.subscribe(self.plan_id)
        view = self.conclave.get(self.plan_id)
        self.rounds = max((p.round or 0 for p in view.phases if p.kind == "turn"), default=0)
        self.console.print(Rule(f"[bold]{escape(view.title)}[/bold]"))
        self.console.print(Text(f"plan {view.id}", style="dim"), soft_wrap=True)  # whole, at any width
        self._print_cast(view)
        try:
            with Live(self._render(view), console=self.console, refresh_per_second=8, transient=True) as live:
                next_poll = 0.0
                while True:
                    for msg in drain(sub, 0.1):
                        if self._on_message(msg):
                            next_poll = 0.0
                    if time.monotonic() >= next_poll:
                        view = self.conclave.get(self.plan_id)
                        self._print_finished(view)
                        next_poll = time.monotonic() + self.poll
                        if view.final:
                            break
                        if self._people(view, live):
                            next_poll = 0.0
                    live.update(self._render(view))
        finally:
            sub.close()
        self._print_finished(view)
        self._print_citations(view)
        self._print_outcome(view)
        return view

    def _people(self, view: PlanView, live: Any) -> bool:
        """Who the plan waits for: the person at this terminal is asked (the live view paused
        while they write); otherwise it is said once, with how to answer. True when something
        was stored."""
        waiting = [p for p in view.phases if p.status == PhaseStatus.AWAITING_INPUT]
        draft = view.approval.get("phase") if view.approval and view.status == PlanStatus.AWAITING_APPROVAL else None
        if self.person is not None and (waiting or draft):
            live.stop()
            try:
                return bool(self.person.take_turns(self.conclave, view))
            finally:
                live.start()
        for p in waiting:
            if f"{p.key}:{p.attempt}" not in self.announced:
                self.announced.add(f"{p.key}:{p.attempt}")
                self.console.print(Text(f"✋ waiting for {p.expert} ({p.key}) until {p.due_at}: "
                                        f"conclave answer {view.id} {p.key} TEXT, or the plan page", style="yellow"))
        if draft and f"approval:{draft}" not in self.announced:
            self.announced.add(f"approval:{draft}")
            self.console.print(Text(f"✋ the draft ({draft}) waits for approval: conclave approve {view.id}, or "
                                    f"conclave send-back {view.id} NOTE (once), or the plan page", style="yellow"))
        return False

    def _print_cast(self, view: PlanView) -> None:
        experts = list(dict.fromkeys(p.expert for p in view.phases
                                     if p.expert and p.kind in ("turn", "expert")))
        if view.kind == "board":
            chair = next((p.expert for p in view.phases if p.kind == "opening"), None)
            line = f"{self.rounds} round(s) · chair: {chair} · panel: {', '.join(experts)}"
        else:
            checks = [p.key for p in view.phases if p.kind == "divergence"]
            line = (f"{len(view.phases)} phases · experts: {', '.join(experts)}"
                    + (f" · divergence checks: {', '.join(checks)}" if checks else ""))
        self.console.print(Text(line, style="dim"))

    def _on_message(self, msg: dict[str, Any]) -> bool:
        """Keep a chunk's text; True when the message announces a stored event (the
        view is then read from the database at once)."""
        if msg.get("type") == "chunk":
            key = str(msg.get("phase"))
            self.streams[key] = self.streams.get(key, "") + str(msg.get("text", ""))
            return False
        return "id" in msg

    def _print_finished(self, view: PlanView) -> None:
        for p in view.phases:
            if p.key in self.printed or p.status not in PHASE_FINAL:
                continue
            self.printed.add(p.key)
            self.streams.pop(p.key, None)
            if p.kind == "turn" and p.round and p.round not in self.rounds_shown and p.status != PhaseStatus.SKIPPED:
                self.rounds_shown.add(p.round)
                self.console.print(Rule(f"Round {p.round} of {self.rounds}", style="dim"))
            if p.kind == "divergence" and p.status == PhaseStatus.COMPLETED:
                for line in verdict_line(p, self.conclave.phase_text(self.plan_id, p.key) or "", view):
                    self.console.print(line)
                continue
            if p.status == PhaseStatus.COMPLETED:
                text = self.conclave.phase_text(self.plan_id, p.key) or ""
                note = " [yellow](stream broke: partial text)[/yellow]" if p.truncated else ""
                style = "bold blue" if p.kind in CHAIR_KINDS else "bold"
                if p.stand_in:  # no model wrote it: say which failed, not "answered by" nobody
                    failed = escape(", ".join(p.fell_back_from) or "every model")
                    note += f" [yellow](written by code: {failed} failed)[/yellow]"
                elif p.fell_back_from:
                    note += (f" [yellow](answered by {escape(p.model or '?')} after "
                             f"{escape(', '.join(p.fell_back_from))} failed)[/yellow]")
                if p.human:
                    by = (p.answered_by or {}).get("name")
                    note += f" [yellow](a person{escape(f': {by}') if by else ''})[/yellow]"
                self.console.print(Panel(Markdown(readable(text)), title=f"[{style}]{escape(phase_title(p))}[/]{note}",
                                         title_align="left", subtitle=f"[dim]{escape(p.key)}[/dim]",
                                         subtitle_align="right", border_style=STATUS_STYLE[p.status]))
            elif p.status == PhaseStatus.FAILED:
                what = "missing" if p.kind == "turn" else "failed"
                failure = f"✗ {phase_title(p)} — {what}: {p.error_code}: {p.error}"
                self.console.print(Text(failure, style="red"))
            elif p.status == PhaseStatus.CANCELLED:
                self.console.print(Text(f"■ {phase_title(p)} — cancelled", style="yellow"))
            elif p.status == PhaseStatus.SKIPPED and p.error_code == EARLY_STOP:
                stop = view.early_stop or {}
                stopped = early_stop_line(view)
                if stopped and not any(q.key in self.printed for q in view.phases
                                       if q.key in stop.get("phases", ()) and q != p):
                    self.console.print(stopped)
            elif p.status == PhaseStatus.SKIPPED:
                self.console.print(Text(f"· {phase_title(p)} — skipped: {p.error}", style="dim"))

    def _render(self, view: PlanView) -> Group:
        now = time.monotonic()
        running = [p for p in view.phases if p.status == PhaseStatus.RUNNING]
        for p in running:
            self.seen_running.setdefault(p.key, now)
        parts: list[Any] = [(f"{view.done}/{len(view.phases)} phases", "bold")]
        current = max((p.round or 0 for p in running if p.kind in ("turn", "round_summary")), default=0)
        if self.rounds and current:
            turns = [p for p in view.phases if p.kind == "turn" and p.round == current]
            spoke = sum(1 for p in turns if p.status == PhaseStatus.COMPLETED)
            missing = [p.expert or p.key for p in turns
                       if p.status in PHASE_FINAL and p.status != PhaseStatus.COMPLETED]
            gone = [("  (missing: " + ", ".join(missing) + ")", "red")] if missing else []
            parts = [(f"Round {current}/{self.rounds}", "bold"), "  ·  ",
                     (f"{spoke}/{len(turns)} spoke", "bold"), *gone, "  ·  ", *parts]
        debates = len({p.key.rsplit(".", 1)[0] for p in view.phases if p.kind == "debate"})
        if debates:
            parts += ["  ·  ", (f"{debates} debate(s)", "magenta")]
        tokens = f"{view.usage.total_tokens:,} tokens" + (" (est.)" if view.usage.estimated else "")
        speaking = ", ".join(p.expert or p.key for p in running) or "—"
        parts += ["  ·  ", (tokens, "dim"), "  ·  ", ("speaking: " + speaking, "cyan")]
        awaited = [p.expert or p.key for p in view.phases if p.status == PhaseStatus.AWAITING_INPUT]
        if awaited:
            parts += ["  ·  ", ("waiting for: " + ", ".join(awaited), "yellow")]
        if view.status == PlanStatus.AWAITING_APPROVAL:
            parts += ["  ·  ", ("the draft waits for approval", "yellow")]
        panels: list[Any] = [Text.assemble(*parts)]
        for p in running:
            tail = self.streams.get(p.key, "")[-1200:]  # cut again at a word by live_text
            waited = now - self.seen_running[p.key]
            body = live_text(tail, 600) if tail else Text(f"… waiting for the first words ({waited:.0f}s)")
            body.overflow = "fold"
            panels.append(Panel(body, title=f"[cyan]{escape(phase_title(p))}[/cyan] ▌",
                                title_align="left", border_style="cyan",
                                height=min(10, 3 + tail.count("\n") + len(tail) // 90)))
        return Group(*panels)

    def _print_citations(self, view: PlanView) -> None:
        """The result's briefing citations, each resolved to its document and heading (or
        flagged unresolved), read from the record; nothing for a plan that cites none."""
        if view.status != PlanStatus.COMPLETED:
            return
        for line in citation_lines(self.conclave.citations(self.plan_id)):
            self.console.print(line)

    def _print_outcome(self, view: PlanView) -> None:
        style = {PlanStatus.COMPLETED: "bold green", PlanStatus.CANCELLED: "bold yellow"}.get(view.status, "bold red")
        usage = f"{view.usage.total_tokens:,} tokens" + (" (estimated)" if view.usage.estimated else "")
        missing = sorted({p.expert for p in view.phases
                          if p.kind == "turn" and p.status == PhaseStatus.FAILED and p.expert})
        if missing:
            self.console.print(Text(f"missing from the meeting: {', '.join(missing)}", style="yellow"))
        for line in decision_lines(view):
            self.console.print(line)
        done = f"{view.done}/{len(view.phases)} phases"
        cost = "" if view.usage.cost_usd is None else f" · {dollars(view.usage.cost_usd)}"
        self.console.print(Rule(f"[{style}]{view.status}[/] · {done} · {usage}{cost}"))
        if view.budget is not None:
            self.console.print(Text(spent_text(None, view.budget).strip(), style="dim"))
        if view.error and view.status != PlanStatus.COMPLETED:
            self.console.print(Text(view.error, style="red"))
