"""Retrieval through the real prompt path: a team plan with a made-up briefing runs through
the coordinator and the phase runner (SQLite FTS5, the offline model behind a provider that
records each request). Each expert's prompt carries the passages relevant to its own task
and role, rendered as the prompt builder renders them, with the instruction to cite them;
the synthesis first gets the passages its inputs cite, and carries their citations through;
every citation stored resolves to a passage of the plan and was in the citing phase's
prompt. A plan without a briefing gets no briefing section, and the budget is honoured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.briefing.citations import find_citations
from orchestrator.briefing.retrieval import passage_tokens, render
from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.gateway.providers.offline.citing import passages_in
from orchestrator.gateway.types import ChatRequest, ModelSpec
from orchestrator.plan.prompts import BRIEFING
from storage import briefings
from tasks.runner import PhaseRunner
from tests.unit.conftest import _planes
from tests.unit.planes import Planes

PACK = [
    {"title": "Security review", "text": (
        "# Security review, Q3\n\n## Incident summary\n\nOn 14 August an attacker used a leaked deploy token to "
        "read the staging database. We rotated every token within four hours.\n\n## Exposure and remediation\n\n"
        "Our exposure is limited to phishing risk for the affected customers. Remediation: hardware keys for all "
        "engineers and an external penetration test before any launch.\n")},
    {"title": "Churn analysis", "text": (
        "# Churn analysis\n\nSmall accounts with fewer than five users churn at 3.4%, twice the rate of larger "
        "accounts; most of them cite price as the reason for leaving.\n\n## Cohorts\n\nAccounts acquired through "
        "accountants churn least.\n")},
    {"title": "Office move", "id": "office", "text": (
        "The Lisbon office moves to the new building in October: desks for forty people and bicycle parking.\n")},
]


def team(**changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "kind": "team", "title": "Launch review", "question": "Should we launch the new product next quarter?",
        "divergence": "off",
        "experts": [{"name": "Iris", "role": "Chief Information Security Officer"},
                    {"name": "Cole", "role": "Head of Customer Success"},
                    {"name": "Elena", "role": "Chief of Staff"}],
        "phases": [{"id": "security", "expert": "Iris",
                    "prompt": "Assess our exposure after the breach and the remediation needed first."},
                   {"id": "customers", "expert": "Cole", "prompt": "Which small accounts leave us, and why?"}],
        "synthesis": {"expert": "Elena", "prompt": "Recommend go or no-go.", "depends_on": ["security", "customers"]},
        "briefing": PACK,
    }
    return {**plan, **changes}


class RecordingOffline:
    """The offline model, keeping the request of every call (what the model is shown)."""

    name = "offline"

    def __init__(self) -> None:
        self.model = OfflineProvider()
        self.requests: list[ChatRequest] = []

    def stream(self, spec: ModelSpec, request: ChatRequest) -> Any:
        self.requests.append(request)
        return self.model.stream(spec, request)

    def complete(self, spec: ModelSpec, request: ChatRequest) -> Any:
        self.requests.append(request)
        return self.model.complete(spec, request)

    def prompt_of(self, kind: str, expert: str | None = None) -> str:
        return next(r.prompt for r in self.requests
                    if r.hints.get("kind") == kind and (expert is None or r.hints.get("expert") == expert))


def recorded(p: Planes) -> RecordingOffline:
    model = RecordingOffline()
    p.runner = PhaseRunner(p.db, p.settings, p.bus, {"offline": model})
    return model


@pytest.fixture()
def small_budget(template_db: Path, fast_dir: Path) -> Iterator[Planes]:
    yield from _planes(template_db, fast_dir, briefing_context_tokens=70)


def test_each_expert_gets_the_passages_of_its_own_task_and_cites_only_what_it_was_given(planes: Planes) -> None:
    model = recorded(planes)
    plan_id = planes.coordinator.submit(team()).plan_id
    planes.run_all()
    assert planes.state(plan_id).plan.status == "completed"
    chunks = {c.ref: c for c in briefings.chunks(planes.db, plan_id)}

    security, customers = model.prompt_of("expert", "Iris"), model.prompt_of("expert", "Cole")
    for prompt in (security, customers):
        head = BRIEFING.split("e.g.")[0]
        assert head in prompt and prompt.index(head) > prompt.index("Your task")  # after the instructions
        passages = passages_in(prompt)
        assert passages and all(render(chunks[p.ref]) in prompt for p in passages)  # rendered whole
    assert passages_in(security)[0].ref == "security-review:2"  # "Exposure and remediation"
    assert passages_in(customers)[0].ref == "churn-analysis:1"
    assert all(p.ref != "office:1" for p in passages_in(security)[:2] + passages_in(customers)[:2])

    # the synthesis is given first the passages its inputs cite, and carries those citations through
    texts = {key: planes.text(plan_id, key) or "" for key in ("security", "customers", "synthesis")}
    cited_by_inputs = list(dict.fromkeys(r.key for key in ("security", "customers")
                                         for r in find_citations(texts[key])))
    assert cited_by_inputs
    given = [p.ref for p in passages_in(model.prompt_of("synthesis"))]
    assert given[:len(cited_by_inputs)] == [f"{d}:{n}" for d, n in cited_by_inputs]
    carried = {f"{r.doc}:{r.chunk}" for r in find_citations(texts["synthesis"])}
    assert {f"{d}:{n}" for d, n in cited_by_inputs} <= carried

    # what users see: every citation resolves to a stored passage, and was in its phase's prompt
    prompts = {"security": security, "customers": customers, "synthesis": model.prompt_of("synthesis")}
    for key, text in texts.items():
        cited = planes.coordinator.reads.citations(plan_id, text)
        assert cited and not any(c.unresolved for c in cited), key
        assert {c.ref for c in cited} <= {p.ref for p in passages_in(prompts[key])}, key
        for c in cited:
            passage = chunks[c.ref]
            assert (c.title, c.heading_path, c.passage_start, c.passage_end) == (
                passage.title, passage.heading_path, passage.start, passage.end)


def test_a_plan_without_a_briefing_gets_no_briefing_section(planes: Planes) -> None:
    model = recorded(planes)
    planes.coordinator.submit(team(briefing=[]))
    planes.run_all()
    assert len(model.requests) == 3
    assert not any("## Briefing" in r.prompt or passages_in(r.prompt) for r in model.requests)


def test_the_passages_fit_the_budget(small_budget: Planes) -> None:
    model = recorded(small_budget)
    plan_id = small_budget.coordinator.submit(team()).plan_id
    small_budget.run_all()
    chunks = {c.ref: c for c in briefings.chunks(small_budget.db, plan_id)}
    given = [[chunks[p.ref] for p in passages_in(r.prompt)] for r in model.requests]
    assert all(given) and all(sum(passage_tokens(c) for c in g) <= 70 for g in given)
    assert max(len(g) for g in given) < len(chunks)  # the budget left some out


def test_no_budget_means_no_passages(template_db: Path, fast_dir: Path) -> None:
    for p in _planes(template_db, fast_dir, briefing_context_tokens=0):
        model = recorded(p)
        p.coordinator.submit(team())
        p.run_all()
        assert model.requests and not any(passages_in(r.prompt) for r in model.requests)
