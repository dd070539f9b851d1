"""Offsets are UTF-16 code units (failure report R-03), checked against a real JavaScript
engine: Node.js slices the same strings with the offsets Conclave computed."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from orchestrator.briefing.chunking import chunk_document
from orchestrator.briefing.citations import find_citations
from orchestrator.briefing.utf16 import utf16_len, utf16_slice

NODE_CHECK = r"""
let input = "";
process.stdin.on("data", d => input += d);
process.stdin.on("end", () => {
  const { docs, citing } = JSON.parse(input);
  const out = {
    docs: docs.map(d => ({
      length: d.text.length,
      slices: d.chunks.map(c => d.text.slice(c.start, c.end)),
    })),
    citations: citing.refs.map(r => citing.text.slice(r.start, r.end)),
  };
  process.stdout.write(JSON.stringify(out));
});
"""

DOCS = [
    # astral characters (emoji, a ZWJ family, a flag, math letters, CJK Extension B) before every span
    "😀 Intro with 👩‍👩‍👧 and 🇫🇷.\n\n# 價格 𠀀 Pricing\n\n\U0001d4b3 rises 8%. 🚀 Discounts need approval.\n\n"
    "## Risks 𠮷\n\n```python\n# 🐍 not a heading\nprint('𝄞')\n```\n\nChurn 📉 among 小企业.\n",
    # long CJK text cut at sentence ends, with astral ideographs inside every sentence
    "。".join(f"第{i}句𠀀价格上涨😀百分之八" for i in range(60)),
    # plain BMP text: offsets equal code points
    "# Plain\n\nNothing astral here at all.\n",
]


def run_node(payload: dict[str, Any]) -> dict[str, Any]:
    node = shutil.which("node")
    assert node, "Node.js is part of the machine image; this test checks offsets against it"
    out = subprocess.run([node, "-e", NODE_CHECK], input=json.dumps(payload, ensure_ascii=False),
                         capture_output=True, text=True, encoding="utf-8", timeout=60, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_chunk_offsets_slice_the_same_text_in_javascript() -> None:
    chunked = [chunk_document(text, budget=60) for text in DOCS]
    citing = ("Per 😀🇫🇷 the memo [pricing-memo:3] and 𠀀 [risks:1; 價格 pricing-memo:2] — also [r1.dana]. "
              "\U0001d4b3 [Risks:12] 👩‍👩‍👧 [pricing-memo:1, risks:2]")
    refs = find_citations(citing)
    payload = {
        "docs": [{"text": t, "chunks": [{"start": c.start, "end": c.end} for c in cs]}
                 for t, cs in zip(DOCS, chunked, strict=True)],
        "citing": {"text": citing, "refs": [{"start": r.start, "end": r.end} for r in refs]},
    }
    js = run_node(payload)
    for text, chunks, seen in zip(DOCS, chunked, js["docs"], strict=True):
        assert seen["length"] == utf16_len(text)
        assert seen["slices"] == [c.text for c in chunks]
    assert len(chunked[0]) >= 3 and len(chunked[1]) >= 10
    # spans after astral characters really are shifted (the test would catch code-point offsets)
    assert any(c.start != text.find(c.text) for text, cs in zip(DOCS, chunked, strict=True) for c in cs)
    # a bracket holding anything but references is no citation; a phase citation neither
    assert js["citations"] == ["pricing-memo:3", "Risks:12", "pricing-memo:1", "risks:2"]
    assert [(r.doc, r.chunk) for r in refs] == [("pricing-memo", 3), ("risks", 12), ("pricing-memo", 1),
                                                ("risks", 2)]


def test_utf16_helpers() -> None:
    text = "a😀b𠀀c"
    assert utf16_len(text) == 7
    assert utf16_slice(text, 1, 3) == "😀" and utf16_slice(text, 3, 4) == "b"
