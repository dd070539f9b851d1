"""How a validation error becomes what a user reads: the field's path and why it is wrong.

A pydantic error locates a problem as a tuple (``("plan", "board", "experts", 1, "rol")``);
a user reads ``experts[1].rol: unknown field — did you mean 'role'?``. For an unknown field
the suggestion comes from the fields that object really has: the path is walked through the
model's own annotations (lists, mappings, optionals, tagged unions) to the object the field
was found in, so every object of a schema gets its own suggestions without a list kept by
hand. The same functions serve the plan, a ``PATCH`` of it and the model registry.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

UNKNOWN = "unknown field"


class FieldError(ValueError):
    """Raised by a validator that knows which field is wrong (``phases[2].expert``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def dotted(loc: Iterable[Any]) -> str:
    """``("experts", 1, "role")`` → ``experts[1].role``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def unknown_field(root: type[BaseModel], loc: Sequence[Any]) -> str:
    """The message for an unknown field at ``loc`` (pydantic's path from ``root``): with the
    closest allowed field of that object when one is near enough (``rouns`` → ``rounds``)."""
    name = loc[-1] if loc else None
    if not isinstance(name, str):
        return UNKNOWN
    allowed = sorted({f for model in _models_at(root, loc[:-1]) for f in model.model_fields} - {name})
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if not close:  # a case slip or a separator slip: "Rounds", "api-key-env"
        folded = {_fold(f): f for f in allowed}
        close = [folded[_fold(name)]] if _fold(name) in folded else []
    return f"{UNKNOWN} — did you mean {close[0]!r}?" if close else UNKNOWN


def _fold(name: str) -> str:
    return name.lower().replace("-", "_").replace(" ", "_")


def _models_at(root: type[BaseModel], loc: Sequence[Any]) -> list[type[BaseModel]]:
    """The model classes an object at ``loc`` may be (several under an untagged union)."""
    current: list[Any] = [root]
    for part in loc:
        following: list[Any] = []
        for kind in (t for c in current for t in _alternatives(c)):
            following += _step(kind, part)
        if not following:
            return []
        current = following
    return [t for c in current for t in _alternatives(c) if isinstance(t, type) and issubclass(t, BaseModel)]


def _alternatives(annotation: Any) -> list[Any]:
    """``Annotated[X, …]``, ``X | None``, ``Union[A, B]`` → the types a value may have."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _alternatives(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [t for arg in get_args(annotation) if arg is not type(None) for t in _alternatives(arg)]
    return [annotation]


def _step(kind: Any, part: Any) -> list[Any]:
    """What a value of type ``kind`` holds at ``part`` of a path."""
    origin = get_origin(kind)
    if origin in (list, tuple, set, frozenset, Sequence):
        args = get_args(kind)
        return [args[0]] if isinstance(part, int) and args else []
    if origin is dict:
        args = get_args(kind)
        return [args[1]] if len(args) == 2 else []
    if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(part, str):
        field = kind.model_fields.get(part)
        if field is not None:
            return [field.annotation]
        if _tagged(kind, part):  # a tagged union's member names its tag in the path
            return [kind]
    return []


def _tagged(model: type[BaseModel], tag: str) -> bool:
    """Whether ``model`` has a ``Literal`` field admitting ``tag`` (its discriminator)."""
    for field in model.model_fields.values():
        if get_origin(field.annotation) is Literal and tag in get_args(field.annotation):
            return True
    return False
