"""The plans of an eval: one per item and arm, filled from the arm's template in the record.

- **panel** — the user's template (a board or a team, any protocol), with the spec's
  ``models`` merged in and ``decide`` overridden when the spec says so;
- **single** — a team of one expert (``solver``) with one phase on the baseline's model, decide
  ``vote``, no synthesis, divergence off: one model call per item;
- **self_consistency** — the same with n experts ``sample-1`` … ``sample-n`` on one model: the
  offline solver draws per expert name, so they are n independent samples, and their vote is
  the majority of n samples;
- **judge** (free-text scoring) — a one-phase team whose answer is a choice of ``correct`` /
  ``incorrect``, one per item and distinct answer, shared by every arm.

Baselines take the template's question, its first expert's role and system prompt, its first
phase's prompt (a team's) and its briefing, so they are asked what the panel is asked. Every
plan's ``task_id`` is ``eval:<name>:<arm>:<item>``, which makes submitting it again return the
same plan, and it carries the labels ``eval=<name>`` and ``arm=<arm>``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from pydantic import ValidationError

from orchestrator.core.errors import InvalidEval
from orchestrator.deliberation.answers import ChoiceAnswer, NumberAnswer, normalise_text
from orchestrator.plan.schema import slugify

SLOT = "{question}"
MAX_SAMPLES = 24  # a plan has at most 24 experts
MIN_SAMPLES = 3  # self-consistency sized auto: at least this many
JUDGE = "judge"  # the judge plans' arm label
JUDGE_SLOTS = re.compile(r"\{(question|reference|answer)\}")
DEFAULT_PROMPT = "Answer the question. Work it out step by step, then state your answer."
JUDGE_QUESTION = ("Grade an answer against the reference answer.\n\nQuestion: {question}\n\n"
                  "Reference answer: {reference}\n\nCandidate answer: {answer}\n\n"
                  "Is the candidate answer correct, that is, does it say what the reference answer says?")
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def invalid(field: str, message: str) -> InvalidEval:
    return InvalidEval(f"{field}: {message}" if field else message, details=[{"field": field, "message": message}])


# ------------------------------------------------------------------ names


def item_key(item_id: str) -> str:
    """The item's part of a task id: its id when that is a plain one, else a digest of it."""
    if _PLAIN_ID.fullmatch(item_id):
        return item_id
    return "sha-" + hashlib.sha256(item_id.encode()).hexdigest()[:16]


def task_id(eval_name: str, arm: str, item_id: str) -> str:
    return f"eval:{eval_name}:{arm}:{item_key(item_id)}"


def judge_task_id(eval_name: str, item_id: str, answer: str | float) -> str:
    """The judge plan of one answer to one item: answers that read the same share it."""
    digest = hashlib.sha256(normalise_text(answer_text(answer)).encode()).hexdigest()[:16]
    return f"eval:{eval_name}:{JUDGE}:{item_key(item_id)}:{digest}"


def labels(eval_name: str, arm: str) -> list[str]:
    return [f"eval={eval_name}", f"arm={arm}"]


def answer_text(value: str | float) -> str:
    """An answer as text: a whole number without its ``.0``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


# ------------------------------------------------------------------ answers


def answer_spec(item: dict[str, Any], scoring: dict[str, Any]) -> dict[str, Any]:
    """The ``answer:`` of an item's plans: its choices, or a number within the tolerance; free
    text when a judge grades."""
    if scoring["method"] == "judge":
        return {"type": "text"}
    if item.get("choices") is not None:
        return {"type": "choice", "options": list(item["choices"])}
    return {"type": "number", "tolerance": scoring["tolerance"]}


def answer_problem(item: dict[str, Any], scoring: dict[str, Any]) -> str | None:
    """Why the item's answer cannot be declared in a plan (choices that read the same), or None."""
    spec = answer_spec(item, scoring)
    try:
        if spec["type"] == "choice":
            ChoiceAnswer.model_validate(spec)
        elif spec["type"] == "number":
            NumberAnswer.model_validate(spec)
    except ValidationError as exc:
        return f"choices: {exc.errors()[0]['msg'].removeprefix('Value error, ')}"
    return None


# ------------------------------------------------------------------ templates


def panel_template(template: Any, *, models: dict[str, Any], decide: str | None) -> dict[str, Any]:
    """The user's plan template made the panel's: the spec's models merged, ``decide``
    overridden; its own ``task_id`` and ``answer`` give way to the item's."""
    if not isinstance(template, dict) or template.get("kind") not in ("board", "team"):
        raise invalid("plan", "the plan template must be a board or team plan (a mapping with kind: board or team)")
    plan = copy.deepcopy(template)
    plan.pop("task_id", None)
    plan.pop("answer", None)
    if not isinstance(plan.get("question"), str) or SLOT not in plan["question"]:
        raise invalid("plan.question", f"the template's question must hold the slot {SLOT}, which each item fills")
    for i, doc in enumerate(plan.get("briefing") or []):
        if isinstance(doc, dict) and doc.get("path") is not None:
            raise invalid(f"plan.briefing[{i}].path", "an eval's template carries its briefing as text, not paths")
    own = plan.get("models") or {}
    if not isinstance(own, dict):
        raise invalid("plan.models", "a mapping of model names to models")
    for name, config in models.items():
        if name in own and own[name] != config:
            raise invalid(f"models.{name}", "the plan template defines this model differently")
    if own or models:
        plan["models"] = {**own, **models}
    if decide is not None:
        plan["decide"] = decide
    return plan


def baseline_template(panel: dict[str, Any], names: list[str], model: str) -> dict[str, Any]:
    """A team of ``names`` on ``model``, one phase each, decided by a vote of their verdicts."""
    experts = panel.get("experts") or [{}]
    first = experts[0] if isinstance(experts[0], dict) else {}
    phases = panel.get("phases") if panel.get("kind") == "team" else None
    prompt = phases[0].get("prompt") if phases and isinstance(phases[0], dict) else None
    expert = {"role": first.get("role") or "Solver", "model": model,
              **({"system": first["system"]} if first.get("system") else {})}
    plan: dict[str, Any] = {
        "kind": "team", "title": panel.get("title", "eval"), "question": panel["question"],
        "experts": [{"name": n, **expert} for n in names],
        "phases": [{"id": slugify(n), "expert": n, "prompt": prompt or DEFAULT_PROMPT} for n in names],
        "decide": "vote", "divergence": "off", "max_debates": 0,
    }
    for key in ("models", "labels", "briefing"):
        if panel.get(key):
            plan[key] = copy.deepcopy(panel[key])
    return plan


def replicate(sample: dict[str, Any], n: int) -> dict[str, Any]:
    """A self-consistency template (one expert, ``sample-1``) with ``n`` samples."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES:
        raise ValueError(f"samples: an integer from 1 to {MAX_SAMPLES}, got {n!r}")
    plan = copy.deepcopy(sample)
    expert, phase = plan["experts"][0], plan["phases"][0]
    names = [f"sample-{i}" for i in range(1, n + 1)]
    plan["experts"] = [{**expert, "name": name} for name in names]
    plan["phases"] = [{**phase, "id": name, "expert": name} for name in names]
    return plan


def choose_samples(ratio: float) -> int:
    """The odd number of samples nearest ``ratio`` (the panel's tokens per item over one
    sample's), at least :data:`MIN_SAMPLES`, at most the odd number below the expert limit."""
    top = MAX_SAMPLES if MAX_SAMPLES % 2 else MAX_SAMPLES - 1
    n = max(MIN_SAMPLES, round(ratio))
    if n % 2 == 0:
        n = n + 1 if ratio >= n else n - 1
    return min(max(n, MIN_SAMPLES), top)


def judge_template(panel: dict[str, Any], eval_name: str, model: str) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "kind": "team", "title": f"{eval_name}: judge", "question": JUDGE_QUESTION,
        "experts": [{"name": "judge", "role": "Impartial grader of answers", "model": model}],
        "phases": [{"id": "grade", "expert": "judge",
                    "prompt": "Compare the candidate answer with the reference answer and grade it."}],
        "decide": "vote", "divergence": "off", "max_debates": 0,
    }
    if panel.get("models"):
        plan["models"] = copy.deepcopy(panel["models"])
    return plan


# ------------------------------------------------------------------ filled per item


def fill(record: dict[str, Any], arm: dict[str, Any], item: dict[str, Any], *,
         samples: int | str | None = None) -> dict[str, Any]:
    """The plan of ``item`` in ``arm`` (``samples``: a self-consistency arm's n, when its record says auto)."""
    plan = copy.deepcopy(arm["plan"])
    if arm["kind"] == "self_consistency":
        n = samples if samples is not None else arm.get("samples")
        if not isinstance(n, int):
            raise ValueError("a self-consistency arm with samples: auto needs its number of samples")
        plan = replicate(plan, n)
    plan["question"] = plan["question"].replace(SLOT, item["question"])
    plan["answer"] = answer_spec(item, record["scoring"])
    return _tagged(plan, record["name"], arm["name"], task_id(record["name"], arm["name"], item["id"]), item["id"])


def fill_judge(record: dict[str, Any], item: dict[str, Any], answer: str | float) -> dict[str, Any]:
    """The judge plan of one answer to ``item``."""
    plan = copy.deepcopy(record["judge"]["plan"])
    values = {"question": item["question"], "reference": answer_text(item["answer"]), "answer": answer_text(answer)}
    plan["question"] = JUDGE_SLOTS.sub(lambda m: values[m.group(1)], plan["question"])
    plan["answer"] = {"type": "choice", "options": ["correct", "incorrect"]}
    return _tagged(plan, record["name"], JUDGE, judge_task_id(record["name"], item["id"], answer), item["id"])


def _tagged(plan: dict[str, Any], eval_name: str, arm: str, tid: str, item_id: str) -> dict[str, Any]:
    ours = labels(eval_name, arm)
    plan["task_id"] = tid
    plan["labels"] = [*(x for x in plan.get("labels") or [] if x not in ours), *ours]
    plan["title"] = f"{plan.get('title', 'eval')} · {item_id}"[:300]
    return plan


def model_identity(plan: dict[str, Any], name: str) -> str:
    """What a model name stands for in ``plan``: its definition there, else the registry's name."""
    models = plan.get("models") or {}
    if name in models:
        return json.dumps(models[name], sort_keys=True)
    return f"registry:{name}"


_FAMILY = re.compile(r"[a-z]+")


def model_family(plan: dict[str, Any], name: str, registry: dict[str, dict[str, Any]] | None = None) -> str:
    """The family of the model a name stands for in ``plan`` (its definition there, else the
    operator's ``registry`` when known): the offline model is one family; any other is the
    leading letters of its model name, after an ``org/`` prefix — ``gpt-4o`` and
    ``gpt-4o-mini`` are ``gpt``, ``claude-3-5-haiku-latest`` and ``claude-sonnet-4-5``
    ``claude``, ``llama3.1:8b`` and ``meta-llama/Llama-3.1-8B`` ``llama``, whichever provider
    serves them. A name defined nowhere it can be read is its own family (``registry:NAME``)."""
    spec = (plan.get("models") or {}).get(name) or (registry or {}).get(name)
    if spec is None:
        return f"registry:{name}"
    if spec.get("provider", "offline") == "offline":
        return "offline"
    model = str(spec.get("model") or "").lower().rsplit("/", 1)[-1]
    found = _FAMILY.match(model)
    return found.group(0) if found else f"{spec.get('provider')}:{model}"
