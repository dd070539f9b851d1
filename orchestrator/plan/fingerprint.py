"""What a phase is sent, as one hash: the key a what-if fork matches stored results by.

A worker stores :func:`fingerprint` with every completed phase (``phases.sent_hash``, in the
completing write). A fork (:mod:`orchestrator.plan.forks`) computes the same function for each of
its own phases from the fork's plan and the source's stored inputs, without running a model,
and copies a phase's stored result only when the two are equal — so a stored output is never
restored onto a phase that would be sent something else.

What goes in, for a phase (the prompt itself is built on the worker from these, so the hash is
computed from them, the same way on both sides):

- the **request** :func:`~orchestrator.plan.prompts.build_request` builds from the plan's spec,
  the phase and its inputs: the system prompt (role, system text, skills), the prompt (question,
  rounds, task, the verdict line it must end with, a review's labels and order), each context
  block's source, title and the SHA-256 of its text, and the structured hints (panel, who spoke,
  who is absent, the decision a chair must state), and the steering notes it was given —
  everything the model is sent but the briefing's passages;
- the **inputs**: every transitive input's key, status, error code, stored verdict and the
  SHA-256 of its full text (``contents.sha256``) — so a changed upstream changes the hash of
  everything downstream, whatever the prompt quotes of it;
- the **models**, as resolved by the operator's registry (:class:`ModelResolver`): for each
  model the phase may run, in the order it tries them (``meta.models`` when a fork pinned them,
  else the expert's ``model`` and ``fallback_models``), its provider, model, base URL,
  temperature, output and context limits and options (an offline model's stances and solver
  included; its latencies, timeouts, retries, keys and prices are how and what it costs, not
  what it answers);
- the **briefing**: each document's id, title, format and the SHA-256 of its text, and the
  retrieval settings (``CONCLAVE_BRIEFING_CONTEXT_TOKENS``, ``CONCLAVE_BRIEFING_RERANK``) — the
  passages are picked on the worker from these, the request and the model's window;
- the **answer** the plan declares (how a verdict is read) and, for the ``decision`` phase, its
  protocol and the seed its draws use (``meta.seed``: a fork keeps its source's);
- the phase's own key, kind, expert, round, group and stored ``meta`` (a fork's pins aside);
- :data:`VERSION`, raised when this definition changes.

Not in it: who calls and what it costs (title, labels, ``task_id``, budgets, ``max_debates``,
``stop_when`` — a copied phase's effects on the plan are re-derived from the fork's own plan),
and the operator's retrieval code and chunking settings (a deployment, like a Conclave upgrade).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.gateway.types import ChatRequest, ModelSpec
from orchestrator.plan.prompts import build_request
from orchestrator.plan.registry import ModelResolver
from orchestrator.plan.schema import BoardPlan, TeamPlan
from storage.read_models import PhaseRecord

#: raised whenever what goes into the hash changes: a result stored under another definition
#: is never matched again
VERSION = 1
#: meta keys a fork writes that are not sent: its model pins (in the hash as resolved models)
#: and the decision's seed (in it as the decision's seed)
FORK_META = frozenset({"models", "seed"})
#: an offline model's options that change when it answers, not what
TIMING_OPTIONS = frozenset({"latency", "first_chunk_delay"})


def models_for(plan: BoardPlan | TeamPlan, phase: PhaseRecord) -> list[str]:
    """The models a phase runs on, in the order they are tried: the ones a fork pinned on it
    (``meta.models``: a phase before the fork's ``from`` keeps its source's models), else its
    expert's ``model`` and ``fallback_models``. None for a phase no expert speaks."""
    pinned = phase.meta.get("models")
    if pinned:
        return [str(m) for m in pinned]
    if not phase.expert or phase.kind == "decision":
        return []
    return plan.expert(phase.expert).models


def decision_seed(phase: PhaseRecord) -> str:
    """The seed of a decision phase's draws: its plan's id, or the one a fork kept (``meta.seed``)."""
    return str(phase.meta.get("seed") or phase.plan_id)


def content_hash(text: str) -> str:
    """A text's hash as ``contents.sha256`` stores it."""
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint(plan: BoardPlan | TeamPlan, phase: PhaseRecord, inputs: Sequence[PhaseRecord],
                texts: Mapping[str, str], models: ModelResolver, notes: Sequence[Mapping[str, Any]] = ()) -> str:
    """The hash of what ``phase`` of ``plan`` is sent, given its transitive ``inputs`` (plan
    order), their full texts (``texts``: input phase id -> text, completed ones only) and the
    steering notes its claim read (a fork has none: a phase that was steered runs again).
    Raises what :meth:`ModelResolver.spec` raises for a model this deployment will not run."""
    return _digest(_sent(plan, phase, inputs, texts, models, notes))


def _sent(plan: BoardPlan | TeamPlan, phase: PhaseRecord, inputs: Sequence[PhaseRecord],
          texts: Mapping[str, str], models: ModelResolver, notes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    decision = phase.kind == "decision"
    return {
        "v": VERSION,
        "phase": {"key": phase.key, "kind": phase.kind, "expert": phase.expert, "round": phase.round,
                  "group": phase.group_key, "meta": {k: v for k, v in phase.meta.items() if k not in FORK_META}},
        "request": None if decision else _request(build_request(plan, phase, inputs, dict(texts), notes)),
        "inputs": [{"key": p.key, "kind": p.kind, "status": str(p.status), "error_code": p.error_code,
                    "verdict": p.verdict, "text": content_hash(texts[p.id]) if p.id in texts else None}
                   for p in inputs],
        "models": [_model(models.spec(plan, name)) for name in models_for(plan, phase)],
        "briefing": _briefing(plan, models),
        "answer": None if plan.answer is None else plan.answer.model_dump(mode="json"),
        "decision": {"protocol": plan.decide, "seed": decision_seed(phase)} if decision else None,
    }


def _request(request: ChatRequest) -> dict[str, Any]:
    return {"system": request.system, "prompt": request.prompt, "purpose": request.purpose,
            "context": [[b.source, b.title, content_hash(b.text), b.summarised] for b in request.context],
            "hints": dict(request.hints)}


def _model(spec: ModelSpec) -> dict[str, Any]:
    return {"provider": spec.provider, "model": spec.model, "base_url": spec.base_url,
            "temperature": spec.temperature, "max_output_tokens": spec.max_output_tokens,
            "context_window": spec.context_window,
            "options": {k: v for k, v in spec.options.items() if k not in TIMING_OPTIONS}}


def _briefing(plan: BoardPlan | TeamPlan, models: ModelResolver) -> dict[str, Any] | None:
    if not plan.briefing:
        return None
    s = models.settings
    return {"documents": [{"id": d.id, "title": d.title, "format": d.format,
                           "text": content_hash(d.text) if d.text is not None else None, "path": d.path}
                          for d in plan.briefing],
            "context_tokens": s.briefing_context_tokens, "rerank": s.briefing_rerank}


def _digest(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
