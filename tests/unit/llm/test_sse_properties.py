"""Properties of the SSE decoder over arbitrary read boundaries: any split of a valid byte
stream — CRLF, CR and LF line endings mixed, multi-line data, comments, ids, a leading
BOM, a UTF-8 character cut between two reads — yields the same events as the whole stream
read at once, and those are the events a reference reading of the whole text gives."""

from __future__ import annotations

import re
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.gateway.providers.sse import SSEDecoder, SSEEvent
from tests.unit.bounded import bounded

ENDINGS = st.sampled_from(["\n", "\r\n", "\r"])
# values hold multi-byte characters (2, 3 and 4 bytes in UTF-8) so a read can cut one in two
VALUE_CHARS = st.one_of(st.sampled_from(["é", "董", "🚀", "\U00020000", " ", ":", "{", "}", '"', "\ufffd"]),
                        st.characters(codec="utf-8", exclude_characters="\r\n"))
VALUES = st.lists(VALUE_CHARS, max_size=12).map("".join)
FIELDS = st.sampled_from(["data", "data", "data", "event", "id", "retry", "", "dat", "Data", "x-unknown"])


@st.composite
def lines(draw: st.DrawFn) -> str:
    """One line of an event stream, without its ending."""
    kind = draw(st.sampled_from(["field", "field", "field", "comment", "blank", "no-colon"]))
    if kind == "blank":
        return ""
    if kind == "comment":
        return ":" + draw(VALUES)
    name = draw(FIELDS)
    if kind == "no-colon":
        return name
    return name + ":" + draw(st.sampled_from(["", " ", "  "])) + draw(VALUES)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    body = "".join(line + draw(ENDINGS) for line in draw(st.lists(lines(), max_size=14)))
    if draw(st.booleans()):
        body += draw(lines())  # the last line may lack its ending
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + body.encode()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in pairwise(points)]


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def reference(data: bytes) -> list[SSEEvent]:
    """The WHATWG reading of the whole stream at once (a leading BOM is not part of the
    stream), plus the decoder's documented leniency: a pending event is dispatched at the end."""
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    found: list[SSEEvent] = []
    data_lines: list[str] | None = None
    event, last_id = "", None
    for line in [*re.split(r"\r\n|\r|\n", text), ""]:
        if not line:
            if data_lines is not None:
                found.append(SSEEvent("\n".join(data_lines), event or "message", last_id))
            data_lines, event = None, ""
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data_lines = [*(data_lines or []), value]
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return found


@bounded(300)
@given(streams(), st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_of_a_stream_gives_the_events_of_the_whole(data: bytes, cuts: list[int]) -> None:
    whole = decode([data])
    assert decode(split(data, cuts)) == whole
    assert whole == reference(data)


@bounded(100)
@given(streams())
def test_byte_by_byte_reads_give_the_events_of_the_whole(data: bytes) -> None:
    assert decode([data[i:i + 1] for i in range(len(data))]) == decode([data]) == reference(data)
