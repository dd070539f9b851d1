"""Running an eval: every item of every arm is one durable plan, submitted through the facade.

:class:`Harness` stores the eval's record (:mod:`.spec`), then submits each item's plan of each
arm (:mod:`.arms`) with at most ``in_flight`` of them running, follows them to their end and
reads what each came to (:mod:`.collect`). Nothing is kept only in this process:

- a plan's ``task_id`` is ``eval:<name>:<arm>:<item>``, so a plan submitted again is the same
  plan (``created`` False) and a plan that finished is read, never run again: an interrupted
  ``conclave eval run`` run again goes on where it stopped, and costs nothing for what was done;
  a plan it finds still running (its worker died with the last run) is resumed;
- before a new eval's record is stored, the first plan of each arm is submitted, so a plan the
  deployment refuses (a model it does not run) is reported before the name is taken;
- ``self_consistency`` with ``n: auto`` is sized when its first plan is due: the panel's tokens
  per item, measured on the panel's items finished by then, over one sample's (the ``single``
  arm's tokens per item when it runs the same model, else the panel's first drafts: a team's
  expert phases, a board's first round) — at least 3 samples, odd; a resumed eval reads n back
  from the plans already stored;
- free-text scoring submits a judge plan per item and distinct answer as the answers arrive.

Submissions refused for the tenant's submit rate or its active-plan cap wait and retry.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.client.conclave import Conclave
from orchestrator.core.errors import (
    CapacityExceeded,
    EvalConflict,
    EvalNotFound,
    InvalidPlan,
    PlanConflict,
    ResumeInProgress,
    SubmitRateLimited,
)
from orchestrator.evaluation import arms
from orchestrator.evaluation.arms import invalid
from orchestrator.evaluation.collect import answer_of, answers_of, eval_plans, grade, outcome_of
from orchestrator.evaluation.outcomes import ItemOutcome
from orchestrator.evaluation.scoring import Scorer, judge_key
from orchestrator.evaluation.spec import ARM_FIELDS, Resolved
from orchestrator.plan.views import PlanView
from storage.evals import EvalRecord
from storage.status import PlanStatus

IN_FLIGHT = 32
AUTO_PROBE = 10  # panel items measured before self-consistency's n is chosen
SHOW_EVERY = 0.25  # seconds between progress updates while finished plans are read back


@dataclass
class ArmStats:
    """One arm's progress: what is finished, running, right, and spent."""

    name: str
    total: int
    done: int = 0
    running: int = 0
    correct: int = 0
    failed: int = 0
    reused: int = 0  # finished before this run
    tokens: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.done if self.done else None


class Progress(Protocol):
    def update(self, stats: list[ArmStats], note: str = "") -> None: ...


class _Silent:
    def update(self, stats: list[ArmStats], note: str = "") -> None:
        return None


@dataclass(frozen=True)
class _Work:
    arm: dict[str, Any]
    item: dict[str, Any]
    answer: str | float | None = None  # a judge plan's answer to grade

    @property
    def judge(self) -> bool:
        return self.arm["name"] == arms.JUDGE


@dataclass
class RunResult:
    stored: EvalRecord
    created: bool  # this run stored the eval's record
    outcomes: list[ItemOutcome]
    warnings: list[str]
    submitted: int  # plans this run created
    reused: int  # arm plans that had finished before it
    samples: int | None  # self-consistency's n
    stats: list[ArmStats] = field(default_factory=list)


class Harness:
    def __init__(self, conclave: Conclave, resolved: Resolved, *, in_flight: int = IN_FLIGHT,
                 progress: Progress | None = None, poll: float = 0.2,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if in_flight < 1:
            raise invalid("in_flight", "at least 1")
        self.conclave = conclave
        self.resolved = resolved
        self.record = resolved.record
        self.in_flight = in_flight
        self.progress = progress or _Silent()
        self.poll = poll
        self.sleep = sleep
        self.scorer = Scorer.of(self.record)
        self._judge = {"name": arms.JUDGE, "kind": arms.JUDGE, **(self.record["judge"] or {})}
        self.samples: int | None = None
        self.views: dict[tuple[str, str], PlanView] = {}  # (arm, item id) -> its finished plan
        self._right: dict[tuple[str, str], bool] = {}  # (arm, item id) -> its answer graded right
        self.stats = {a["name"]: ArmStats(a["name"], len(self.record["items"])) for a in self.record["arms"]}
        self._stored: EvalRecord | None = None
        self._known: dict[str, dict[str, Any]] = {}  # task id -> a stored plan's summary
        self._running: dict[str, _Work] = {}  # plan id -> its work
        self._submitted: dict[str, str] = {}  # task id -> plan id, by this run
        self._judging: deque[_Work] = deque()
        self._asked: set[tuple[str, str]] = set()  # judged, or a judge plan on its way
        self.created_plans = 0
        self.note = ""
        self._shown_at = 0.0

    # ------------------------------------------------------------------ the run

    def run(self) -> RunResult:
        stored, created = self._store()
        self._stored = stored
        self._known = {s["task_id"]: s for s in eval_plans(self.conclave, stored) if s.get("task_id")}
        self.samples = self._stored_samples()
        queue = deque(self._work())
        self._show()
        while queue or self._judging or self._running:
            moved = self._fill(queue)
            moved = self._follow() or moved
            if moved:
                self._show()
            if self._running:  # each pass reads every running plan: at most one pass per poll
                self.sleep(self.poll)
        self._show()
        outcomes = [outcome_of(self.record, arm, item, self.views[(arm["name"], item["id"])], self.scorer)
                    for arm in self.record["arms"] for item in self.record["items"]
                    if (arm["name"], item["id"]) in self.views]
        return RunResult(stored, created, outcomes, list(self.resolved.warnings), self.created_plans,
                         sum(s.reused for s in self.stats.values()), self.samples, list(self.stats.values()))

    def _work(self) -> list[_Work]:
        """Panel and single item by item, then self-consistency (its n may wait for the panel)."""
        first = [a for a in self.record["arms"] if a["kind"] != "self_consistency"]
        later = [a for a in self.record["arms"] if a["kind"] == "self_consistency"]
        items = self.record["items"]
        return [_Work(a, i) for i in items for a in first] + [_Work(a, i) for a in later for i in items]

    def _store(self) -> tuple[EvalRecord, bool]:
        """The eval's stored record; a new eval's first plan of each arm is submitted first."""
        try:
            self.conclave.get_eval(self.resolved.name)
        except EvalNotFound:
            item = self.record["items"][0]
            for arm in self.record["arms"]:
                if arm.get("samples") != "auto":
                    self._submit(_Work(arm, item))
        created = self.conclave.create_eval(self.resolved.name, self.record)
        return created.eval, created.created

    def _fill(self, queue: deque[_Work]) -> bool:
        moved = False
        while len(self._running) < self.in_flight and (self._judging or queue):
            if self._judging:
                work = self._judging.popleft()
            else:
                if queue[0].arm.get("samples") == "auto" and not self._choose_samples():
                    break
                work = queue.popleft()
            moved = True
            tid = self._task_id(work)
            if tid in self._submitted:
                self._running[self._submitted[tid]] = work
                continue
            known = self._known.get(tid)
            if known is None:
                self._running[self._submit(work)] = work
            elif known["status"] != PlanStatus.RUNNING:
                self._finished(work, self.conclave.get(known["id"]), reused=True)
                if time.monotonic() - self._shown_at > SHOW_EVERY:  # reading a long finished run back
                    self._show()
            else:  # its last run stopped: whatever was sent for it may be lost with that run's worker
                try:
                    self.conclave.resume(known["id"])
                except ResumeInProgress:
                    pass
                self._running[known["id"]] = work
        return moved

    def _follow(self) -> bool:
        """Reads back what ended since the last poll: one listing of the eval's plans still
        running, then the whole view of each plan of ours that the listing no longer holds
        (a plan's status only ever leaves ``running``) — not every running plan's view."""
        if not self._running:
            return False
        assert self._stored is not None
        running = {s["id"] for s in eval_plans(self.conclave, self._stored, status=PlanStatus.RUNNING)}
        moved = False
        for plan_id, work in list(self._running.items()):
            if plan_id in running:
                continue
            view = self.conclave.get(plan_id)
            if view.final:
                del self._running[plan_id]
                self._finished(work, view)
                moved = True
        return moved

    def _finished(self, work: _Work, view: PlanView, *, reused: bool = False) -> None:
        if work.judge:
            assert work.answer is not None
            grade(self.scorer, work.item, work.answer, view)
            for arm in self.stats:  # the item's answers graded again, now that one more is judged
                if (arm, work.item["id"]) in self.views:
                    self._grade(arm, work.item)
            return
        self.views[(work.arm["name"], work.item["id"])] = view
        self._grade(work.arm["name"], work.item)
        stats = self.stats[work.arm["name"]]
        stats.done += 1
        stats.reused += reused
        stats.failed += view.status != PlanStatus.COMPLETED
        stats.tokens += view.usage.total_tokens
        if self.scorer.method == "judge":
            for answer in answers_of(view):
                key = judge_key(work.item, answer)
                if key not in self._asked:
                    self._asked.add(key)
                    self._judging.append(_Work(self._judge, work.item, answer))

    def _grade(self, arm: str, item: dict[str, Any]) -> None:
        """Grades one finished plan's answer, keeping its arm's count of right answers."""
        key = (arm, item["id"])
        right = self.scorer.grade(item, answer_of(self.views[key]))
        self.stats[arm].correct += right - self._right.get(key, False)
        self._right[key] = right

    # ------------------------------------------------------------------ submitting

    def _task_id(self, work: _Work) -> str:
        if work.judge:
            assert work.answer is not None
            return arms.judge_task_id(self.record["name"], work.item["id"], work.answer)
        return arms.task_id(self.record["name"], work.arm["name"], work.item["id"])

    def _plan(self, work: _Work) -> dict[str, Any]:
        if work.judge:
            assert work.answer is not None
            return arms.fill_judge(self.record, work.item, work.answer)
        return arms.fill(self.record, work.arm, work.item, samples=self.samples)

    def _submit(self, work: _Work) -> str:
        """Submit one plan (waiting out the tenant's submit rate and active-plan cap)."""
        plan, tid = self._plan(work), self._task_id(work)
        while True:
            try:
                result = self.conclave.submit_result(plan)
                break
            except SubmitRateLimited as exc:
                self._wait(float(exc.retry_after), "the tenant's submit rate is reached")
            except CapacityExceeded:
                self._wait(1.0, "the tenant's active-plan cap is reached")
            except InvalidPlan as exc:
                where = ARM_FIELDS[work.arm["name"]]
                raise invalid(where, f"the {work.arm['name']} plan of item {work.item['id']!r} was refused: "
                                     f"{exc.message}") from exc
            except (ResumeInProgress, EvalConflict):
                raise
            except PlanConflict as exc:
                raise EvalConflict(f"task_id {tid!r} was submitted before with another plan: this eval's plans "
                                   f"changed since; give the eval another name ({exc.message})",
                                   details=[{"field": "name", "message": "its plans changed"}]) from exc
        self.note = ""
        self._submitted[tid] = result.plan_id
        self.created_plans += result.created
        return result.plan_id

    def _wait(self, seconds: float, why: str) -> None:
        self.note = f"{why}: waiting {seconds:g}s"
        self._show()
        self.sleep(seconds)

    # ------------------------------------------------------------------ self-consistency's n

    def _stored_samples(self) -> int | None:
        """n as the record gives it, or as the self-consistency plans already stored were built."""
        sc = next((a for a in self.record["arms"] if a["kind"] == "self_consistency"), None)
        if sc is None:
            return None
        if isinstance(sc.get("samples"), int):
            return int(sc["samples"])
        prefix = f"eval:{self.record['name']}:{sc['name']}:"
        stored = next((s for tid, s in self._known.items() if tid.startswith(prefix)), None)
        if stored is None:
            return None
        return sum(1 for p in self.conclave.get(stored["id"]).phases if p.kind == "expert")

    def _choose_samples(self) -> bool:
        """Whether n is known, choosing it once enough of the panel has finished."""
        if self.samples is not None:
            return True
        panel = [v for (arm, _), v in self.views.items() if arm == "panel"]
        measured = [v for v in panel if v.status == PlanStatus.COMPLETED and v.usage.total_tokens > 0]
        items = len(self.record["items"])
        if len(measured) < min(AUTO_PROBE, items) and len(panel) < items:
            return False
        sc = next(a for a in self.record["arms"] if a["kind"] == "self_consistency")
        single = next((a for a in self.record["arms"] if a["kind"] == "single"), None)
        per_sample = None
        if single is not None and single["model"] == sc["model"]:
            calls = [v.usage.total_tokens for (arm, _), v in self.views.items()
                     if arm == "single" and v.status == PlanStatus.COMPLETED and v.usage.total_tokens > 0]
            per_sample = sum(calls) / len(calls) if calls else None
        if per_sample is None:  # the panel's independent first drafts: a sample's closest kin
            drafts = [p.usage.total_tokens for v in measured for p in v.phases if p.usage.total_tokens > 0
                      and (p.kind == "expert" or (p.kind == "turn" and p.round == 1))]
            per_sample = sum(drafts) / len(drafts) if drafts else None
        per_item = sum(v.usage.total_tokens for v in measured) / len(measured) if measured else 0
        self.samples = arms.choose_samples(per_item / per_sample if per_sample else 0.0)
        return True

    # ------------------------------------------------------------------ progress

    def _show(self) -> None:
        self._shown_at = time.monotonic()
        for stats in self.stats.values():
            stats.running = 0
        for work in self._running.values():
            if not work.judge:
                self.stats[work.arm["name"]].running += 1
        judging = len(self._judging) + sum(1 for w in self._running.values() if w.judge)
        note = self.note or (f"{judging} judge plan(s) grading answers" if judging else "")
        self.progress.update(list(self.stats.values()), note)
