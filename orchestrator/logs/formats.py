"""How a log line is written: one JSON object per line, or text for a person at a terminal.

``CONCLAVE_LOG_FORMAT``: ``json``, ``text`` or ``auto`` (the default) — JSON unless the
handler writes to a terminal (:func:`wants_json`). A JSON line has a fixed set of keys
(:data:`KEYS`); the context a line does not have is ``null``, and ``exception`` is there
only when the record carries one. Nothing else of the record is written: Celery puts a
task's arguments on its records (``args``, ``data``), and they stay there.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["json", "text", "auto"]

FORMAT = ("%(asctime)s %(levelname)s %(name)s [plan=%(plan_id)s phase=%(phase)s attempt=%(attempt)s] "
          "%(action)s: %(message)s")

#: The keys of a JSON line, in order.
KEYS = ("timestamp", "level", "logger", "action", "message", "plan_id", "phase", "attempt", "worker")


def wants_json(log_format: LogFormat, stream: Any) -> bool:
    """JSON lines unless asked for text, or (``auto``) unless ``stream`` is a terminal."""
    if log_format != "auto":
        return log_format == "json"
    isatty = getattr(stream, "isatty", None)
    try:
        return not (callable(isatty) and isatty())
    except ValueError:  # a closed stream
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record: :data:`KEYS`, plus ``exception`` (the traceback's text)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        action = getattr(record, "action", "-")
        if action == "-" and message.startswith("action="):  # the gateway's "action=llm_retry model=…" lines
            action = message.partition(" ")[0].removeprefix("action=")
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "action": _known(action),
            "message": message,
        }
        for key in KEYS[5:]:
            line[key] = _known(getattr(record, key, "-"))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


def _known(value: Any) -> Any:
    return None if value == "-" else value


class WithContext(logging.Formatter):
    """Another formatter's line, with ``[plan=… phase=… attempt=…]`` after its first line
    when the record was logged while a plan was bound (Celery's text format knows nothing
    of the context)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self._inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        text = self._inner.format(record)
        plan = getattr(record, "plan_id", "-")
        if plan == "-":
            return text
        first, newline, rest = text.partition("\n")
        context = f" [plan={plan} phase={getattr(record, 'phase', '-')} attempt={getattr(record, 'attempt', '-')}]"
        return first + context + newline + rest
