"""The evaluation page, parsed: one interval per arm in the accuracy plot, with the report's
numbers (and the theory's marker for a simulated arm), the tables showing the same figures
as the JSON, every text escaped, and a report over 1,000 items rendered in well under a
second."""

from __future__ import annotations

import random
import time
from html.parser import HTMLParser
from typing import Any

from orchestrator.api.ui.eval_page import eval_page
from orchestrator.api.ui.plots import nice_ceiling, pct, pct_span
from orchestrator.evaluation.outcomes import ItemOutcome
from orchestrator.evaluation.report import Report, build_report

EVIL = '<script>alert("owned")</script> & <b onmouseover=x>'
EXPERTS = ("ada", "bo", "cy")


class Parsed(HTMLParser):
    """Every element's tag, attributes and text (its own and its descendants')."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "circle", "line", "rect", "path"}

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[dict[str, Any]] = []
        self.open: list[dict[str, Any]] = []
        self.feed(html)
        self.close()
        assert not self.open, [e["tag"] for e in self.open]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = {"tag": tag, "attrs": {k: v or "" for k, v in attrs}, "text": "", "parents": list(self.open)}
        self.elements.append(element)
        if tag not in self.VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append({"tag": tag, "attrs": {k: v or "" for k, v in attrs}, "text": "",
                              "parents": list(self.open)})

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        assert self.open and self.open[-1]["tag"] == tag, (tag, [e["tag"] for e in self.open])
        self.open.pop()

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element["text"] += data

    def having(self, tag: str, cls: str | None = None, **attrs: str) -> list[dict[str, Any]]:
        return [e for e in self.elements if e["tag"] == tag
                and (cls is None or cls in e["attrs"].get("class", "").split())
                and all(e["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items())]


def outcome(arm: str, item: int, correct: bool, *, rounds: list[list[bool]] | None = None,
            tokens: int = 1000, reviews: list[dict[str, Any]] | None = None) -> ItemOutcome:
    graded = [dict(zip(EXPERTS, r, strict=True)) for r in rounds or []]
    return ItemOutcome(arm=arm, item_id=f"q{item}", expected="A", answer="A" if correct else "B", correct=correct,
                       plan_id=f"{arm}-{item}", status="completed", tokens=tokens,
                       rounds=[{e: "A" if c else "B" for e, c in r.items()} for r in graded], rounds_correct=graded,
                       rounds_planned=len(graded) or 1, reviews=reviews or [])


def report(panel_name: str = "panel") -> Report:
    rng = random.Random(2)
    outcomes = []
    for i in range(60):
        first = [rng.random() < 0.7 for _ in EXPERTS]
        second = [sum(first) >= 2 if rng.random() < 0.4 else c for c in first]
        review = {"reviewer": "ada", "labels": ["A", "B"], "authors": ["bo", "cy"], "ranking": ["A", "B"]}
        outcomes.append(outcome(panel_name, i, sum(second) >= 2, rounds=[first, second], tokens=3000,
                                reviews=[review]))
        outcomes.append(outcome("single", i, rng.random() < 0.7, tokens=900))
    record = {"name": "page-test", "arms": [
        {"name": panel_name, "kind": "panel", "baseline": False, "experts": 3,
         "simulation": {"skill": 0.7, "options": 2, "conformity": 0.4}},
        {"name": "single", "kind": "single", "baseline": True, "experts": 1, "simulation": None}]}
    return build_report(record, outcomes)


def test_the_accuracy_plot_has_one_interval_per_arm_with_the_reports_numbers() -> None:
    r = report()
    parsed = Parsed(eval_page(r, viewer=None, auth=False))
    (svg,) = parsed.having("svg", "intervals")
    intervals = [e for e in parsed.having("g", "interval") if svg in e["parents"]]
    assert [e["attrs"]["data-label"] for e in intervals] == ["panel", "single"]
    for element, arm in zip(intervals, r.arms, strict=True):
        attrs = element["attrs"]
        assert float(attrs["data-value"]) == arm.accuracy
        assert (float(attrs["data-low"]), float(attrs["data-high"])) == arm.interval
        (shown,) = [e for e in parsed.having("text", "value") if element in e["parents"]]
        assert shown["text"] == f"{pct(arm.accuracy)}  [{pct_span(*arm.interval)}]"
        assert len([e for e in parsed.having("line", "whisker") if element in e["parents"]]) == 1
        theories = [e for e in parsed.having("path", "theory") if element in e["parents"]]
        if arm.theory is None:
            assert "data-theory" not in attrs and not theories
        else:
            assert float(attrs["data-theory"]) == arm.theory.accuracy and len(theories) == 1
    panel = r.arm("panel")
    assert panel.theory is not None and panel.panel is not None
    # the cost plot: one point per arm, at (tokens per item, accuracy)
    points = parsed.having("g", "point")
    assert [(p["attrs"]["data-label"], float(p["attrs"]["data-x"]), float(p["attrs"]["data-y"])) for p in points] == [
        (a.name, a.tokens_per_item, a.accuracy) for a in r.arms]
    # the flips plot: one group per panel and transition, right→wrong then wrong→right
    (group,) = parsed.having("g", "group")
    bars = [e for e in parsed.having("g", "bar") if group in e["parents"]]
    (flips,) = panel.panel.flips
    assert [float(b["attrs"]["data-value"]) for b in bars] == [flips.pooled.right_to_wrong_rate,
                                                               flips.pooled.wrong_to_right_rate]


def cell(parsed: Parsed, part: str, arm: str, figure: str) -> str:
    (section,) = parsed.having("section", part)
    rows = [e for e in parsed.having("tr", data_arm=arm) if section in e["parents"]]
    (found,) = [e for e in parsed.having("td", data_figure=figure) if any(row in e["parents"] for row in rows)]
    return " ".join(found["text"].split())


def test_the_tables_show_the_reports_figures() -> None:
    r = report()
    parsed = Parsed(eval_page(r, viewer=None, auth=False))
    panel, single = r.arm("panel"), r.arm("single")
    assert panel.theory is not None and panel.panel is not None
    for arm in (panel, single):
        assert cell(parsed, "arms", arm.name, "accuracy") == pct(arm.accuracy)
        assert cell(parsed, "arms", arm.name, "interval") == pct_span(*arm.interval)
        assert cell(parsed, "arms", arm.name, "items") == "60"
        assert cell(parsed, "arms", arm.name, "tokens_per_item") == f"{arm.tokens_per_item:,.0f}"
    within = "inside" if panel.theory.within else "outside"
    assert cell(parsed, "arms", "panel", "theory") == f"{pct(panel.theory.accuracy)} {within}"
    assert cell(parsed, "arms", "single", "theory") == "—"
    (pair,) = r.pairs
    assert cell(parsed, "paired", "panel", "only_arm") == str(pair.table.a_only)
    assert cell(parsed, "paired", "panel", "p_value") == f"{pair.table.p_value:.3g}"
    p = panel.panel
    assert cell(parsed, "panels", "panel", "lost") == f"{p.lost} of {p.present}"
    low, high = p.effective_votes_interval or (0, 0)
    assert cell(parsed, "panels", "panel", "effective_votes") == (
        f"{p.effective_votes:.2f} [{low:.2f}-{high:.2f}] · theory 3.00 inside")
    (flips,) = p.flips
    assert cell(parsed, "flips", "panel", "right_to_wrong") == (
        f"{flips.pooled.right_to_wrong} of {flips.pooled.right_before}")
    assert panel.theory.flips is not None
    expected = pct(panel.theory.flips.right_to_wrong_rate)
    assert cell(parsed, "flips", "panel", "theory_right_to_wrong").startswith(expected)
    assert p.reviews is not None
    assert cell(parsed, "reviews", "panel", "observed") == "100.0 %"
    assert cell(parsed, "reviews", "panel", "self_first") == "—"  # the reviews excluded the reviewer's own answer
    assert parsed.having("title")[0]["text"] == "Eval page-test · Conclave"


def test_dollars_are_columns_only_when_the_registry_priced_a_model() -> None:
    unpriced = Parsed(eval_page(report(), viewer=None, auth=False))
    assert not unpriced.having("td", data_figure="cost_per_item")  # no column of dashes
    record = {"name": "priced", "arms": [{"name": "single", "kind": "single", "baseline": False, "experts": 1}]}
    priced = build_report(record, [ItemOutcome(arm="single", item_id=f"q{i}", expected="A", answer="A",
                                               correct=True, plan_id=f"p{i}", status="completed", tokens=100,
                                               cost_usd=0.002) for i in range(4)])
    parsed = Parsed(eval_page(priced, viewer=None, auth=False))
    assert cell(parsed, "arms", "single", "cost_per_item") == "$0.002"
    assert cell(parsed, "arms", "single", "cost_per_correct") == "$0.002"


def test_an_arm_name_with_markup_is_escaped_everywhere() -> None:
    html = eval_page(report(EVIL), viewer=None, auth=False)
    assert "<script" not in html and "<b " not in html
    assert "&lt;script&gt;" in html
    parsed = Parsed(html)
    assert not parsed.having("script") and not parsed.having("b")
    assert parsed.having("g", "interval")[0]["attrs"]["data-label"] == EVIL
    assert cell(parsed, "arms", EVIL, "accuracy").endswith("%")


def test_a_report_without_panels_or_items_still_renders() -> None:
    record = {"name": "bare", "arms": [{"name": "single", "kind": "single", "baseline": True, "experts": 1,
                                        "simulation": None}]}
    parsed = Parsed(eval_page(build_report(record, []), viewer=None, auth=True))
    (row,) = parsed.having("g", "interval")
    assert row["attrs"]["data-value"] == "" and (row["attrs"]["data-low"], row["attrs"]["data-high"]) == ("0.0", "1.0")
    assert not parsed.having("svg", "scatter") and not parsed.having("svg", "bars")
    assert not parsed.having("section", "panels") and not parsed.having("section", "paired")


def test_round_ceilings_for_the_axes() -> None:
    assert [nice_ceiling(v) for v in (0.0, 0.04, 0.33, 0.5, 1050, 2600, 10)] == [1.0, 0.04, 0.4, 0.5, 1200, 3000, 10]


def test_a_report_over_a_thousand_items_renders_in_under_a_second() -> None:
    rng = random.Random(0)
    reviews = [{"reviewer": e, "labels": ["A", "B"], "authors": [x for x in EXPERTS if x != e], "ranking": ["B", "A"]}
               for e in EXPERTS]
    outcomes = []
    for i in range(1000):
        rounds = [[rng.random() < 0.7 for _ in EXPERTS] for _ in range(2)]
        outcomes.append(outcome("panel", i, rng.random() < 0.8, rounds=rounds, tokens=5000, reviews=reviews))
        outcomes.append(outcome("single", i, rng.random() < 0.7))
    record = {"name": "big", "arms": [
        {"name": "panel", "kind": "panel", "baseline": False, "experts": 3, "simulation": {"skill": 0.7, "options": 2}},
        {"name": "single", "kind": "single", "baseline": True, "experts": 1, "simulation": None}]}
    started = time.perf_counter()
    r = build_report(record, outcomes)
    html = eval_page(r, viewer=None, auth=False)
    text = r.table()
    took = time.perf_counter() - started
    assert took < 1.0, took
    assert len(Parsed(html).having("g", "interval")) == 2 and "panel" in text
