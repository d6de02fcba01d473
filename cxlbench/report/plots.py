"""Charts as inline SVG, byte-stable: matplotlib's Agg-free SVG canvas (no pyplot,
no global backend), text kept as text, a fixed hash salt per chart (so ids are
unique within a page and identical between renders) and no date metadata.

A chart is a list of Series (label, x, y and an interval) plus axes settings;
the report's planner decides what to draw, this module only draws it.
"""
from __future__ import annotations

import io
import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Sequence

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from cxlbench.units import format_count, format_size

# Okabe–Ito: distinguishable with the common colour-vision deficiencies; its yellow
# (#F0E442) is darkened to #9A8700, which a thin line on white needs to be seen.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#9A8700"]
STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]

RC = {
    "svg.fonttype": "none",            # text stays text: smaller, sharper, searchable
    "font.family": ["DejaVu Sans", "sans-serif"],
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.labelsize": 9.5,
    "axes.edgecolor": "#444444",
    "axes.linewidth": 0.8,
    "axes.grid": True,
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.6,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "xtick.color": "#333333",
    "ytick.color": "#333333",
    "lines.linewidth": 1.6,
    "lines.markersize": 3.6,
}


@dataclass
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    lo: Sequence[float] | None = None
    hi: Sequence[float] | None = None
    color: str = PALETTE[0]
    style: str = "-"
    marker: str = "o"


@dataclass
class Chart:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    x_bytes: bool = False            # x is a size in bytes: log2 axis, KiB/MiB/GiB ticks
    logx: bool = False
    logx_base: int = 2               # 10 for a time axis: decades (100, 1,000 ns) read at a glance
    logy: bool = False
    y_from_zero: bool = False
    marks: list[tuple[float, str]] = field(default_factory=list)    # vertical lines (cache sizes)
    bars: bool = False               # categories on y, value on x
    caption: str = ""
    bar_labels: list[str] | None = None   # bars: a text at the end of each bar (its value, or why none)


def _fmt_tick(v: float, _pos=None) -> str:
    if v == 0:
        return "0"
    av = abs(v)
    if av >= 1e4 or av < 1e-3:
        exp = int(math.floor(math.log10(av)))
        mant = v / 10**exp
        return f"{mant:g}e{exp}"
    return f"{v:g}"


def _fmt_decade(v: float, _pos=None) -> str:
    """100, 1,000, 10,000: a log10 axis's labels in full, where 1e4 would read as code."""
    return f"{v:,.0f}" if 1 <= v < 1e7 else _fmt_tick(v)


def _byte_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log2(max(lo, 1))), math.ceil(math.log2(max(hi, 1)))
    step = max(1, math.ceil((b - a + 1) / 7))
    return [2.0**k for k in range(a, b + 1) if (k - a) % step == 0]


def plain(text: str) -> str:
    """Text drawn as written: matplotlib reads what sits between two $ as mathtext, so a
    run labelled "base$1_$x" was drawn as maths, and one that did not parse raised."""
    return str(text).replace("$", r"\$")


def render(chart: Chart, salt: str, width: float = 7.2, height: float = 3.6) -> str:
    """The chart as an <svg> element (no XML prolog), ready to inline in HTML."""
    with matplotlib.rc_context({**RC, "svg.hashsalt": salt}):
        if chart.bars and chart.series:
            names = bar_names(chart.series[0].x)
            height = max(1.6, 0.28 * sum(n.count("\n") + 1 for n in names) + 0.9)
        fig = Figure(figsize=(width, height), layout="constrained")
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        if chart.bars:
            _draw_bars(ax, chart, names)
        else:
            _draw_lines(ax, chart)
        ax.set_title(plain(chart.title), loc="left")
        ax.set_xlabel(plain(chart.xlabel))
        if not chart.bars:
            ax.set_ylabel(plain(chart.ylabel))
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None,
                                                 "Type": None})
    return _inline(buf.getvalue(), chart.title, salt)


def _draw_lines(ax, chart: Chart) -> None:
    xs_all = [x for s in chart.series for x in s.x if x is not None and math.isfinite(x)]
    ys_all = [y for s in chart.series for y in s.y if y is not None and math.isfinite(y)]
    for s in chart.series:
        ax.plot(s.x, s.y, linestyle=s.style, marker=s.marker, color=s.color, label=plain(s.label))
        if s.lo is not None and s.hi is not None and len(s.x) > 1:
            ax.fill_between(s.x, s.lo, s.hi, color=s.color, alpha=0.16, linewidth=0)
        elif s.lo is not None and s.hi is not None:
            ax.errorbar(s.x, s.y, yerr=[[s.y[0] - s.lo[0]], [s.hi[0] - s.y[0]]], color=s.color,
                        capsize=2, linewidth=1)
    if chart.x_bytes and xs_all and min(xs_all) > 0:
        ax.set_xscale("log", base=2)
        ticks = _byte_ticks(min(xs_all), max(xs_all))
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_size(v)))
    elif chart.logx and xs_all and min(xs_all) > 0:
        ax.set_xscale("log", base=chart.logx_base)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_decade if chart.logx_base == 10 else _fmt_tick))
        ax.xaxis.set_minor_formatter(NullFormatter())     # base 10's minor ticks: no "2×10²" labels
    elif xs_all and all(float(x).is_integer() for x in xs_all) and len(set(xs_all)) <= 16:
        ax.xaxis.set_major_locator(FixedLocator(sorted(set(xs_all))))     # threads: 1, 2, 4, ...
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_count(v)))  # 1, 2; 4.19M
    if chart.logy and ys_all and min(ys_all) > 0:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_fmt_tick))
    else:
        if chart.y_from_zero:
            ax.set_ylim(bottom=0)
        if ys_all and max(abs(y) for y in ys_all) >= 1e5:   # no "1e9" stranded above the axis
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_count(v)))
    if chart.marks and xs_all:
        lo, hi = min(xs_all), max(xs_all)
        for x, label in chart.marks:
            if lo <= x <= hi:
                ax.axvline(x, color="#888888", linestyle=(0, (3, 3)), linewidth=0.8, zorder=0)
                ax.annotate(plain(label), (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                            textcoords="offset points", fontsize=8, color="#555555",
                            ha="left", va="top")
    if len(chart.series) > 1 or (chart.series and chart.series[0].label):
        ncol = 1 if len(chart.series) <= 8 else 2
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=ncol, handlelength=2.6)


BAR_NAME_WIDTH = 48      # characters a line: a longer name wraps, so the bars keep their room


def bar_names(categories: Sequence) -> list[str]:
    """Each bar's name, wrapped at BAR_NAME_WIDTH: a training case's name runs to 95
    characters, and unwrapped its names took the whole figure's width and left the
    bars none (matplotlib: "axes sizes collapsed to zero")."""
    return [textwrap.fill(str(c), BAR_NAME_WIDTH, break_long_words=False) for c in categories]


def _draw_bars(ax, chart: Chart, names: list[str]) -> None:
    s = chart.series[0]
    pos = list(range(len(s.y)))
    colors = s.color.split("|") if "|" in s.color else [s.color] * len(pos)
    drawn = ax.barh(pos, s.y, color=colors, height=0.62, alpha=0.85)
    if chart.bar_labels:
        ax.bar_label(drawn, labels=[plain(t) for t in chart.bar_labels], padding=3, fontsize=8.5, color="#333333")
        top = max([*s.y, 0.0]) or 1.0
        ax.set_xlim(right=top * 1.3)                          # room for the labels,
        ax.set_xticks([t for t in ax.get_xticks() if 0 <= t <= top * 1.0001])   # no ticks past the data
    if s.lo is not None and s.hi is not None:
        ax.errorbar(s.y, pos, xerr=[[max(y - l, 0) for y, l in zip(s.y, s.lo)],
                                    [max(h - y, 0) for y, h in zip(s.y, s.hi)]],
                    fmt="none", ecolor="#333333", capsize=2, linewidth=0.9)
    ax.set_yticks(pos, [plain(n) for n in names], linespacing=1.0)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlim(left=0)


_PROLOG = re.compile(r"^.*?(<svg\b)", re.S)
_META = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_SIZE = re.compile(r'<svg([^>]*?) width="([\d.]+)pt" height="([\d.]+)pt"')


def _inline(text: str, title: str, prefix: str) -> str:
    text = _PROLOG.sub(r"\1", text, count=1)
    text = _META.sub("", text)
    # ids must be unique in the page that holds several charts
    pre = re.sub(r"[^A-Za-z0-9_-]", "-", prefix)
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{pre}-{m.group(1)}"', text)
    text = text.replace("url(#", f"url(#{pre}-").replace('href="#', f'href="#{pre}-')
    # responsive: the viewBox keeps the aspect ratio; CSS sets the width
    text = _SIZE.sub(lambda m: f'<svg{m.group(1)} class="chart" role="img"', text, count=1)
    esc = (title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    text = text.replace(">", f"><title>{esc}</title>", 1)
    return text.strip()


def sparkline(values: Sequence[float], title: str, color: str = PALETTE[0],
              width: int = 110, height: int = 24) -> str:
    """A figure's runs as a line in a small box (no axes, no text): the trend an index
    shows beside each number. Drawn directly rather than through matplotlib, whose
    smallest chart is ~10 kB of SVG; the newest point is dotted. Empty under two points."""
    ys = [float(v) for v in values if v is not None and math.isfinite(v)]
    if len(ys) < 2:
        return ""
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or abs(hi) or 1.0
    pad = 3.0
    step = (width - 2 * pad) / (len(ys) - 1)
    pts = [(pad + i * step, height - pad - (y - lo) / span * (height - 2 * pad)) for i, y in enumerate(ys)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    esc = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    x, y = pts[-1]
    return (f'<svg class="spark" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{esc}</title>'
            f'<polyline fill="none" stroke="{color}" stroke-width="1.4" points="{line}"/>'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="{color}"/></svg>')
