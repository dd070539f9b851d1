"""Incremental framing of streamed model responses: Server-Sent Events and NDJSON.

Providers feed the raw bytes of ``httpx.Response.iter_bytes()`` into these
decoders as they arrive, never ``iter_lines()``: a network read may end in the
middle of a line, between the ``\\r`` and ``\\n`` of a CRLF, or in the middle of
a multi-byte UTF-8 character, and each of those must come out exactly as the
server meant it. What is guaranteed:

* lines end at ``\\r\\n``, ``\\r`` or ``\\n`` (the three SSE line endings), even
  when a CRLF is split across two reads (no phantom blank line, so an event is
  never dispatched early);
* text is decoded with an incremental UTF-8 decoder, so a character split across
  reads is reassembled; invalid bytes become U+FFFD instead of failing the call;
  one byte order mark at the very start is dropped, as the WHATWG decoding does
  (kept, it would rename the first field ``\\ufeffdata`` and lose the first event);
* SSE comment lines (``:keep-alive``) are skipped, ``data:`` lines of one event
  are joined with ``\\n``, ``event:`` names and ``id:`` are kept, and the leading
  space after the colon is removed once, as the WHATWG spec says;
* at end of input a pending event that lacks its final blank line is still
  dispatched (lenient: some OpenAI-compatible servers end that way); a missing
  ``data: [DONE]`` is the provider's business, not the parser's.

These classes are pure (no I/O, no provider knowledge) and cheap to unit-test.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any, NamedTuple

__all__ = ["LineDecoder", "NDJSONDecoder", "SSEDecoder", "SSEEvent"]

_NEWLINE = re.compile(r"\r\n|\r|\n")


class LineDecoder:
    """Turns a byte stream into complete text lines (without their endings).

    The common read — whole characters, ``\\n`` endings — takes the lean path: one
    ``bytes.decode`` and one ``str.split``; the incremental decoder and the three-ending
    split are used only when a read needs them (a split character, invalid bytes, a ``\\r``),
    with the same result."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")  # -sig: drops a leading BOM
        self._plain = False  # the incremental decoder holds nothing and is past the BOM: bytes.decode will do
        self._buffer = ""
        self._skip_lf = False  # the previous read ended in "\r": a leading "\n" belongs to it

    def feed(self, data: bytes) -> list[str]:
        if self._plain:
            try:
                return self._split(data.decode())
            except UnicodeDecodeError:  # a character split across reads, or invalid bytes
                pass
        text = self._decoder.decode(data)
        self._plain = self._decoder.getstate() == (b"", 0)
        return self._split(text)

    def flush(self) -> list[str]:
        """Ends the input: returns the last, unterminated line if there is one."""
        lines = self._split(self._decoder.decode(b"", final=True))
        if self._buffer:
            lines.append(self._buffer)
            self._buffer = ""
        return lines

    def _split(self, text: str) -> list[str]:
        if not text:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        buffer = self._buffer + text if self._buffer else text
        if "\r" in buffer:
            lines = _NEWLINE.split(buffer)
            self._skip_lf = buffer.endswith("\r")
        else:
            lines = buffer.split("\n")
        self._buffer = lines.pop()
        return lines


class SSEEvent(NamedTuple):
    """One dispatched event (a tuple: made once per streamed chunk, it costs little)."""

    data: str
    event: str = "message"
    id: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


class SSEDecoder:
    """Incremental Server-Sent Events parser: ``feed(bytes) -> [SSEEvent]``."""

    def __init__(self) -> None:
        self._lines = LineDecoder()
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._last_id: str | None = None

    def feed(self, data: bytes) -> list[SSEEvent]:
        return self._process(self._lines.feed(data))

    def flush(self) -> list[SSEEvent]:
        events = self._process(self._lines.flush())
        final = self._dispatch()
        if final is not None:
            events.append(final)
        return events

    def _process(self, lines: list[str]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                event = self._dispatch()
                if event is not None:
                    events.append(event)
                continue
            if line.startswith("data: "):  # the usual line, first
                self._data.append(line[6:])
                continue
            if line.startswith(":"):
                continue  # comment / keep-alive
            name, sep, value = line.partition(":")
            if sep and value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "id" and "\0" not in value:
                self._id = value
            # "retry" and unknown fields are ignored, as the spec says
        return events

    def _dispatch(self) -> SSEEvent | None:
        if self._id is not None:
            self._last_id = self._id
            self._id = None
        data = self._data
        if not data:
            self._event = ""
            return None
        event = SSEEvent(data[0] if len(data) == 1 else "\n".join(data), self._event or "message", self._last_id)
        self._data = []
        self._event = ""
        return event


class NDJSONDecoder:
    """Newline-delimited JSON (Ollama): ``feed(bytes) -> [parsed objects]``.

    Blank lines are skipped; a line that is not JSON raises ``ValueError``
    (``json.JSONDecodeError``) for the provider to map to its own error.
    """

    def __init__(self) -> None:
        self._lines = LineDecoder()

    def feed(self, data: bytes) -> list[Any]:
        return [json.loads(line) for line in self._lines.feed(data) if line.strip()]

    def flush(self) -> list[Any]:
        return [json.loads(line) for line in self._lines.flush() if line.strip()]
