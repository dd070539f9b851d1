"""A model's Markdown as the plan page renders it (:mod:`orchestrator.api.ui.markdown`):
the structure a reader expects (headings, emphasis, lists, kept line breaks), citations as
links, and nothing a model writes becoming a tag, an attribute or a script URL. The HTML
is parsed back (html.parser) and checked as a browser would build it, not by substring."""

from __future__ import annotations

from html.parser import HTMLParser

from orchestrator.api.ui.markdown import LINK_REL, render
from orchestrator.briefing.citations import find_citations
from orchestrator.briefing.documents import PATH_SEPARATOR, CitationView


class Tree(HTMLParser):
    """Every start tag with its attributes, and the text, as a browser's parser sees them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text += data

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag]


HOSTILE = """## Verdict <script>window.owned = 1</script>

<img src=x onerror="window.owned = 1"> and <a href="javascript:alert(1)">here</a>
[click me](javascript:alert(1)) [data](data:text/html;base64,PHNjcmlwdD4=) [vb](VBScript:msgbox)
<iframe src="https://evil.example"></iframe> <div onmouseover="x()">hover</div>
![pixel](https://evil.example/pixel.png)
[fine](https://example.com/a?b=c "a title")
"""


def cited(text: str, unresolved: set[str] = frozenset()) -> list[CitationView]:  # type: ignore[assignment]
    return [CitationView(ref=f"{r.doc}:{r.chunk}", doc=r.doc, chunk=r.chunk, start=r.start, end=r.end,
                         unresolved=r.doc in unresolved, title=None if r.doc in unresolved else "Pricing memo",
                         heading_path=None if r.doc in unresolved else ["Risks"], passage_start=0, passage_end=5)
            for r in find_citations(text)]


def test_no_tag_attribute_or_script_url_a_model_writes_reaches_the_page() -> None:
    tree = Tree(str(render(HOSTILE)))
    tags = {t for t, _ in tree.tags}
    assert tags <= {"h4", "p", "a", "br"}, tags  # no script, img, iframe, div: they are text
    for _, attrs in tree.tags:
        assert not any(name.startswith("on") for name in attrs), attrs
    links = tree.named("a")
    assert [a["href"] for a in links] == ["https://evil.example/pixel.png", "https://example.com/a?b=c"]
    assert all(a["rel"] == LINK_REL for a in links)
    # what the model wrote is still there for the reader, as text
    assert "<script>window.owned = 1</script>" in tree.text and 'onerror="window.owned = 1"' in tree.text
    assert "[click me](javascript:alert(1))" in tree.text


def test_markdown_renders_as_a_reader_expects_with_line_breaks_kept() -> None:
    text = ("## Synthesis: the question\n\n**Conclusion.** Go ahead.\n\n**What the panel established**\n"
            "- **Priya (Growth)**, ending CONDITIONAL\n- **Marcus (CFO)**, ending OPPOSE\n\n"
            "Open question: who owns it?\nPosition: SUPPORT — a reason\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    html = str(render(text, heading_base=1))
    tree = Tree(html)
    assert tree.named("h3") and "Synthesis: the question" in tree.text
    assert len(tree.named("strong")) == 4 and "**" not in tree.text
    assert len(tree.named("li")) == 2 and len(tree.named("br")) == 1  # the two lines stay two lines
    assert len(tree.named("td")) == 2


def test_citations_become_links_where_they_are_written_and_nowhere_else() -> None:
    text = ("Growth says so [growth] 📈 and the memo [memo:2, gone:9]; not a phase [nowhere].\n\n"
            "`[growth]` in code, [a link](https://example.com \"[memo:2]\") and a stray \ue0000\ue001.")
    html = str(render(text, phases={"growth"}, citations=cited(text, unresolved={"gone"})))
    tree = Tree(html)
    phase_links = [a for a in tree.named("a") if "cite-phase" in (a.get("class") or "")]
    assert [a["href"] for a in phase_links] == ["#phase-growth"]  # [nowhere] is no phase: text
    buttons = tree.named("button")
    assert [(b["data-doc"], b["data-chunk"]) for b in buttons] == [("memo", "2")]
    assert buttons[0]["title"] == f"Pricing memo{PATH_SEPARATOR}Risks"
    assert [s for s in tree.named("span") if "unresolved" in (s.get("class") or "")]
    assert "[nowhere]" in tree.text and "<code>[growth]</code>" in html  # a code span stays code
    title = next(a for a in tree.named("a") if a.get("href") == "https://example.com")
    assert title["title"] == "[memo:2]"  # put back as text, never markup inside an attribute
    assert "\ue000" not in html and "\ufffd0\ufffd" in html  # a placeholder a model wrote is no citation


def test_a_closing_verdict_line_reads_as_a_sentence_not_json() -> None:
    text = ('Recommendation: keep the flat plan [r1.dana].\n\n'
            'Verdict: {"answer": "Keep", "confidence": 0.8, "reason": "The panel\'s <b>vote</b> chose Keep."}\n')
    tree = Tree(str(render(text, phases=["r1.dana"])))
    assert "{" not in tree.text and '"answer"' not in tree.text
    assert " ".join(tree.text.split()).endswith(
        "Verdict Keep · confidence 0.80 — The panel's <b>vote</b> chose Keep.")  # a model's markup stays text
    assert [a.get("class") for a in tree.named("p")] == [None, "verdict-line"]
    assert {t for t, _ in tree.tags} <= {"p", "a", "span", "b"}
    review = 'I rank them.\nVerdict: {"answer": "92", "confidence": 0.61, "reason": "", "ranking": ["B", "A"]}'
    assert " ".join(Tree(str(render(review))).text.split()).endswith("Verdict 92 · confidence 0.61 · ranked B, A")
    # a line that is not a verdict's JSON stays as written: an unreadable verdict is worth seeing
    for kept in ('x\nVerdict: {"answer": "Keep", confidence: high', 'x\nVerdict: ["Keep"]', 'Verdict: {"a": 1}'):
        assert "Verdict:" in Tree(str(render(kept))).text, kept
