"""Reading what HTTP clients send, so that nothing they send can become a 500.

Every rejection is an :class:`~orchestrator.core.errors.InvalidRequest` (or a subclass)
whose ``details`` name the field: ``[{"field": "body", "message": …}]``. Messages
say where a document is wrong (line, column, path) but never quote it back.

A parsed document is also checked for what the plan schema cannot see and the
database would choke on: NUL characters and lone surrogates in strings,
non-finite numbers, non-string keys, YAML-only types, nesting too deep, and
YAML aliases that expand a small document into a huge one.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any

import yaml
from starlette.requests import Request

from orchestrator.briefing.entries import DOC_ID_RE
from orchestrator.core.errors import BodyTooLarge, InvalidRequest, MalformedBody, UnsupportedMediaType
from orchestrator.plan.schema import SafeLoader

JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
REF_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
KEY_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,120}$")
EVENT_ID_RE = re.compile(r"^[0-9]{1,19}$")
DOC_ID = re.compile(DOC_ID_RE.removeprefix("^").removesuffix("$"))
MAX_EVENT_ID = 2**63 - 1
MAX_DEPTH = 64
MAX_NODES = 200_000
DRAIN_FACTOR = 8  # read (and drop) up to this many times the limit so the client sees the 413


def field_error(field: str, message: str) -> list[dict[str, str]]:
    return [{"field": field or "body", "message": message}]


# ------------------------------------------------------------------ path, query, headers


def plan_ref(value: str) -> str:
    """A plan id or task id from the path. Task ids containing ``/`` cannot be addressed
    by path (use the plan id)."""
    if not REF_RE.fullmatch(value):
        raise InvalidRequest("plan_id must be a plan id or task_id (1-200 letters, digits, '_.:-')",
                             details=field_error("plan_id", "malformed id"))
    return value


def phase_key(value: str) -> str:
    if not KEY_RE.fullmatch(value):
        raise InvalidRequest("phase key must be 1-120 letters, digits, '_.:-'",
                             details=field_error("key", "malformed phase key"))
    return value


def doc_id(value: str) -> str:
    """A briefing document's id from the path (the slug a citation names)."""
    if not DOC_ID.fullmatch(value):
        raise InvalidRequest("doc_id must be a document id (1-60 lower-case letters, digits, '_-')",
                             details=field_error("doc_id", "malformed document id"))
    return value


def event_id(value: str | None, field: str) -> int | None:
    """A stored event id (``Last-Event-ID`` or ``?after=``): a non-negative 64-bit integer."""
    if value is None:
        return None
    value = value.strip()
    if not EVENT_ID_RE.fullmatch(value) or int(value) > MAX_EVENT_ID:
        raise InvalidRequest(f"{field} must be a stored event id (a non-negative integer)",
                             details=field_error(field, "not a non-negative 64-bit integer"))
    return int(value)


def media_type(request: Request) -> str | None:
    """The body's media type, lower-cased; rejects a charset other than UTF-8."""
    raw = request.headers.get("content-type")
    if not raw:
        return None
    kind, *params = (part.strip() for part in raw.split(";"))
    for p in params:
        name, _, val = p.partition("=")
        if name.strip().lower() == "charset" and val.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedMediaType("bodies must be UTF-8",
                                       details=field_error("Content-Type", f"unsupported charset {val[:40]!r}"))
    return kind.lower()


# ------------------------------------------------------------------ body


async def read_body(request: Request, limit: int, *, what: str = "the body", setting: str | None = None) -> bytes:
    """The request body, at most ``limit`` bytes (413 beyond, saying how large it was and,
    when one does, which ``setting`` raises the limit)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit * DRAIN_FACTOR:
        raise _too_large(what, int(declared), limit, setting, exact=True)  # not worth draining
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > limit * DRAIN_FACTOR:
            break
    if size > limit:
        exact = size <= limit * DRAIN_FACTOR or (declared is not None and declared.isdigit())
        seen = int(declared) if declared is not None and declared.isdigit() else size
        raise _too_large(what, seen, limit, setting, exact=exact)
    return b"".join(chunks)


def _too_large(what: str, size: int, limit: int, setting: str | None, *, exact: bool) -> BodyTooLarge:
    seen = f"{'' if exact else 'more than '}{size:,} bytes ({size / 1_000_000:.1f} MB)"
    raises = f" (the server's {setting} raises it)" if setting else ""
    return BodyTooLarge(f"{what} is {seen}; the limit is {limit:,} bytes{raises}",
                        details=field_error("body", f"{seen}, over the limit of {limit:,} bytes"))


def decode(body: bytes) -> str:
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"the body is not valid UTF-8 (byte {exc.start})",
                            details=field_error("body", f"invalid UTF-8 at byte {exc.start}")) from None


def document_type(request: Request) -> str:
    """The media type of a plan body: JSON or YAML (415 otherwise)."""
    kind = media_type(request)
    if kind not in JSON_TYPES and kind not in YAML_TYPES:
        raise UnsupportedMediaType(
            "send the plan as Content-Type: application/json or application/yaml",
            details=field_error("Content-Type", f"unsupported media type {(kind or 'none')[:80]!r}"))
    return kind


def parse_document(body: bytes, kind: str, *, max_bytes: int, max_nodes: int = MAX_NODES) -> Any:
    """Parse a JSON or YAML body (``kind`` from :func:`document_type`) into plain JSON values."""
    if not body.strip():
        raise MalformedBody("the body is empty", details=field_error("body", "empty"))
    text = decode(body)
    data = _parse_json(text) if kind in JSON_TYPES else _parse_yaml(text)
    return plain(data, max_chars=2 * max_bytes, max_nodes=max_nodes)


def parse_json_object(body: bytes, kind: str | None) -> dict[str, Any]:
    """A small JSON object body (or ``{}`` for an empty body)."""
    if not body.strip():
        return {}
    if kind is not None and kind not in JSON_TYPES:
        raise UnsupportedMediaType("send Content-Type: application/json",
                                   details=field_error("Content-Type", f"unsupported media type {kind[:80]!r}"))
    data = plain(_parse_json(decode(body)), max_chars=1_000_000)
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object",
                             details=field_error("body", f"got {_type_name(data)}"))
    return data


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid JSON number")


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise MalformedBody(f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                            details=field_error("body", f"{exc.msg} (line {exc.lineno}, column {exc.colno})")
                            ) from None
    except RecursionError:
        raise MalformedBody("the body is nested too deeply",
                            details=field_error("body", "nested too deeply")) from None
    except ValueError as exc:  # NaN/Infinity, integers beyond the digit limit
        raise MalformedBody(f"the body is not valid JSON: {str(exc)[:120]}",
                            details=field_error("body", str(exc)[:120])) from None


def _parse_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise MalformedBody(f"the body is not valid YAML: {problem}{where}",
                            details=field_error("body", f"{problem}{where}")) from None
    except RecursionError:
        raise MalformedBody("the body is nested too deeply",
                            details=field_error("body", "nested too deeply")) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise MalformedBody("the body is not valid YAML",
                            details=field_error("body", type(exc).__name__)) from None


# ------------------------------------------------------------------ JSON values only


def plain(data: Any, *, max_chars: int, max_nodes: int = MAX_NODES) -> Any:
    """``data`` as plain JSON values, or :class:`InvalidRequest` naming the first bad field.

    Iterative (no recursion limit to hit) and bounded: YAML aliases are followed, so a
    document that expands beyond ``max_chars`` or ``max_nodes`` (:data:`MAX_NODES`) values is refused.
    """
    budget = [max_nodes, max_chars]

    def spend(field: str, chars: int) -> None:
        budget[0] -= 1
        budget[1] -= chars
        if budget[0] < 0 or budget[1] < 0:
            raise BodyTooLarge("the document expands to too many values (YAML aliases?)",
                               details=field_error(field or "body", "expands too far"))

    def scalar(value: Any, field: str) -> Any:
        if isinstance(value, str):
            spend(field, len(value) + 2)
            _check_text(value, field)
            return value
        spend(field, 8)
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidRequest(f"{field or 'body'}: numbers must be finite",
                                     details=field_error(field, "not a finite number"))
            return value
        if isinstance(value, dt.date | dt.datetime):
            return value.isoformat()
        raise InvalidRequest(f"{field or 'body'}: unsupported value of type {_type_name(value)}",
                             details=field_error(field, f"unsupported type {_type_name(value)}"))

    root: list[Any] = [None]
    # (source, field path, depth, target container, key in the target)
    stack: list[tuple[Any, str, int, Any, Any]] = [(data, "", 0, root, 0)]
    while stack:
        value, field, depth, target, slot = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"{field}: nested deeper than {MAX_DEPTH} levels",
                                 details=field_error(field, "nested too deeply"))
        if isinstance(value, dict):
            spend(field, 2)
            out: dict[str, Any] = dict.fromkeys(value)  # keeps the document's key order
            target[slot] = out
            for k, v in reversed(value.items()):  # the stack pops: push in reverse, report in order
                if not isinstance(k, str):
                    raise InvalidRequest(f"{field or 'body'}: keys must be strings (got {_type_name(k)})",
                                         details=field_error(field, f"non-string key of type {_type_name(k)}"))
                _check_text(k, field)
                spend(field, len(k) + 2)
                stack.append((v, f"{field}.{k}" if field else k, depth + 1, out, k))
        elif isinstance(value, list | tuple):
            spend(field, 2)
            items: list[Any] = [None] * len(value)
            target[slot] = items
            for i, v in reversed(list(enumerate(value))):
                stack.append((v, f"{field}[{i}]", depth + 1, items, i))
        else:
            target[slot] = scalar(value, field)
    return root[0]


def _check_text(s: str, field: str) -> None:
    if "\x00" in s:
        raise InvalidRequest(f"{field or 'body'}: text may not contain NUL characters",
                             details=field_error(field, "contains a NUL character"))
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field or 'body'}: text contains an unpaired surrogate",
                             details=field_error(field, "contains an unpaired UTF-16 surrogate")) from None


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)
