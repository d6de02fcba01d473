"""Read ZeRO-Offload's bar charts (Figs. 8, 9, 10 and 11) to a fraction of a pixel.

The published checks (cxlbench/analysis/published/zero-offload-*.toml) were first
read by eye, to ±0.5 TFLOPS. This measures the bars in the figure images instead: the
gridlines' rows (read from a bar-free column of each image, listed in GRID) give the
scale, pixel row -> TFLOPS, by a straight line through them; a bar's top edge is its
topmost full row less the fill's share of the anti-aliased row above it (0 for
background, 1 for the fill, by the colour's distance from white), the median over the
bar's inner columns. Where something other than background, gridline or the bar's own
edge lies just above the top (Fig. 11's green line) the edge is not seen, and the line
says so.

    git --git-dir=<mirror of github.com/Elvin-Ma/ai_papers> show \\
        HEAD:zero/images/zero-offload-figure11.jpg > f11.jpg      # f8, f9, f10 alike
    python read_bars.py f8.jpg f9.jpg f10.jpg f11.jpg

Needs numpy and Pillow. Prints one line per bar: figure, series, columns, TFLOPS.
"""
from __future__ import annotations

import sys

import numpy as np
from PIL import Image

#: the fills of the series read, as RGB (the median of a bar's body in each image)
FILLS = {"blue": (68, 114, 196), "light blue": (91, 155, 213), "orange": (237, 125, 49)}
#: Fig. 11's line (aggregate throughput), drawn over the bars
LINE = np.array([155, 194, 130])
#: per figure: (row, TFLOPS) of its gridlines, and the series whose bars are read
GRID = {
    "f8": ([(70, 50), (147, 40), (225, 30), (302.5, 20)], ["blue"]),
    "f9": ([(75, 40), (126, 30), (177, 20), (228, 10), (278, 0)], ["light blue", "orange"]),
    "f10": ([(89, 60), (150, 40), (211, 20), (273, 0)], ["blue"]),
    "f11": ([(62.5, 45), (85.5, 40), (108, 35), (131.5, 30), (154.5, 25), (177, 20), (200.5, 15),
             (223, 10), (246.5, 5)], ["blue"]),
}


def share(pixels: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """How much of each pixel is the fill: 0 on white, 1 on the fill."""
    white = np.array([255, 255, 255])
    return np.clip(((white - pixels) @ (white - fill)) / ((white - fill) @ (white - fill)), 0, 1)


def bars(a: np.ndarray, fill: np.ndarray) -> list[tuple[int, int]]:
    """Column spans of this fill's bars: 6+ adjacent columns with 15+ rows of it."""
    near = np.abs(a - fill).max(axis=2) < 40
    cols = np.where(near.sum(axis=0) > 15)[0]
    spans, start = [], None
    for i, c in enumerate(cols):
        start = c if start is None else start
        if i + 1 == len(cols) or cols[i + 1] != c + 1:
            if c - start >= 5:
                spans.append((int(start), int(c)))
            start = None
    return spans


def _longest_run(rows: np.ndarray) -> int:
    """The first row of the longest run of True."""
    best, best_len, start = 0, 0, None
    for y, on in enumerate(np.append(rows, False)):
        if on and start is None:
            start = y
        elif not on and start is not None:
            if y - start > best_len:
                best, best_len = start, y - start
            start = None
    return best


def top_edge(a: np.ndarray, fill: np.ndarray, x0: int, x1: int) -> tuple[float, bool]:
    """The bar's top row less the fill's share of the row above, the median over its inner
    columns. The body is the longest run of rows at least half the fill (a bar's darker
    outline counts as the bar; the share is not capped below), gaps of up to 5 rows bridged
    (Fig. 11's line crosses some bars below their tops; a legend's swatch of the same
    colour sits further up). A column whose top has the line's green within 4 rows does
    not see the edge; the median is over the columns that do, and where none does the
    bar is read through the line and said not seen."""
    seen, hidden = [], []
    for x in range(x0 + 2, x1 - 1):
        col = a[:, x]
        bar = (share(col, fill) > 0.5) & ~(np.abs(col - LINE).max(axis=1) < 50)   # outline rows too
        y = _longest_run(_bridged(bar, 5))
        under = (np.abs(col[y - 4:y + 2] - LINE).max(axis=1) < 50).any()
        (hidden if under else seen).append(y - share(col[y - 1], fill))
    return float(np.median(seen or hidden)), bool(seen)


def _bridged(rows: np.ndarray, gap: int) -> np.ndarray:
    """rows with runs of up to `gap` False between two True filled in."""
    out, on = rows.copy(), np.where(rows)[0]
    for a_, b_ in zip(on[:-1], on[1:]):
        if 1 < b_ - a_ <= gap + 1:
            out[a_:b_] = True
    return out


def read(path: str) -> None:
    name = path.rsplit("/", 1)[-1].split(".")[0]
    grid, series = GRID[name]
    a = np.asarray(Image.open(path).convert("RGB")).astype(float)
    rows, values = np.array(grid).T
    slope, offset = np.polyfit(rows, values, 1)
    resid = np.abs(values - (slope * rows + offset)).max()
    print(f"{name}: {abs(1 / slope):.2f} px per TFLOPS, gridlines within {resid:.2f} TFLOPS of the line")
    for label in series:
        fill = np.array(FILLS[label], dtype=float)
        for x0, x1 in bars(a, fill):
            y, seen = top_edge(a, fill, x0, x1)
            print(f"  {name} {label:10} x {x0:3}-{x1:3}  {slope * y + offset:6.2f} TFLOPS"
                  + ("" if seen else "  (the top sits under another mark: not seen)"))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        read(p)
