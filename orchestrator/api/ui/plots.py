"""Small inline SVG plots, drawn on the server: no script, no library, nothing fetched.

Three shapes, enough for an evaluation's page:

- :func:`interval_plot` — one row per series: a point with its interval as a whisker, and an
  optional second marker (a theoretical value) on the same scale [0, 1];
- :func:`scatter_plot` — labelled points, x on a linear scale from 0, y a share in [0, 1];
- :func:`bar_plot` — groups of bars (shares), each with an optional interval whisker.

Every text goes through :class:`markupsafe.Markup` formatting (escaped), and colours come from
classes in ``static/style.css`` (the pages' Content-Security-Policy allows no inline style;
SVG presentation attributes like ``x`` or ``stroke-width`` are not styles). Each mark carries
its numbers as ``data-*`` attributes and a ``<title>`` (the browser's tooltip), so a test, or
a reader with a screen reader, gets the same numbers as the eye.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from orchestrator.api.ui.html import join

LABEL_CHARS = 22  # a label longer than this is cut in the plot (the full text is its <title>)


def pct(value: float | None) -> str:
    """A share as the pages print it: ``83.7 %``; an em dash when undefined."""
    return "—" if value is None else f"{100 * value:.1f} %"


def pct_span(low: float, high: float) -> str:
    """The interval as ``80.0``, an en dash, ``87.1 %``."""
    return f"{100 * low:.1f}\u2013{100 * high:.1f} %"


@dataclass(frozen=True)
class IntervalRow:
    label: str
    value: float | None  # None: nothing measured (the whisker spans the whole scale)
    low: float
    high: float
    theory: float | None = None  # drawn as a diamond when given


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class BarGroup:
    label: str
    bars: tuple[Bar, ...]


def _cut(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


def _n(x: float) -> str:
    """A coordinate: one decimal is enough on screen."""
    return f"{x:.1f}"


def _svg(kind: str, width: int, height: int, title: str, body: Markup) -> Markup:
    return Markup('<svg class="plot {kind}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
                  'aria-label="{title}" xmlns="http://www.w3.org/2000/svg"><title>{title}</title>{body}</svg>').format(
        kind=kind, w=width, h=height, title=title, body=body)


def nice_ceiling(value: float) -> float:
    """The smallest round number (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6 or 8 times a power of ten) at
    least ``value``: its quarters, the ticks, are round too."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10):
        if step * power >= value * (1 - 1e-12):
            return step * power
    return 10 * power  # pragma: no cover - the loop ends at 10


def interval_plot(rows: Sequence[IntervalRow], *, title: str) -> Markup:
    """Rows of point-and-whisker on a [0, 1] axis (printed in percent)."""
    left, right, value_w, row_h, top = 170, 560, 200, 30, 26
    width, height = right + value_w, top + row_h * len(rows) + 24

    def x(v: float) -> float:
        return left + (right - left) * max(0.0, min(1.0, v))

    grid = join(Markup('<line class="grid" x1="{x}" y1="{y0}" x2="{x}" y2="{y1}"/>'
                       '<text class="tick" x="{x}" y="{ty}" text-anchor="middle">{t}</text>').format(
        x=_n(x(t / 100)), y0=top - 6, y1=height - 22, ty=height - 8, t=t) for t in range(0, 101, 25))
    marks = []
    for i, r in enumerate(rows):
        y = top + row_h * i + row_h / 2
        point = Markup("") if r.value is None else Markup(
            '<circle class="point" cx="{cx}" cy="{y}" r="4.5"/>').format(cx=_n(x(r.value)), y=_n(y))
        theory = Markup("") if r.theory is None else Markup(
            '<path class="theory" d="M{cx} {a}L{b} {y}L{cx} {c}L{d} {y}Z"><title>theory {t}</title></path>').format(
            cx=_n(x(r.theory)), a=_n(y - 6), b=_n(x(r.theory) + 6), c=_n(y + 6), d=_n(x(r.theory) - 6), y=_n(y),
            t=pct(r.theory))
        shown = f"{pct(r.value)}  [{pct_span(r.low, r.high)}]"
        marks.append(Markup(
            '<g class="interval" data-label="{label}" data-value="{value}" data-low="{low}" data-high="{high}"'
            '{theory_attr}><title>{label}: {shown}{theory_text}</title>'
            '<text class="label" x="{lx}" y="{ty}" text-anchor="end">{cut}</text>'
            '<line class="whisker" x1="{x0}" y1="{y}" x2="{x1}" y2="{y}"/>'
            '<line class="cap" x1="{x0}" y1="{ya}" x2="{x0}" y2="{yb}"/>'
            '<line class="cap" x1="{x1}" y1="{ya}" x2="{x1}" y2="{yb}"/>{point}{theory}'
            '<text class="value" x="{vx}" y="{ty}">{shown}</text></g>').format(
            label=r.label, value="" if r.value is None else repr(r.value), low=repr(r.low), high=repr(r.high),
            theory_attr=Markup("") if r.theory is None else Markup(' data-theory="{}"').format(repr(r.theory)),
            shown=shown, theory_text="" if r.theory is None else f"; theory {pct(r.theory)}",
            lx=left - 10, ty=_n(y + 4), cut=_cut(r.label), x0=_n(x(r.low)), x1=_n(x(r.high)), y=_n(y),
            ya=_n(y - 5), yb=_n(y + 5), point=point, theory=theory, vx=right + 14))
    return _svg("intervals", width, height, title, grid + join(marks))


def scatter_plot(points: Sequence[Point], *, title: str, x_label: str, y_label: str) -> Markup:
    """Labelled points: x from 0 to a round number above the largest, y a share in [0, 1]."""
    left, right, top, bottom = 60, 560, 16, 230
    width, height = right + 160, bottom + 44
    x_max = nice_ceiling(max((p.x for p in points), default=1.0) * 1.05)

    def x(v: float) -> float:
        return left + (right - left) * max(0.0, min(1.0, v / x_max))

    def y(v: float) -> float:
        return bottom - (bottom - top) * max(0.0, min(1.0, v))

    axes = join(Markup('<line class="grid" x1="{l}" y1="{y}" x2="{r}" y2="{y}"/>'
                       '<text class="tick" x="{tx}" y="{ty}" text-anchor="end">{t}</text>').format(
        l=left, r=right, y=_n(y(t / 100)), tx=left - 6, ty=_n(y(t / 100) + 4), t=t) for t in range(0, 101, 25))
    axes += join(Markup('<line class="grid" x1="{x}" y1="{t}" x2="{x}" y2="{b}"/>'
                        '<text class="tick" x="{x}" y="{ty}" text-anchor="middle">{v}</text>').format(
        x=_n(x(x_max * k / 4)), t=top, b=bottom, ty=bottom + 16, v=f"{x_max * k / 4:,.0f}") for k in range(5))
    axes += Markup('<text class="axis" x="{cx}" y="{by}" text-anchor="middle">{xl}</text>'
                   '<text class="axis" x="14" y="{cy}" text-anchor="middle" transform="rotate(-90 14 {cy})">{yl}'
                   '</text>').format(cx=(left + right) // 2, by=bottom + 36, xl=x_label, cy=(top + bottom) // 2,
                                     yl=y_label)
    marks = join(Markup(
        '<g class="point" data-label="{label}" data-x="{xv}" data-y="{yv}"><title>{label}: {xs} · {ys}</title>'
        '<circle cx="{cx}" cy="{cy}" r="5"/><text class="label" x="{lx}" y="{ly}">{cut}</text></g>').format(
        label=p.label, xv=repr(p.x), yv=repr(p.y), xs=f"{p.x:,.0f}", ys=pct(p.y), cx=_n(x(p.x)), cy=_n(y(p.y)),
        lx=_n(x(p.x) + 8), ly=_n(y(p.y) + 4), cut=_cut(p.label)) for p in points)
    return _svg("scatter", width, height, title, axes + marks)


def bar_plot(groups: Sequence[BarGroup], *, title: str) -> Markup:
    """Groups of vertical bars (shares), the scale up to a round number above the tallest."""
    left, top, bottom, bar_w, gap, group_gap = 56, 16, 200, 26, 6, 34
    widths = [len(g.bars) * (bar_w + gap) - gap for g in groups]
    width = max(left + 320, left + sum(widths) + group_gap * (len(groups) + 1) + 10)  # room for the legend
    height = bottom + 52
    tallest = max((max(b.value, b.high or 0.0) for g in groups for b in g.bars), default=0.0)
    y_max = min(1.0, nice_ceiling(tallest * 1.05)) if tallest > 0 else 1.0

    def y(v: float) -> float:
        return bottom - (bottom - top) * max(0.0, min(1.0, v / y_max))

    axes = join(Markup('<line class="grid" x1="{l}" y1="{y}" x2="{r}" y2="{y}"/>'
                       '<text class="tick" x="{tx}" y="{ty}" text-anchor="end">{t}</text>').format(
        l=left, r=width - 10, y=_n(y(y_max * k / 4)), tx=left - 6, ty=_n(y(y_max * k / 4) + 4),
        t=f"{100 * y_max * k / 4:g} %") for k in range(5))
    marks = []
    at = left + group_gap
    for g, w in zip(groups, widths, strict=True):
        bars = []
        for i, b in enumerate(g.bars):
            bx = at + i * (bar_w + gap)
            whisker = Markup("")
            if b.low is not None and b.high is not None:
                whisker = Markup('<line class="whisker" x1="{c}" y1="{y0}" x2="{c}" y2="{y1}"/>').format(
                    c=_n(bx + bar_w / 2), y0=_n(y(b.low)), y1=_n(y(b.high)))
            interval = "" if b.low is None or b.high is None else f" [{pct_span(b.low, b.high)}]"
            bars.append(Markup(
                '<g class="bar bar-{i}" data-label="{label}" data-value="{v}"><title>{group} {label}: {shown}'
                '</title><rect x="{x}" y="{top}" width="{w}" height="{h}"/>{whisker}'
                '<text class="value" x="{c}" y="{ty}" text-anchor="middle">{short}</text></g>').format(
                i=i, label=b.label, v=repr(b.value), group=g.label, shown=pct(b.value) + interval, x=_n(bx),
                top=_n(y(b.value)), w=bar_w, h=_n(bottom - y(b.value)), whisker=whisker, c=_n(bx + bar_w / 2),
                ty=_n(min(y(b.value), y(b.high) if b.high is not None else bottom) - 4),
                short=f"{100 * b.value:.1f}"))
        marks.append(Markup('<g class="group" data-label="{label}">{bars}<text class="label" x="{cx}" y="{ly}" '
                            'text-anchor="middle">{cut}</text></g>').format(
            label=g.label, bars=join(bars), cx=_n(at + w / 2), ly=bottom + 18, cut=_cut(g.label)))
        at += w + group_gap
    legend = join(Markup('<g class="legend bar-{i}"><rect x="{x}" y="{y}" width="12" height="12"/>'
                         '<text x="{tx}" y="{ty}">{label}</text></g>').format(
        i=i, x=left + 150 * i, y=bottom + 30, tx=left + 150 * i + 18, ty=bottom + 40, label=b.label)
        for i, b in enumerate(groups[0].bars)) if groups else Markup("")
    return _svg("bars", width, height, title, axes + join(marks) + legend)
