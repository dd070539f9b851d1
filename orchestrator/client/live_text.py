"""The live window's text: the latest words of an expert still speaking, as a reader sees them.

The window shows the tail of a stream that is still growing, so it is cut — but always at a
word (never ``…ing the price``), and the Markdown the models write is shown as styles, not as
markers: ``**bold**`` bold, ``*italic*`` italic, ``## heading`` bold, ``- item`` a bullet,
`` `code` `` dim — also a ``**`` that is open because the rest has not arrived yet. Without a
terminal the styles fall away and the text stays plain and readable.
"""

from __future__ import annotations

import re

from rich.text import Text

_INLINE = re.compile(r"\*\*(?P<b>.+?)(?:\*\*|$)|__(?P<b2>.+?)(?:__|$)|(?<![\w*])\*(?P<i>[^*\s][^*]*?)\*(?![\w*])"
                     r"|(?<!\w)_(?P<i2>[^_\s][^_]*?)_(?!\w)|`(?P<c>[^`]+)`?|\[(?P<l>[^\]]+)\]\([^)\s]*\)?")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+")
_BULLET = re.compile(r"^(\s*)[-*+]\s+")


def tail(text: str, limit: int) -> tuple[str, bool]:
    """The last ``limit`` characters or fewer of ``text``, starting at a word (or a line);
    and whether anything was cut."""
    if len(text) <= limit:
        return text, False
    cut = text[-limit:]
    line = cut.find("\n")
    if 0 <= line < limit // 2:
        return cut[line + 1:], True
    space = re.search(r"\s", cut)
    return (cut[space.end():] if space else cut), True


def styled(markdown: str) -> Text:
    """Inline Markdown as styled text, markers removed, line by line."""
    out = Text()
    for n, line in enumerate(markdown.split("\n")):
        if n:
            out.append("\n")
        style = ""
        if _HEADING.match(line):
            line, style = _HEADING.sub("", line), "bold"
        line = _BULLET.sub(lambda m: f"{m.group(1)}• ", line)
        at = 0
        for m in _INLINE.finditer(line):
            out.append(line[at:m.start()], style=style)
            kind = next(k for k, v in m.groupdict().items() if v is not None)
            piece_style = {"b": "bold", "b2": "bold", "i": "italic", "i2": "italic", "c": "dim", "l": "underline"}[kind]
            out.append(m.group(kind), style=f"{style} {piece_style}".strip())
            at = m.end()
        out.append(line[at:], style=style)
    return out


def live_text(stream: str, limit: int = 600) -> Text:
    """What the live window shows of ``stream``: its tail from a word, styled, ``… `` first when cut."""
    shown, cut = tail(stream, limit)
    text = styled(shown)
    if cut:
        text = Text("… ", style="dim") + text
    return text
