"""Chunking respects Markdown (failure report R-02): headings give chunks and heading paths;
fenced code is never a heading and never split; long sections split at block and sentence
boundaries; chunks tile the document's non-blank text."""

from __future__ import annotations

import itertools
import re

from orchestrator.briefing.chunking import Chunk, chunk_document
from orchestrator.briefing.utf16 import utf16_slice


def paths(chunks: list[Chunk]) -> list[tuple[str, ...]]:
    return [c.heading_path for c in chunks]


def assert_tiles(text: str, chunks: list[Chunk]) -> None:
    """In order, not overlapping, each exactly its slice, trimmed, and together every
    non-blank character of the document."""
    assert [c.ordinal for c in chunks] == list(range(1, len(chunks) + 1))
    for c in chunks:
        assert utf16_slice(text, c.start, c.end) == c.text
        assert c.text == c.text.strip() and c.text
    for a, b in itertools.pairwise(chunks):
        assert a.end <= b.start
    assert re.sub(r"\s", "", "".join(c.text for c in chunks)) == re.sub(r"\s", "", text)


def test_headings_give_chunks_with_their_heading_paths() -> None:
    doc = ("Preamble before any heading.\n\n# Pricing\n\nList price.\n\n## Risks\n\nChurn.\n\n"
           "### Small accounts\n\nThey leave first.\n\n## Upside\n\nMargin.\n\n# Hiring\n\nTwo engineers.\n")
    chunks = chunk_document(doc)
    assert paths(chunks) == [(), ("Pricing",), ("Pricing", "Risks"), ("Pricing", "Risks", "Small accounts"),
                             ("Pricing", "Upside"), ("Hiring",)]
    assert chunks[2].text == "## Risks\n\nChurn."
    assert_tiles(doc, chunks)


def test_closing_hashes_and_setext_headings() -> None:
    doc = "Pricing ##\n==========\n\nList price.\n\nRisks\n-----\n\nChurn.\n\n## Upside ##\n\nMargin.\n"
    assert paths(chunk_document(doc)) == [("Pricing ##",), ("Pricing ##", "Risks"), ("Pricing ##", "Upside")]
    assert paths(chunk_document("# Pricing ##\ntext\n")) == [("Pricing",)]


def test_not_headings_hashtags_seven_hashes_indented_and_list_before_rule() -> None:
    doc = "#hashtag is text\n####### seven is text\n    # indented code\n\n- item\n---\n\nmore\n"
    chunks = chunk_document(doc)
    assert paths(chunks) == [()]
    assert_tiles(doc, chunks)


def test_fenced_code_with_hash_lines_and_headings_inside_stays_one_chunk() -> None:
    code = "```python\n# a comment, not a heading\n## neither is this\ndef f():\n\n    return 1\n```"
    doc = f"# Guide\n\nIntro.\n\n{code}\n\nAfter the code.\n"
    chunks = chunk_document(doc)
    assert paths(chunks) == [("Guide",)]
    assert code in chunks[0].text
    # with a budget smaller than the code block, the fence is still never split or titled
    small = chunk_document(doc, budget=20)
    assert [c.text for c in small if "```" in c.text] == [code]
    assert all(p == ("Guide",) for p in paths(small))
    assert_tiles(doc, small)


def test_tilde_fences_and_info_strings() -> None:
    doc = "# Setup\n\n~~~ yaml title=\"config\"\n# key: value\nkey: 1\n~~~\n\n# Next\n\ntext\n"
    chunks = chunk_document(doc)
    assert paths(chunks) == [("Setup",), ("Next",)]
    assert "# key: value" in chunks[0].text


def test_a_longer_fence_contains_shorter_ones_and_the_other_character() -> None:
    inner = "````markdown\n```python\n# inside\n```\n~~~\n# still inside\n~~~\n````"
    doc = f"# Outer\n\n{inner}\n\n# After\n\nend\n"
    chunks = chunk_document(doc)
    assert paths(chunks) == [("Outer",), ("After",)]
    assert inner in chunks[0].text
    # a closing fence needs the same character and at least the opening length, nothing after it
    doc2 = "```\n# a\n~~~\n# b\n``\n# c\n``` not a close\n# d\n````\n\n# Real\n\nx\n"
    assert paths(chunk_document(doc2)) == [(), ("Real",)]


def test_a_backtick_info_string_with_a_backtick_is_not_a_fence() -> None:
    doc = "```inline `code` here\n# Heading\n\ntext\n"
    assert paths(chunk_document(doc)) == [(), ("Heading",)]


def test_an_unclosed_fence_runs_to_the_end() -> None:
    doc = "# Start\n\ntext\n\n```bash\n# not a heading\necho hi\n\n# still code\n"
    chunks = chunk_document(doc)
    assert paths(chunks) == [("Start",)]
    assert chunks[-1].text.endswith("# still code")
    assert_tiles(doc, chunks)


def test_html_comments_and_front_matter_are_opaque() -> None:
    doc = "---\ntitle: x\n---\n\n<!--\n# hidden\n-->\n\n# Real\n\nbody\n"
    chunks = chunk_document(doc)
    assert paths(chunks) == [(), ("Real",)]
    assert "# hidden" in chunks[0].text


def test_a_heading_followed_by_a_subheading_rides_along() -> None:
    doc = "# A\n## B\n### C\ndeep text\n"
    chunks = chunk_document(doc)
    assert len(chunks) == 1 and chunks[0].heading_path == ("A", "B", "C")
    assert chunks[0].text == doc.strip()


def test_long_sections_split_at_blank_lines_then_sentence_ends_within_budget() -> None:
    paras = [f"Paragraph {i} says something about pricing. It has two sentences." for i in range(12)]
    doc = "# Long\n\n" + "\n\n".join(paras) + "\n"
    chunks = chunk_document(doc, budget=200)
    assert len(chunks) > 3 and all(len(c.text) <= 200 for c in chunks)
    assert all(c.heading_path == ("Long",) for c in chunks)
    assert chunks[0].text.startswith("# Long\n\nParagraph 0")  # the heading travels with its text
    assert all(c.text.endswith(".") for c in chunks)  # cut at paragraph ends
    one_long = "# Long\n\n" + " ".join(f"Sentence number {i} is here." for i in range(40)) + "\n"
    pieces = chunk_document(one_long, budget=150)
    assert len(pieces) > 4 and all(len(c.text) <= 150 for c in pieces)
    assert all(c.text.endswith("here.") for c in pieces)  # cut at sentence ends
    assert_tiles(one_long, pieces)


def test_a_run_without_spaces_or_sentence_ends_is_cut_at_the_budget() -> None:
    doc = "数据" * 300
    chunks = chunk_document(doc, budget=100)
    assert [len(c.text) for c in chunks] == [100] * 6
    assert_tiles(doc, chunks)
    cjk = "。".join(["价格上涨百分之八"] * 40)
    sentences = chunk_document(cjk, budget=50)
    assert len(sentences) > 5 and all(c.text.endswith("。") for c in sentences[:-1])  # cut after 。
    assert_tiles(cjk, sentences)


def test_plain_text_chunks_by_paragraphs_without_headings() -> None:
    doc = "# not a heading in plain text\nfirst para\n\nsecond para\n\n```\nthird\n```\n"
    chunks = chunk_document(doc, "text", budget=45)
    assert paths(chunks) == [(), ()]
    assert [c.text for c in chunks] == ["# not a heading in plain text\nfirst para", "second para\n\n```\nthird\n```"]
    assert_tiles(doc, chunks)


def test_crlf_line_endings() -> None:
    doc = "# A\r\n\r\ntext a\r\n\r\n```\r\n# code\r\n```\r\n\r\n# B\r\n\r\ntext b\r\n"
    chunks = chunk_document(doc)
    assert paths(chunks) == [("A",), ("B",)]
    assert_tiles(doc, chunks)


def test_the_same_text_always_gives_the_same_chunks() -> None:
    doc = "# P\n\n" + "Words and more words. " * 200
    assert chunk_document(doc) == chunk_document(doc)
    assert_tiles(doc, chunk_document(doc))


def test_blank_documents_have_no_chunks() -> None:
    assert chunk_document(" \n\n\t\n") == []
