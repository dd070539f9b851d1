"""The live window as a terminal prints it: the tail of a stream starts at a word, and the
Markdown a model writes shows as styles — never as ``**`` — in colour and when piped."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.client.live_text import live_text

STREAM = ("## Position\n**Dana (CFO)** thinks usage pricing *raises* revenue.\n" * 20
          + "- **Risk**: churn among `small` accounts\n- see [the memo](https://x.example/m) and **the unfinished")


def _printed(stream: str, *, color: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=color, color_system="standard" if color else None)
    console.print(live_text(stream, 600))
    return out.getvalue()


def test_the_tail_starts_at_a_word_and_shows_no_markdown_markers() -> None:
    plain = _printed(STREAM, color=False)
    assert plain.startswith("… ")
    first_word = plain.removeprefix("… ").split()[0]
    assert any(first_word == w for w in STREAM.replace("*", "").replace("#", "").split()), first_word
    assert "the unfinished" in plain  # the latest words are there
    for marker in ("**", "## ", "`", "](", "- **"):
        assert marker not in plain, (marker, plain)
    assert "• Risk: churn among small accounts" in plain and "see the memo and" in plain


def test_emphasis_is_styled_in_a_terminal() -> None:
    coloured = _printed("**Dana** says *maybe*", color=True)
    assert "\x1b[1mDana\x1b[0m" in coloured and "\x1b[3mmaybe\x1b[0m" in coloured
    assert "**" not in coloured and "*" not in coloured.replace("\x1b", "")


def test_a_short_stream_is_shown_whole() -> None:
    assert _printed("Revenue rises.", color=False).strip() == "Revenue rises."
