"""Properties of the plan schema's strictness: a generated plan with an unknown key at any
depth, a value of the wrong type or a number out of range is always an ``InvalidPlan``
naming that field — never another exception, never accepted — and every valid generated
plan round-trips through ``dump_plan`` and ``load_plan`` (as a mapping and as JSON text)."""

from __future__ import annotations

import copy
import json
import math
import string
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from orchestrator.briefing.entries import BriefingDocument
from orchestrator.core.errors import InvalidPlan
from orchestrator.plan.schema import (
    BoardPlan,
    Budget,
    Expert,
    ModelConfig,
    Skill,
    Synthesis,
    TeamPhase,
    TeamPlan,
    dump_plan,
    load_plan,
    slugify,
)
from tests.unit.bounded import bounded

Path = tuple[str | int, ...]

WORDS = st.text(string.ascii_letters + string.digits + " .,?!'é董🚀", min_size=1, max_size=20).filter(str.strip)
NAMES = st.tuples(st.sampled_from(string.ascii_letters),
                  st.text(string.ascii_letters + string.digits + " _.'-", max_size=10)).map("".join)
IDS = st.tuples(st.sampled_from(string.ascii_lowercase + string.digits),
                st.text(string.ascii_lowercase + string.digits + "_-", max_size=8)).map("".join)
MODEL_NAMES = st.text(string.ascii_letters + string.digits + "_.-", min_size=1, max_size=12)
LABELS = st.tuples(st.sampled_from(string.ascii_letters + string.digits),
                   st.text(string.ascii_letters + string.digits + "_.:/=-", max_size=10)).map("".join)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(None), strategy)


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


MODELS = st.builds(lambda *v: drop_none(dict(zip(
    ("provider", "model", "first_chunk_timeout", "idle_timeout", "deadline", "max_output_tokens",
     "context_window", "temperature", "max_retries", "api_key_env", "base_url"), v, strict=True))),
    optional(st.sampled_from(["offline", "openai", "ollama", "anthropic"])), optional(WORDS),
    optional(st.floats(0.001, 3600)), optional(st.floats(0.001, 3600)), optional(st.floats(0.001, 86400)),
    optional(st.integers(16, 200_000)), optional(st.integers(256, 10_000_000)), optional(st.floats(0, 2)),
    optional(st.integers(0, 10)), optional(st.sampled_from(["OPENAI_API_KEY", "K_1"])),
    optional(st.sampled_from(["https://api.example.com/v1", "http://10.0.0.5:8000"])))
SKILLS = st.builds(lambda name, text, mode: drop_none({"name": name, "text": text, "mode": mode}),
                   WORDS, WORDS, optional(st.sampled_from(["full", "summary"])))


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    """A valid board or team plan, as a client would send it."""
    names = draw(st.lists(NAMES, min_size=2, max_size=5, unique_by=slugify))
    experts = [drop_none({"name": n, "role": draw(WORDS), "skills": draw(optional(st.lists(SKILLS, max_size=2)))})
               for n in names[1:]]
    plan: dict[str, Any] = {"title": draw(WORDS), "question": draw(WORDS), "experts": experts,
                            "models": draw(st.dictionaries(MODEL_NAMES, MODELS, max_size=2)),
                            "labels": draw(st.lists(LABELS, max_size=3, unique=True)),
                            "max_debates": draw(st.integers(0, 10))}
    if draw(st.booleans()):
        plan["budget"] = {"max_tokens": draw(st.integers(1, 1_000_000_000))}
    if draw(st.booleans()):
        plan["briefing"] = [{"id": doc, "title": draw(WORDS), "text": draw(WORDS)}
                            for doc in draw(st.lists(IDS, min_size=1, max_size=2, unique=True))]
    if draw(st.booleans()):
        plan.update(kind="board", moderator={"name": names[0], "role": draw(WORDS)},
                    rounds=draw(st.integers(1, 10)), missing_expert=draw(st.sampled_from(["tolerate", "fatal"])))
        return plan
    ids = draw(st.lists(IDS.filter(lambda i: i != "synthesis"), min_size=1, max_size=4, unique=True))
    phases = [{"id": pid, "expert": draw(st.sampled_from(names[1:])).strip(), "prompt": draw(WORDS),
               "depends_on": draw(st.lists(st.sampled_from(ids[:k]), unique=True)) if k else []}
              for k, pid in enumerate(ids)]  # dependencies only on earlier phases: never a cycle
    plan.update(kind="team", phases=phases, synthesis={"expert": draw(st.sampled_from(names[1:])).strip()},
                divergence=draw(st.sampled_from(["model", "lexical", "off"])))
    return plan


@bounded(120, deadline_ms=1000)
@given(plans())
def test_valid_plans_round_trip_through_dump_and_load(doc: dict[str, Any]) -> None:
    plan = load_plan(copy.deepcopy(doc))
    dumped = dump_plan(plan)
    assert load_plan(copy.deepcopy(dumped)) == plan
    assert load_plan(json.dumps(dumped, ensure_ascii=False)) == plan
    assert dump_plan(load_plan(dumped)) == dumped


# ---------------------------------------------------------------- where each model sits in a plan


def objects(doc: dict[str, Any]) -> list[tuple[Path, type[BaseModel]]]:
    """Every mapping of ``doc`` that is a schema object, with its path and model."""
    found: list[tuple[Path, type[BaseModel]]] = [((), BoardPlan if doc["kind"] == "board" else TeamPlan)]
    if "moderator" in doc:
        found.append((("moderator",), Expert))
    for i, e in enumerate(doc["experts"]):
        found.append((("experts", i), Expert))
        found += [(("experts", i, "skills", j), Skill) for j in range(len(e.get("skills", [])))]
    found += [(("models", name), ModelConfig) for name in doc["models"]]
    found += [(("phases", i), TeamPhase) for i in range(len(doc.get("phases", [])))]
    found += [(("briefing", i), BriefingDocument) for i in range(len(doc.get("briefing", [])))]
    found += [(("budget",), Budget)] if "budget" in doc else []
    found += [(("synthesis",), Synthesis)] if "synthesis" in doc else []
    return found


def field_name(path: Path) -> str:
    """A path as the errors spell it: ``experts[1].skills[0].name``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def at(doc: dict[str, Any], path: Path) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def names_field(err: InvalidPlan, path: Path) -> bool:
    name = field_name(path)
    return any(d["field"] == name or d["field"].startswith((name + ".", name + "[")) for d in err.details)


def rejected(doc: Any) -> InvalidPlan:
    try:
        load_plan(doc)
    except InvalidPlan as err:
        assert err.details and all(isinstance(d["field"], str) for d in err.details)
        return err
    raise AssertionError(f"accepted: {doc!r}")


UNKNOWN = st.text(string.ascii_letters + "_", min_size=1, max_size=12)


@bounded(150, deadline_ms=1000)
@given(plans(), st.data())
def test_an_unknown_key_at_any_depth_is_refused_by_name(doc: dict[str, Any], data: st.DataObject) -> None:
    path, model = data.draw(st.sampled_from(objects(doc)))
    key = data.draw(UNKNOWN.filter(lambda k: k not in model.model_fields and k not in ("plan",)))
    at(doc, path)[key] = data.draw(st.sampled_from([None, 1, "x", [], {}]))
    err = rejected(doc)
    assert names_field(err, (*path, key)) and "unknown field" in str(err.details)


# a value of each kind, and the kinds a field of each annotation must refuse (strict: no coercion)
VALUES = {"str": "2", "int": 2, "float": 2.5, "bool": True, "list": ["x"], "dict": {"a": 1}}
ACCEPTS = {str: {"str"}, int: {"int"}, float: {"int", "float"}, bool: {"bool"}, list: {"list"}, dict: {"dict"}}


def kinds(model: type[BaseModel], name: str) -> set[str]:
    """The value kinds a field's annotation accepts (its union's members)."""
    annotation = model.model_fields[name].annotation
    members = getattr(annotation, "__args__", None) if type(annotation).__name__ == "UnionType" else None
    accepted: set[str] = set()
    for member in members or (annotation,):
        origin = getattr(member, "__origin__", member)
        if isinstance(origin, type) and issubclass(origin, BaseModel):
            accepted.add("dict")  # a nested object: budget, moderator, synthesis
        accepted |= ACCEPTS.get(origin, {"str"} if "Literal" in repr(member) else set())
    return accepted


@bounded(200, deadline_ms=1000)
@given(plans(), st.data())
def test_a_value_of_the_wrong_type_is_refused_by_name(doc: dict[str, Any], data: st.DataObject) -> None:
    path, model = data.draw(st.sampled_from(objects(doc)))
    typed = [n for n in model.model_fields if kinds(model, n) and n != "kind"]
    name = data.draw(st.sampled_from(typed))
    wrong = [k for k in VALUES if k not in kinds(model, name)]
    at(doc, path)[name] = VALUES[data.draw(st.sampled_from(wrong))]
    assert names_field(rejected(doc), (*path, name))


# every bounded number of the schema, with values just outside its bounds (and NaN, infinities)
OUT_OF_RANGE: dict[tuple[type[BaseModel], str], list[Any]] = {
    (BoardPlan, "rounds"): [0, 11, -1], (BoardPlan, "max_debates"): [-1, 11],
    (TeamPlan, "max_debates"): [-1, 11, 10**30], (Budget, "max_tokens"): [0, 1_000_000_001],
    (ModelConfig, "first_chunk_timeout"): [0, 0.0, -1.5, 3600.01, math.nan, math.inf],
    (ModelConfig, "idle_timeout"): [0, 3601, math.nan, -math.inf], (ModelConfig, "deadline"): [0, 86400.5, math.nan],
    (ModelConfig, "max_output_tokens"): [15, 200_001], (ModelConfig, "context_window"): [255, 10_000_001],
    (ModelConfig, "temperature"): [-0.001, 2.001, math.nan, math.inf], (ModelConfig, "max_retries"): [-1, 11],
}


@bounded(150, deadline_ms=1000)
@given(plans(), st.data())
def test_a_number_out_of_range_is_refused_by_name(doc: dict[str, Any], data: st.DataObject) -> None:
    doc.setdefault("budget", {"max_tokens": 5})
    doc["models"].setdefault("m", {})
    path, model = data.draw(st.sampled_from([(p, m) for p, m in objects(doc)
                                             if any(model_ is m for model_, _ in OUT_OF_RANGE)]))
    name = data.draw(st.sampled_from([n for m, n in OUT_OF_RANGE if m is model]))
    at(doc, path)[name] = data.draw(st.sampled_from(OUT_OF_RANGE[(model, name)]))
    assert names_field(rejected(doc), (*path, name))


JUNK = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), inner,
                                                            max_size=3)),
                    max_leaves=8)


@bounded(150, deadline_ms=1000)
@given(plans(), st.data())
def test_any_value_anywhere_is_a_plan_or_an_invalid_plan(doc: dict[str, Any], data: st.DataObject) -> None:
    """Junk (ints as keys, NaN, nesting) in place of any value: never another exception."""
    paths: list[Path] = []

    def walk(node: Any, path: Path) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            paths.append((*path, key))
            walk(child, (*path, key))

    walk(doc, ())
    path = data.draw(st.sampled_from(paths))
    at(doc, path[:-1])[path[-1]] = data.draw(JUNK)
    try:
        load_plan(doc)
    except InvalidPlan as err:
        assert err.details and all(isinstance(d["field"], str) for d in err.details)
