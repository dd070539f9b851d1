"""Each expert's request, briefed: the passages of its plan's briefing that matter to its
call, added to its prompt within the context budget.

The phase runner's prepare step calls :meth:`Briefer.brief` after
:func:`orchestrator.plan.prompts.build_request`. What it costs:

- a plan without a briefing costs nothing — its parsed spec (cached per worker) says so,
  and no statement is sent;
- a plan with one costs each briefed phase ONE read (:func:`storage.briefings.candidates`:
  every search tier, the passages the phase's inputs cite, the fallback openings);
- the optional reranker is loaded once per process, at the first briefed call (a worker
  that never sees a briefing never imports it).

Which passages: those the search ranks first for the call's own task (the phase's prompt),
then for the expert's role, then for the plan's question (:mod:`.retrieval`); and the
passages its inputs cite — after those for an expert, before them for a summary or a
synthesis, which reports what the others drew on, so it can carry their citations
through. They fit :func:`passage_budget`: the prompt is never summarised, so they are
measured against what the model's window leaves after the instructions.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from orchestrator.briefing.citations import find_citations
from orchestrator.briefing.passages import retrieve
from orchestrator.briefing.rerank import Reranker, load_reranker
from orchestrator.core.settings import Settings
from orchestrator.gateway.tokens import request_tokens
from orchestrator.gateway.types import ChatRequest, ModelSpec
from orchestrator.plan.prompts import briefing_overhead, with_briefing
from orchestrator.plan.schema import BoardPlan, TeamPlan
from storage import Database
from storage.read_models import PhaseRecord

#: the phases whose prompt carries passages (a divergence check answers JSON about its inputs)
BRIEFED_KINDS = frozenset({"opening", "turn", "round_summary", "final_summary", "expert", "debate", "synthesis"})
#: the phases that report what others said: the passages their inputs cite come first
RECORD_KINDS = frozenset({"round_summary", "final_summary", "synthesis"})


class Briefer:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._reranker: Reranker | None = None
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def reranker(self) -> Reranker | None:
        """The optional reranker, loaded at first use, once per process (None when absent)."""
        with self._lock:
            if not self._loaded:
                self._reranker = load_reranker(self.settings)
                self._loaded = True
            return self._reranker

    def brief(self, plan: BoardPlan | TeamPlan, phase: PhaseRecord, texts: Mapping[str, str], spec: ModelSpec,
              request: ChatRequest) -> ChatRequest:
        """``request`` with the passages picked for this call (unchanged for a plan without
        a briefing, a phase that is not briefed, or no room). ``texts`` are the full texts
        of the phase's inputs, as its claim read them."""
        if not plan.briefing or phase.kind not in BRIEFED_KINDS:
            return request
        budget = passage_budget(spec, request, self.settings.briefing_context_tokens)
        if budget <= 0:
            return request
        expert = plan.expert(phase.expert) if phase.expert else None
        cited = [ref.key for text in texts.values() for ref in find_citations(text)]
        passages = retrieve(self.db, phase.plan_id, role=expert.role if expert else "", prompt=task_of(phase),
                            question=plan.question, budget_tokens=budget, reranker=self.reranker, cited=cited,
                            cited_first=phase.kind in RECORD_KINDS)
        return with_briefing(request, passages)


def task_of(phase: PhaseRecord) -> str:
    """What this call must do, in the plan's words: a team phase's prompt, a debate's topic."""
    if phase.kind == "debate":
        return str(phase.meta.get("topic") or "")
    return str(phase.meta.get("prompt") or "")


def passage_budget(spec: ModelSpec, request: ChatRequest, cap: int) -> int:
    """Tokens the passages may take: at most ``cap``, and at most half of what the window
    leaves once the answer's reserve and the request's instructions are counted (the other
    half stays for the inputs, which can be summarised when they do not fit; passages,
    being in the prompt, are never summarised)."""
    bare = ChatRequest(request.system, request.prompt, (), purpose=request.purpose, hints=request.hints)
    free = spec.context_window - spec.max_output_tokens - request_tokens(bare) - briefing_overhead()
    return max(0, min(cap, free // 2))
