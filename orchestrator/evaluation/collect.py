"""From the stored plans to the facts a report is computed from (:class:`~.outcomes.ItemOutcome`).

:func:`outcome_of` reads one finished plan's view: the arm's answer is its decision's
(``view.decision["answer"]``: the tally's, or for a chair protocol the chair's verdict),
graded by the eval's scorer; each round's answers are the experts' verdicts (a board's turns
by round; a team's expert phases as round one and each debate as a later round); tokens are
the plan's usage (waste excluded). A plan that failed or was cancelled is wrong, with no
answer. :func:`collect` rebuilds every outcome of an eval from the database alone — the eval's
record and the plans labelled ``eval=<name>`` — which is what ``conclave eval report`` shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from orchestrator.control.plan_query import PlanQuery, page_dict
from orchestrator.control.reads import PlanReads
from orchestrator.evaluation import arms
from orchestrator.evaluation.outcomes import Answer, ItemOutcome
from orchestrator.evaluation.scoring import Scorer, judge_key
from orchestrator.plan.views import PlanView
from storage.evals import EvalRecord
from storage.identity import Principal
from storage.status import PhaseStatus, PlanStatus

PAGE = 200


class Plans(Protocol):
    """Where the outcomes are read from: the :class:`~orchestrator.client.conclave.Conclave`
    facade, or the plan page's reads as the signed-in caller (:class:`CallerPlans`)."""

    def list_plans(self, *, status: Any = None, label: Any = None, limit: int | None = None,
                   cursor: str | None = None) -> dict[str, Any]: ...

    def get(self, plan_id: str) -> PlanView: ...


class CallerPlans:
    """The plans one principal may see, read in process (the UI's eval page): another tenant's
    plans are not in reach, as over HTTP."""

    def __init__(self, reads: PlanReads, principal: Principal | None) -> None:
        self.reads, self.principal = reads, principal

    def list_plans(self, *, status: Any = None, label: Any = None, limit: int | None = None,
                   cursor: str | None = None) -> dict[str, Any]:
        query = PlanQuery.check(status=status, label=label, limit=limit, cursor=cursor)
        return page_dict(self.reads.list_plans(principal=self.principal, **query.as_filters()))

    def get(self, plan_id: str) -> PlanView:
        return self.reads.view(plan_id, principal=self.principal)


def rounds_of(view: PlanView) -> list[dict[str, Answer]]:
    """Each round's answers, expert by expert (None: abstained, or gave no verdict)."""
    rounds: dict[Any, dict[str, Answer]] = {}
    for p in view.phases:
        if p.kind == "turn" and p.round is not None:
            which: Any = p.round
        elif p.kind == "expert":
            which = 0
        elif p.kind == "debate":
            which = p.key.rsplit(".", 1)[0]  # the debate's group: debate-check-N
        else:
            continue
        if p.status in (PhaseStatus.SKIPPED, PhaseStatus.CANCELLED, PhaseStatus.PENDING):
            continue
        answers = rounds.setdefault(which, {})
        name = p.expert or p.key
        answers[name if name not in answers else p.key] = (p.verdict or {}).get("answer")
    return list(rounds.values())  # phases are in plan order: rounds, then debates as inserted


def answer_of(view: PlanView) -> Answer:
    """The plan's answer: its decision's; None when it has none or did not complete."""
    if view.status != PlanStatus.COMPLETED or not view.decision:
        return None
    answer = view.decision.get("answer")
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int | float):
        return float(answer)
    return answer if isinstance(answer, str) else None


def answers_of(view: PlanView) -> list[str | float]:
    """Every answer given in the plan (the decision's and each verdict's), for a judge to grade."""
    given = [answer_of(view), *(a for r in rounds_of(view) for a in r.values())]
    return [a for a in given if a is not None]


def outcome_of(record: dict[str, Any], arm: dict[str, Any], item: dict[str, Any], view: PlanView,
               scorer: Scorer) -> ItemOutcome:
    answer = answer_of(view)
    rounds = rounds_of(view)
    plan = arm["plan"]
    return ItemOutcome(
        arm=arm["name"], item_id=str(item["id"]), expected=item["answer"], answer=answer,
        correct=scorer.grade(item, answer), plan_id=view.id, status=str(view.status),
        tokens=view.usage.total_tokens, cost_usd=view.usage.cost_usd, rounds=rounds,
        rounds_correct=[{e: scorer.grade(item, a) for e, a in r.items()} for r in rounds],
        rounds_planned=int(plan.get("rounds", 2)) if plan.get("kind") == "board" else 1,
        early_stopped=view.early_stop is not None, tokens_saved=int((view.early_stop or {}).get("tokens_saved", 0)),
        reviews=reviews_of(view),
    )


def reviews_of(view: PlanView) -> list[dict[str, Any]]:
    """Each review as stored: the reviewer, the labels shown in order, who stood behind each,
    and the labels as ranked (best first); a review whose verdict could not be read is left out."""
    out = []
    for p in view.phases:
        shown = (p.verdict or {}).get("review") if p.kind == "review" else None
        if isinstance(shown, dict):
            out.append({"reviewer": p.expert, "labels": shown.get("labels"), "authors": shown.get("authors"),
                        "ranking": shown.get("ranked")})
    return out


def eval_plans(conclave: Plans, stored: EvalRecord, *, arm: str | None = None,
               status: PlanStatus | None = None) -> Iterator[dict[str, Any]]:
    """The summaries of the eval's plans (of one arm; in one status), in the eval's tenant,
    every page."""
    wanted = arms.labels(stored.name, arm) if arm else [f"eval={stored.name}"]
    cursor = None
    while True:
        page = conclave.list_plans(status=status, label=wanted, limit=PAGE, cursor=cursor)
        for summary in page["plans"]:
            if summary.get("tenant") == stored.tenant:
                yield summary
        cursor = page.get("next_cursor")
        if not cursor:
            return


def collect(conclave: Plans, stored: EvalRecord) -> list[ItemOutcome]:
    """Every finished item of every arm, in the record's order (arms, then items): from the
    stored plans alone. Judge plans (free-text scoring) grade the answers they were asked about."""
    record = stored.spec
    by_task = {s["task_id"]: s for s in eval_plans(conclave, stored) if s.get("task_id")}
    scorer = Scorer.of(record)
    views: list[tuple[dict[str, Any], dict[str, Any], PlanView]] = []
    for arm in record["arms"]:
        for item in record["items"]:
            summary = by_task.get(arms.task_id(record["name"], arm["name"], item["id"]))
            if summary is None or summary["status"] == PlanStatus.RUNNING:
                continue
            views.append((arm, item, conclave.get(summary["id"])))
    if scorer.method == "judge":
        for _, item, view in views:
            for answer in answers_of(view):
                judge = by_task.get(arms.judge_task_id(record["name"], item["id"], answer))
                if judge is not None and judge["status"] != PlanStatus.RUNNING:
                    grade(scorer, item, answer, conclave.get(judge["id"]))
    return [outcome_of(record, arm, item, view, scorer) for arm, item, view in views]


def grade(scorer: Scorer, item: dict[str, Any], answer: str | float, judged: PlanView) -> None:
    """Record a finished judge plan's grade (a judge that failed finds the answer wrong)."""
    scorer.judged[judge_key(item, answer)] = answer_of(judged) == "correct"


def report_record(stored: EvalRecord, outcomes: list[ItemOutcome]) -> dict[str, Any]:
    """The eval as :func:`~.report.build_report` takes it: each arm's kind, whether it is a
    baseline, how many experts (or samples) vote in it — read from its outcomes, so an ``n:
    auto`` self-consistency counts what it ran — and, when every voter runs the offline
    model's simulated solver with one configuration, that simulation (so the report prints
    the theory beside the measurement)."""
    record = stored.spec
    voters: dict[str, int] = {}
    for o in outcomes:
        voters[o.arm] = max(voters.get(o.arm, 0), len(o.rounds[0]) if o.rounds else 0)
    choices = {len(item.get("choices") or ()) or NUMERIC_OPTIONS for item in record["items"]}
    out = []
    for arm in record["arms"]:
        kind = arm["kind"]
        experts = 1 if kind == "single" else voters.get(arm["name"]) or len(_voting_models(arm["plan"]))
        decide = arm["plan"].get("decide") or ("chair" if kind == "panel" else "vote")  # the schema's default
        out.append({"name": arm["name"], "kind": kind, "baseline": kind != "panel", "experts": max(1, experts),
                    "decide": decide, "simulation": _simulation(arm["plan"], choices)})
    return {"name": record["name"], "arms": out}


NUMERIC_OPTIONS = 21  # the right value and the solver's 20 offsets (report.py's input contract)


def _voting_models(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The model configuration of each expert who votes in ``plan`` (a template, whose answer
    each item fills in): a board's experts, a team's experts who own a phase."""
    owners = None if plan.get("kind") == "board" else {p.get("expert") for p in plan.get("phases") or ()}
    models = plan.get("models") or {}
    return [models.get(e.get("model", "default")) or {} for e in plan.get("experts") or ()
            if owners is None or e.get("name") in owners]


def _simulation(plan: dict[str, Any], choices: set[int]) -> dict[str, Any] | None:
    solvers: list[dict[str, Any]] = []
    for config in _voting_models(plan):
        solver = (config.get("options") or {}).get("solver") if config.get("provider", "offline") == "offline" else None
        if not isinstance(solver, dict):
            return None
        solvers.append(solver)
    if not solvers or len({repr(sorted(s.items())) for s in solvers}) != 1 or len(choices) != 1:
        return None
    solver = solvers[0]
    return {"skill": solver["skill"], "options": next(iter(choices)), "correlation": solver.get("correlation", 0.0),
            "conformity": solver.get("conformity", 0.0), "position_bias": solver.get("position_bias", 0.0)}
