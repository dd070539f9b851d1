"""Two plans side by side (``conclave diff A B``, ``GET /v1/plans/{a}/diff/{b}``, the page's
``/ui/plans/{a}/diff/{b}``): what each decided, the final texts' line diff, which phases each
reused or ran, and what each cost — derived from the two plan views, their results and their
contents' hashes, nothing else. Typically a what-if fork beside its source, but any two plans
in reach compare."""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.plan.views import PhaseView, PlanView

#: the most lines a text diff shows (the texts themselves are whole in the answer)
MAX_DIFF_LINES = 2000


@dataclass(frozen=True)
class Decision:
    """A plan's decision record, as compared: the protocol, the winner (``key``), its answer and
    margin, each vote, and what the chair stated (and whether it matches)."""

    protocol: str | None
    key: Any
    answer: Any
    margin: float | None
    votes: list[dict[str, Any]]
    chair: dict[str, Any] | None


@dataclass(frozen=True)
class Side:
    """One of the two plans: what it is, where it came from, what it cost and concluded."""

    id: str
    title: str
    kind: str
    status: str
    forked_from: dict[str, Any] | None
    total_tokens: int
    cost_usd: float | None
    calls: int
    reused: int  # phases copied from a source (no cost here)
    ran: int  # phases this plan ran itself (completed or not)
    decision: Decision | None
    result: str | None  # the final text (synthesis or final summary), None before there is one


@dataclass(frozen=True)
class PhaseSide:
    status: str
    attempt: int
    reused_from: str | None
    total_tokens: int
    cost_usd: float | None
    text: str | None  # the SHA-256 of its full text, None without one


@dataclass(frozen=True)
class PhaseRow:
    key: str
    a: PhaseSide | None
    b: PhaseSide | None
    same_text: bool | None  # both have a text: is it the same? None otherwise
    shared: bool  # one content, by reference (a fork's copy of its source's phase)


@dataclass(frozen=True)
class Comparison:
    a: Side
    b: Side
    same_answer: bool | None  # both decided: the same winner? None otherwise
    text_diff: list[str] = field(default_factory=list)  # a unified line diff of the final texts (Markdown)
    phases: list[PhaseRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        """The comparison whose :meth:`to_dict` is ``data`` (``GET /v1/plans/{a}/diff/{b}``)."""
        def side(d: dict[str, Any]) -> Side:
            found = d.get("decision")
            decision = Decision(**{k: found.get(k) for k in Decision.__dataclass_fields__}) if found else None
            return Side(**{**{k: d[k] for k in Side.__dataclass_fields__ if k != "decision"}, "decision": decision})

        def phase(d: dict[str, Any] | None) -> PhaseSide | None:
            return None if d is None else PhaseSide(**{k: d[k] for k in PhaseSide.__dataclass_fields__})

        return cls(a=side(data["a"]), b=side(data["b"]), same_answer=data["same_answer"],
                   text_diff=[str(line) for line in data["text_diff"]],
                   phases=[PhaseRow(key=r["key"], a=phase(r["a"]), b=phase(r["b"]), same_text=r["same_text"],
                                    shared=bool(r["shared"])) for r in data["phases"]])


Contents = dict[str, tuple[str, str]]  # phase key -> (content id, the text's SHA-256)


def compare(a: PlanView, a_result: str | None, a_hashes: Contents,
            b: PlanView, b_result: str | None, b_hashes: Contents) -> Comparison:
    """``a`` beside ``b``: their views, final texts and their phases' contents (by key: the
    content row's id and its text's hash)."""
    da, db = _decision(a), _decision(b)
    same = None if da is None or db is None or da.key is None or db.key is None else da.key == db.key
    return Comparison(a=_side(a, a_result, da), b=_side(b, b_result, db), same_answer=same,
                      text_diff=line_diff(a_result, b_result, a.id, b.id), phases=_rows(a, a_hashes, b, b_hashes))


def line_diff(a: str | None, b: str | None, a_name: str = "a", b_name: str = "b") -> list[str]:
    """The unified diff of two Markdown texts, line by line (no lines: the same, or neither has one)."""
    if a is None and b is None:
        return []
    lines = list(difflib.unified_diff((a or "").splitlines(), (b or "").splitlines(), fromfile=a_name,
                                      tofile=b_name, lineterm="", n=3))
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"… {len(lines) - MAX_DIFF_LINES} more lines"]
    return lines


def _decision(view: PlanView) -> Decision | None:
    d = view.decision
    if not d:
        return None
    votes = [{"expert": v.get("expert"), "answer": v.get("answer"), "confidence": v.get("confidence"),
              "weight": v.get("weight"), "abstained": v.get("abstained")} for v in d.get("votes") or []]
    margin = d.get("margin")
    return Decision(protocol=d.get("protocol"), key=d.get("key"), answer=d.get("answer"),
                    margin=float(margin) if isinstance(margin, int | float) else None, votes=votes,
                    chair=d.get("chair"))


def _side(view: PlanView, result: str | None, decision: Decision | None) -> Side:
    reused = sum(1 for p in view.phases if p.reused_from)
    ran = sum(1 for p in view.phases if not p.reused_from and p.attempt > 0)
    return Side(id=view.id, title=view.title, kind=view.kind, status=str(view.status), forked_from=view.forked_from,
                total_tokens=view.usage.total_tokens, cost_usd=view.usage.cost_usd, calls=view.usage.calls,
                reused=reused, ran=ran, decision=decision, result=result)


def _phase(p: PhaseView, hashes: Contents) -> PhaseSide:
    stored = hashes.get(p.key)
    return PhaseSide(status=str(p.status), attempt=p.attempt, reused_from=p.reused_from,
                     total_tokens=p.usage.total_tokens, cost_usd=p.usage.cost_usd if p.usage.calls else 0.0,
                     text=stored[1] if stored else None)


def _rows(a: PlanView, a_hashes: Contents, b: PlanView, b_hashes: Contents) -> list[PhaseRow]:
    in_a = {p.key: p for p in a.phases}
    in_b = {p.key: p for p in b.phases}
    keys = [*in_a, *[k for k in in_b if k not in in_a]]
    rows = []
    for key in keys:
        pa = _phase(in_a[key], a_hashes) if key in in_a else None
        pb = _phase(in_b[key], b_hashes) if key in in_b else None
        same = None if pa is None or pb is None or pa.text is None or pb.text is None else pa.text == pb.text
        shared = key in a_hashes and key in b_hashes and a_hashes[key][0] == b_hashes[key][0]
        rows.append(PhaseRow(key=key, a=pa, b=pb, same_text=same, shared=shared))
    return rows
