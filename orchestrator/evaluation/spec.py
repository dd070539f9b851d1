"""The eval spec a user writes, and the record resolved from it that the database keeps.

An eval spec (YAML or JSON)::

    name: arithmetic                 # a slug: part of the label eval=<name> and of task ids
    generate: {n: 300, options: 2, seed: 0}   # or dataset: items.jsonl (beside this file)
    plan: panel.yaml                 # a board or team plan whose question holds {question}
    decide: vote                     # optional: overrides the template's protocol
    tolerance: 0                     # numeric items: the answer's tolerance (default 0)
    models: {solver: {provider: offline, options: {solver: {skill: 0.7}}}}  # merged into every arm's plan
    baselines:
      single: {model: solver}                    # one expert, one call
      self_consistency: {model: solver, n: 5}    # n samples of one model, majority vote; n: auto
    scoring: exact                   # exact | numeric | {judge: {model: NAME}}

Every rejection is an :class:`~orchestrator.core.errors.InvalidEval` naming the field
(``baselines.single.model``, ``plan.experts[1].name``, ``dataset: line 7: answer: …``).

:func:`resolve` reads the spec, its plan template and its items (read or generated) and
builds the **record**, a JSON object that holds everything the eval is, so that its plans
can be rebuilt and its report recomputed from the database alone::

    {"format": 1, "name": …, "limit": int | null,
     "spec": {the validated spec as written},
     "scoring": {"method": "exact" | "numeric" | "judge", "tolerance": float, "judge": {"model"} | null},
     "items": [{"id", "question", "choices"?, "answer", "source"?}, …],
     "arms": [{"name": "panel", "kind": "panel", "plan": {…}},
              {"name": "single", "kind": "single", "model": …, "plan": {…}},
              {"name": "self_consistency", "kind": "self_consistency", "model": …,
               "samples": int | "auto", "plan": {… one expert, sample-1 …}}],
     "judge": {"model": …, "plan": {…}} | null}

Each arm's ``plan`` is a template: its ``question`` holds the ``{question}`` slot, and
:mod:`.arms` fills it per item (answer, task id, labels; a self-consistency template is
replicated to its number of samples). The same spec file always resolves to the same record,
which is how a second run of an eval is known to be the same eval.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.control.eval_records import EVAL_NAME_RE
from orchestrator.core.errors import InvalidEval, InvalidPlan
from orchestrator.deliberation.answers import Protocol
from orchestrator.evaluation import arms
from orchestrator.evaluation.arms import invalid
from orchestrator.evaluation.datasets import InvalidItem, Item, generate, item_from_json, load_items
from orchestrator.plan.schema import ModelConfig, SafeLoader, parse_plan

FORMAT = 1
MAX_ITEMS = 10_000
MAX_SPEC_BYTES = 1_000_000
ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,80}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, strict=True)


class Generate(_Strict):
    n: int = Field(ge=1, le=MAX_ITEMS)
    options: int = Field(2, ge=2, le=26)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    numeric: bool = False


class Single(_Strict):
    model: ModelName


class SelfConsistency(_Strict):
    model: ModelName
    n: Annotated[int, Field(ge=1, le=arms.MAX_SAMPLES)] | Literal["auto"] = "auto"


class Baselines(_Strict):
    single: Single | None = None
    self_consistency: SelfConsistency | None = None


class Judge(_Strict):
    model: ModelName


class JudgeScoring(_Strict):
    judge: Judge


class EvalSpec(_Strict):
    name: str = Field(pattern=EVAL_NAME_RE)
    dataset: str | None = Field(None, min_length=1, max_length=1000)
    generate: Generate | None = None
    plan: str = Field(min_length=1, max_length=1000)
    decide: Protocol | None = None
    tolerance: float = Field(0.0, ge=0, le=1e12)
    baselines: Baselines = Field(default_factory=Baselines)
    models: dict[str, ModelConfig] = Field(default_factory=dict, max_length=50)
    scoring: Literal["exact", "numeric"] | JudgeScoring = "exact"

    @model_validator(mode="after")
    def _one_source(self) -> EvalSpec:
        if (self.dataset is None) == (self.generate is None):
            raise _FieldError("dataset", "give exactly one of dataset (a JSONL file) or generate ({n, options, seed})")
        return self


class _FieldError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_spec(data: Any) -> EvalSpec:
    """Validate a spec given as a mapping; :class:`InvalidEval` naming the first wrong field."""
    if not isinstance(data, dict):
        raise invalid("", f"an eval spec is a mapping (name, plan, dataset or generate, …), got {type(data).__name__}")
    try:
        return EvalSpec.model_validate(data)
    except ValidationError as exc:
        # deepest first: of a union's failed members, the one that got furthest says what is wrong
        details = sorted((_detail(err) for err in exc.errors()), key=lambda d: -_depth(d["field"]))
        raise InvalidEval(f"{details[0]['field']}: {details[0]['message']}" if details[0]["field"]
                          else details[0]["message"], details=details) from None


def _detail(err: Any) -> dict[str, str]:
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        return {"field": ctx_error.field, "message": ctx_error.message}
    field = ""
    for part in err["loc"]:
        if isinstance(part, int):
            field += f"[{part}]"
        elif not _is_union_member(str(part)):
            field += f".{part}" if field else str(part)
    if err["type"] == "extra_forbidden":
        return {"field": field, "message": "unknown field"}
    return {"field": field, "message": str(err["msg"]).removeprefix("Value error, ")}


def _depth(field: str) -> int:
    return field.count(".") + field.count("[")


def _is_union_member(part: str) -> bool:
    """pydantic names the member of a union it tried (``int``, ``literal['auto']``, ``JudgeScoring``)
    in an error's location: not a field."""
    return part in ("int", "float", "str", "bool") or part.startswith(("literal[", "constrained-")) \
        or part[:1].isupper()


@dataclass(frozen=True)
class Resolved:
    """A spec resolved: the record to store, and what the user should be warned about."""

    record: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.record["name"])


def resolve(path: str | Path, *, limit: int | None = None,
            registry: dict[str, dict[str, Any]] | None = None) -> Resolved:
    """Read the spec at ``path``, its plan template and items (relative to the spec's folder)
    and build the eval's record; ``limit``: only the first ``limit`` items (the record says so);
    ``registry``: the operator's models as the caller knows them (``{name: definition}``), for
    the judge's warning only."""
    path = Path(path)
    spec = parse_spec(_read_document(path, "spec", ""))
    base = path.parent
    items = _items(spec, base)
    if limit is not None:
        if limit < 1:
            raise invalid("limit", "must be at least 1")
        items = items[:limit]
    template = _read_document(base / spec.plan, "plan template", "plan")
    return build_record(spec, items, template, limit=limit, registry=registry)


def build_record(spec: EvalSpec, items: list[Item], template: Any, *, limit: int | None = None,
                 registry: dict[str, dict[str, Any]] | None = None) -> Resolved:
    """The record of ``spec`` over ``items`` with the panel's plan ``template`` (a mapping)."""
    if not items:
        raise invalid("dataset" if spec.dataset else "generate", "the eval has no items")
    scoring = _scoring(spec)
    keys: dict[str, str] = {}
    for i, item in enumerate(items):
        key = arms.item_key(item.id)
        if key in keys:
            raise invalid(f"items[{i}].id", f"{item.id!r} and {keys[key]!r} make the same task id")
        keys[key] = item.id
        problem = arms.answer_problem(item.to_json(), scoring)
        if problem:
            raise invalid(f"items[{i}]", f"item {item.id!r}: {problem}")
    models = {name: m.model_dump(mode="json", exclude_defaults=True) for name, m in spec.models.items()}
    panel = arms.panel_template(template, models=models, decide=spec.decide)
    record: dict[str, Any] = {
        "format": FORMAT, "name": spec.name, "limit": limit, "spec": spec.model_dump(mode="json"),
        "scoring": scoring, "items": [item.to_json() for item in items],
        "arms": [{"name": "panel", "kind": "panel", "plan": panel}], "judge": None,
    }
    if spec.baselines.single is not None:
        model = spec.baselines.single.model
        record["arms"].append({"name": "single", "kind": "single", "model": model,
                               "plan": arms.baseline_template(panel, ["solver"], model)})
    if spec.baselines.self_consistency is not None:
        sc = spec.baselines.self_consistency
        record["arms"].append({"name": "self_consistency", "kind": "self_consistency", "model": sc.model,
                               "samples": sc.n, "plan": arms.baseline_template(panel, ["sample-1"], sc.model)})
    if isinstance(spec.scoring, JudgeScoring):
        record["judge"] = {"model": spec.scoring.judge.model,
                           "plan": arms.judge_template(panel, spec.name, spec.scoring.judge.model)}
    try:
        check_record(record)
    except InvalidEval as exc:
        raise _as_spec_field(exc, record) from None
    return Resolved(record, _warnings(record, registry))


#: the spec's field an arm's plan comes from, named when it is not a valid plan
ARM_FIELDS = {"panel": "plan", "single": "baselines.single", "self_consistency": "baselines.self_consistency",
              "judge": "scoring.judge"}


def _as_spec_field(exc: InvalidEval, record: dict[str, Any]) -> InvalidEval:
    """A record's field as the spec's: the panel's ``arms[0].plan.experts[1].name`` is the
    template's ``plan.experts[1].name``; a baseline's or the judge's plan is its spec field's."""
    details = []
    for d in exc.details or []:
        field, message = str(d.get("field") or ""), str(d.get("message"))
        found = re.match(r"arms\[(\d+)\]\.plan|judge\.plan", field)
        if found:
            arm = record["arms"][int(found.group(1))]["name"] if found.group(1) else "judge"
            rest = field[found.end():].lstrip(".")
            if arm == "panel":
                field = f"plan.{rest}" if rest else "plan"
            else:
                field = ARM_FIELDS[arm]
                message = f"its plan's {rest}: {message}" if rest else message
        details.append({"field": field, "message": message})
    first = details[0] if details else {"field": "", "message": exc.message}
    return InvalidEval(f"{first['field']}: {first['message']}" if first["field"] else first["message"],
                       details=details or None)


def _scoring(spec: EvalSpec) -> dict[str, Any]:
    if isinstance(spec.scoring, JudgeScoring):
        return {"method": "judge", "tolerance": spec.tolerance, "judge": {"model": spec.scoring.judge.model}}
    return {"method": spec.scoring, "tolerance": spec.tolerance, "judge": None}


def _items(spec: EvalSpec, base: Path) -> list[Item]:
    if spec.generate is not None:
        g = spec.generate
        return generate(g.n, options=g.options, seed=g.seed, numeric=g.numeric)
    assert spec.dataset is not None
    where = base / spec.dataset
    try:
        items = load_items(where)
    except InvalidItem as exc:
        raise invalid("dataset", f"{spec.dataset}: {exc}") from None
    except OSError as exc:
        raise invalid("dataset", f"cannot read {str(where)!r}: {exc.strerror or exc}") from None
    if len(items) > MAX_ITEMS:
        raise invalid("dataset", f"{len(items)} items, at most {MAX_ITEMS}")
    return items


def _read_document(path: Path, what: str, field: str) -> Any:
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise invalid(field, f"the {what} {str(path)!r} is not a file")
        if size > MAX_SPEC_BYTES:
            raise invalid(field, f"the {what} is {size} bytes, at most {MAX_SPEC_BYTES}")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise invalid(field, f"cannot read the {what} {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise invalid(field, f"the {what} {str(path)!r} is not UTF-8 text") from None
    try:
        return json.loads(text) if text.lstrip().startswith("{") else yaml.load(text, Loader=SafeLoader)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise invalid(field, f"the {what} is not valid YAML/JSON: {str(exc).splitlines()[0]}") from None


# ------------------------------------------------------------------ the record


def check_record(record: Any) -> dict[str, Any]:
    """A record (as :func:`build_record` makes it, or as a client sent it) checked: its shape,
    its spec, its items, and each arm's plan filled with its first item must be a valid plan.
    :class:`InvalidEval` naming the field (``items[3].answer``, ``arms[1].plan.experts[0].model``)."""
    if not isinstance(record, dict):
        raise invalid("", "an eval record is a JSON object")
    expected = {"format", "name", "limit", "spec", "scoring", "items", "arms", "judge"}
    wrong = sorted(set(record) ^ expected)
    if wrong:
        raise invalid(wrong[0], "unknown field" if wrong[0] in record else "missing")
    if record["format"] != FORMAT:
        raise invalid("format", f"this server reads eval records of format {FORMAT}")
    spec = parse_spec(record["spec"])
    if record["name"] != spec.name:
        raise invalid("name", f"{record['name']!r} is not the spec's name {spec.name!r}")
    if record["scoring"] != _scoring(spec):
        raise invalid("scoring", "not the spec's scoring")
    items = record["items"]
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
        raise invalid("items", f"a list of 1 to {MAX_ITEMS} items")
    for i, data in enumerate(items):
        try:
            item = item_from_json(data)
        except InvalidItem as exc:
            raise invalid(f"items[{i}]", str(exc)) from None
        if item.to_json() != data:
            raise invalid(f"items[{i}]", "not in the item format (an answer must be a number without choices)")
    names = [a.get("name") if isinstance(a, dict) else None for a in record["arms"] or []]
    wanted = ["panel", *(["single"] if spec.baselines.single else []),
              *(["self_consistency"] if spec.baselines.self_consistency else [])]
    if names != wanted:
        raise invalid("arms", f"the spec's arms are {', '.join(wanted)}")
    for i, arm in enumerate(record["arms"]):
        _check_plan(f"arms[{i}].plan", arm, items[0], record)
    if (record["judge"] is None) != (record["scoring"]["method"] != "judge"):
        raise invalid("judge", "a judge plan exactly when scoring is judge")
    if record["judge"] is not None:
        plan = arms.fill_judge(record, items[0], "an answer")
        _parse("judge.plan", plan)
    return record


def _check_plan(where: str, arm: dict[str, Any], item: dict[str, Any], record: dict[str, Any]) -> None:
    if not isinstance(arm.get("plan"), dict):
        raise invalid(where, "a plan template (an object)")
    if arms.SLOT not in str(arm["plan"].get("question", "")):
        raise invalid(f"{where}.question", f"the plan's question must hold the slot {arms.SLOT}")
    samples = arm.get("samples")
    _parse(where, arms.fill(record, arm, item, samples=3 if samples == "auto" else samples))


def _parse(where: str, plan: dict[str, Any]) -> None:
    try:
        parse_plan(copy.deepcopy(plan))
    except InvalidPlan as exc:
        detail = (exc.details or [{}])[0]
        inner = detail.get("field") or ""
        field = f"{where}.{inner}" if inner else where
        raise invalid(field, str(detail.get("message") or exc.message)) from None


# ------------------------------------------------------------------ warnings


def _warnings(record: dict[str, Any], registry: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """A judge of the model family of an expert it judges (:func:`.arms.model_family`, read in
    the operator's ``registry`` when the caller has it) grades its own kind of answer."""
    judge = record["judge"]
    if judge is None:
        return []
    judged = arms.model_identity(judge["plan"], judge["model"])
    family = arms.model_family(judge["plan"], judge["model"], registry)
    for arm in record["arms"]:
        plan = arm["plan"]
        for expert in [*plan.get("experts", []), *([plan["moderator"]] if plan.get("moderator") else [])]:
            name = expert.get("model", "default")
            if arms.model_identity(plan, name) == judged:
                return [f"the judge runs the same model as an expert of the {arm['name']} arm ({name}): it grades "
                        "answers of its own kind, and tends to find them right"]
            if arms.model_family(plan, name, registry) == family:
                return [f"the judge ({judge['model']}) is of the same model family ({family}) as an expert of the "
                        f"{arm['name']} arm ({name}): it grades answers of its own kind, and tends to find them "
                        "right"]
    return []
