"""A what-if fork's overrides: a partial plan merged over its source's stored spec.

The format is the plan's own, partial: give only what changes.

- A mapping merges key by key into the source's (``models``, an expert, ``budget``, …); a
  ``null`` value removes the key (``budget: null``: the fork has no budget).
- A list of mappings (``experts``, a team's ``phases``, ``skills``, ``briefing``) merges item by
  item, by position: ``experts: [{}, {model: gpt}]`` changes the second expert's model and leaves
  the first as it is; items past the source's end are added; a ``null`` item removes that item.
- Any other list or value replaces the source's (``labels``, ``fallback_models``, ``question``).
- ``kind`` cannot change; ``task_id`` and ``labels`` are the fork's own (none unless given);
  the title, unless given, is the source's marked as a fork.

The merged plan is then validated whole, as a submitted plan is, and every error names its field
under ``overrides.`` (``overrides.experts[1].modle: unknown field — did you mean 'model'?``).

``conclave fork --set PATH=VALUE`` writes the same partial plan one field at a time
(:func:`assignments`): ``experts[1].model=gpt`` is ``{experts: [{}, {model: gpt}]}``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

import yaml

from orchestrator.core.errors import InvalidPlan, InvalidRequest
from orchestrator.plan.plan_text import SafeLoader

FIELD = "overrides"
#: the source's fields a fork never inherits: it has its own
OWN_FIELDS = ("task_id", "labels")
MAX_TITLE = 300


def merged(spec: dict[str, Any], overrides: Any, *, title: str) -> dict[str, Any]:
    """The fork's plan: ``overrides`` merged over the source's stored ``spec`` (see the module
    docstring), not yet validated. ``title``: the fork's title when the overrides give none.
    Raises :class:`InvalidPlan` naming ``overrides`` or the field under it."""
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise _refused(FIELD, "a partial plan: a mapping of the fields to change")
    if "kind" in overrides and overrides["kind"] != spec.get("kind"):
        raise _refused(f"{FIELD}.kind", f"a fork keeps its source's kind ({spec.get('kind')})")
    base = {k: copy.deepcopy(v) for k, v in spec.items() if k not in OWN_FIELDS}
    base["title"] = title
    out = _merge(base, overrides, FIELD)
    assert isinstance(out, dict)
    return out


def _merge(base: Any, change: Any, where: str) -> Any:
    if isinstance(change, dict):
        if not isinstance(base, dict):
            return copy.deepcopy(change)
        out = dict(base)
        for key, value in change.items():
            if not isinstance(key, str):
                raise _refused(where, "field names are strings")
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(base.get(key), value, f"{where}.{key}")
        return out
    if isinstance(change, list) and isinstance(base, list) and _of_mappings(base) and _of_mappings(change, True):
        merged_items = []
        for i in range(max(len(base), len(change))):
            if i >= len(change):
                merged_items.append(copy.deepcopy(base[i]))
            elif change[i] is None:
                continue  # removed
            elif i >= len(base):
                merged_items.append(copy.deepcopy(change[i]))
            else:
                merged_items.append(_merge(base[i], change[i], f"{where}[{i}]"))
        return merged_items
    return copy.deepcopy(change)


def _of_mappings(items: list[Any], nulls: bool = False) -> bool:
    return bool(items) and all(isinstance(x, dict) or (nulls and x is None) for x in items)


def prefixed(exc: InvalidPlan) -> InvalidPlan:
    """A validation error of the merged plan, its fields named under ``overrides.``."""
    details = exc.details if isinstance(exc.details, list) else []
    named = [{**d, "field": f"{FIELD}.{d['field']}" if d.get("field") else FIELD} for d in details
             if isinstance(d, dict)] or [{"field": FIELD, "message": exc.message}]
    first = named[0]
    return InvalidPlan(f"invalid fork: {first['field']}: {first['message']}", details=named)


def _refused(field: str, message: str) -> InvalidPlan:
    return InvalidPlan(f"invalid fork: {field}: {message}", details=[{"field": field, "message": message}])


# ------------------------------------------------------------------ --set PATH=VALUE

_SEGMENT = re.compile(r"""\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d{1,3})\]|\[(["'])(.+?)\3\]""")
#: a value written as YAML: a number, a boolean, null, a quoted string, a [list] or a {mapping}
_YAML_VALUE = re.compile(r"""^\s*(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|true|false|null|~|["'\[{].*)\s*$""",
                         re.IGNORECASE | re.DOTALL)
SET_OPTION = "--set"


def assignments(pairs: Sequence[str], base: dict[str, Any] | None = None, *,
                option: str = SET_OPTION) -> dict[str, Any]:
    """The partial plan ``PATH=VALUE`` assignments write, over ``base`` (another partial plan,
    e.g. an override file's). ``PATH`` is a plan field as errors name it — ``question``,
    ``experts[1].model``, ``models["gpt-4.1"].temperature``; ``VALUE`` is YAML when it looks
    like a number, a boolean, ``null``, a quoted string, a list or a mapping, else the text as
    given. Raises :class:`InvalidRequest` naming ``option`` (what the caller calls them)."""
    out: dict[str, Any] = copy.deepcopy(base) if base else {}
    for pair in pairs:
        path, sep, raw = pair.partition("=")
        if not sep or not path.strip():
            raise _bad_set(pair, "write PATH=VALUE, e.g. experts[1].model=gpt", option)
        parts = _path(path.strip(), pair, option)
        value = _value(raw, pair, option)
        node: Any = out
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(part, int):
                if not isinstance(node, list):
                    raise _bad_set(pair, f"{_shown(parts[:i])} is not a list here", option)
                node.extend({} for _ in range(part + 1 - len(node)))
                if last:
                    node[part] = value
                    break
                if not isinstance(node[part], dict):
                    node[part] = {}
            else:
                if not isinstance(node, dict):
                    raise _bad_set(pair, f"{_shown(parts[:i])} is not a mapping here", option)
                if last:
                    node[part] = value
                    break
                want: type = list if isinstance(parts[i + 1], int) else dict
                if not isinstance(node.get(part), want):
                    node[part] = want()
            node = node[part]
    return out


def _path(path: str, pair: str, option: str) -> list[str | int]:
    parts: list[str | int] = []
    at = 0
    while at < len(path):
        m = _SEGMENT.match(path, at)
        if m is None or (m.group(1) is not None and at and path[at] != "."):
            raise _bad_set(pair, f"{path!r} is not a field path (e.g. experts[1].model, "
                                 'models["gpt-4.1"].temperature)', option)
        if m.group(1) is not None:
            parts.append(m.group(1))
        elif m.group(2) is not None:
            parts.append(int(m.group(2)))
        else:
            parts.append(m.group(4))
        at = m.end()
    if not parts or isinstance(parts[0], int):
        raise _bad_set(pair, f"{path!r} is not a field path (it starts with a field name)", option)
    return parts


def _value(raw: str, pair: str, option: str) -> Any:
    if not _YAML_VALUE.match(raw):
        return raw
    try:
        return yaml.load(raw, Loader=SafeLoader)
    except yaml.YAMLError:
        raise _bad_set(pair, "the value is not valid YAML (quote a text that starts with [, {, \" or ')",
                       option) from None


def _shown(parts: Sequence[str | int]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out or "the plan"


def _bad_set(pair: str, message: str, option: str) -> InvalidRequest:
    shown = pair if len(pair) <= 80 else pair[:77] + "…"
    return InvalidRequest(f"{option} {shown}: {message}", details=[{"field": option, "message": message}])
