"""The byte-stream framing must not depend on where the network cut the bytes."""

from __future__ import annotations

import json

import pytest

from orchestrator.gateway.providers.sse import LineDecoder, NDJSONDecoder, SSEDecoder, SSEEvent


def feed_all(decoder: SSEDecoder, chunks: list[bytes]) -> list[SSEEvent]:
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_lines_end_at_every_sse_line_ending(ending: str) -> None:
    decoder = LineDecoder()
    data = f"one{ending}two{ending}{ending}three".encode()
    assert decoder.feed(data) + decoder.flush() == ["one", "two", "", "three"]


def test_crlf_split_across_reads_is_one_line_ending() -> None:
    decoder = LineDecoder()
    lines = (
        decoder.feed(b"data: a\r")
        + decoder.feed(b"\ndata: b\r")
        + decoder.feed(b"\n\r")
        + decoder.feed(b"\n")
    )
    assert lines == ["data: a", "data: b", ""]


def test_utf8_character_split_across_reads_is_reassembled() -> None:
    payload = "data: 董事会🚀\n\n".encode()
    events = feed_all(SSEDecoder(), bytewise(payload))
    assert events == [SSEEvent(data="董事会🚀")]


def test_invalid_utf8_becomes_replacement_character() -> None:
    events = feed_all(SSEDecoder(), [b"data: a\xffb\n\n"])
    assert events[0].data == "a\ufffdb"


def test_a_cut_character_or_an_invalid_byte_after_whole_reads_is_decoded_as_at_the_start() -> None:
    # the first reads are whole (the lean path: bytes.decode); then a character cut in two,
    # an invalid byte, a BOM-like sequence that is text now, and whole reads again
    reads = [b"data: one\n\n", b"data: two\n\n", "data: 董".encode()[:-1], "董".encode()[-1:] + b"\n\n",
             b"data: a\xffb\n\n", b"data: \xef\xbb\xbfx\n\n", b"data: three\n\n"]
    assert [e.data for e in feed_all(SSEDecoder(), reads)] == ["one", "two", "董", "a\ufffdb", "\ufeffx", "three"]


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_same_events_whatever_the_read_boundaries(ending: str) -> None:
    text = (
        f": keep-alive{ending}{ending}"
        f'event: content_block_delta{ending}id: 7{ending}data: {{"text": "héllo"}}{ending}{ending}'
        f"data: first{ending}data:second{ending}data:  third{ending}{ending}"
        f"retry: 3000{ending}data: [DONE]{ending}{ending}"
    )
    whole = feed_all(SSEDecoder(), [text.encode()])
    assert whole == [
        SSEEvent(data='{"text": "héllo"}', event="content_block_delta", id="7"),
        SSEEvent(data="first\nsecond\n third", event="message", id="7"),
        SSEEvent(data="[DONE]", event="message", id="7"),
    ]
    assert feed_all(SSEDecoder(), bytewise(text.encode())) == whole


def test_comment_only_blocks_dispatch_nothing() -> None:
    assert feed_all(SSEDecoder(), [b":\n\n: ping\n\n"]) == []


def test_event_name_resets_after_dispatch() -> None:
    events = feed_all(SSEDecoder(), [b"event: ping\ndata: {}\n\ndata: x\n\n"])
    assert [e.event for e in events] == ["ping", "message"]


def test_field_without_colon_and_empty_data() -> None:
    events = feed_all(SSEDecoder(), [b"data\n\n"])
    assert events == [SSEEvent(data="")]


def test_pending_event_is_dispatched_at_end_of_input() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a": 1}') == []
    assert [e.json() for e in decoder.flush()] == [{"a": 1}]


def test_ndjson_lines_across_reads() -> None:
    decoder = NDJSONDecoder()
    objects = [{"message": {"content": "你好"}, "done": False}, {"done": True, "eval_count": 3}]
    data = "\r\n\n".join(json.dumps(o, ensure_ascii=False) for o in objects).encode()
    parsed = []
    for piece in bytewise(data):
        parsed += decoder.feed(piece)
    assert parsed + decoder.flush() == objects


def test_ndjson_rejects_a_line_that_is_not_json() -> None:
    with pytest.raises(ValueError):
        NDJSONDecoder().feed(b"not json\n")


def test_a_leading_byte_order_mark_is_dropped_even_when_split() -> None:
    """WHATWG decoding drops one BOM at the start; kept, it renamed the first field to
    ``\\ufeffdata`` and the first event was lost. One later in the stream is data."""
    stream = "\ufeffdata: first\n\ndata: \ufeffsecond\n\n".encode()
    assert feed_all(SSEDecoder(), [stream]) == feed_all(SSEDecoder(), bytewise(stream)) == [
        SSEEvent(data="first"), SSEEvent(data="\ufeffsecond")]
    decoder = NDJSONDecoder()
    assert decoder.feed(b"\xef\xbb") + decoder.feed(b'\xbf{"done": true}\n') == [{"done": True}]
