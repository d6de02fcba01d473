"""A history and a gate against it, as terminal text and as JSON for CI."""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from cxlbench.analysis.compare import text_table
from cxlbench.analysis.history import History, PointChange, display_label as _name, trends
from cxlbench.analysis.history_gate import FAIL, HistoryVerdict, SHORT, SUSPECT
from cxlbench.units import format_number


def _pct(x: float, signed: bool = True) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x * 100:+.1f}%" if signed else f"±{x * 100:.1f}%"


def _p(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.3f}" if x >= 0.001 else "<0.001"


def history_text(h: History, changes: list[PointChange]) -> str:
    first, last = h.runs["started"].iloc[0], h.runs["started"].iloc[-1]
    lines = [f"history of {h.machine}/{h.suite}: {len(h.runs)} runs, "
             f"{first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC (identity {h.identity})"]
    rows = [[t.name, f"{format_number(t.median)} {t.unit}", _pct(t.noise, signed=False),
             format_number(t.latest), t.steps] for t in trends(h, changes)]
    lines += text_table(["figure", "median", "run-to-run", "latest", "change points"], rows, {1, 2, 3})
    for c in h.changes:
        lines.append(f"environment: run {c.position + 1} ({c.run_id}): {c}")
    for m in h.markers:
        lines.append(f"accepted: {m.run_id} on {m.accepted_at} by {m.by}: {m.reason}")
    if h.left_out:
        lines.append(f"left out: {len(h.left_out)} run(s) — " + "; ".join(h.left_out[:3]) +
                     (" ..." if len(h.left_out) > 3 else ""))
    return "\n".join(lines)


def verdict_text(v: HistoryVerdict) -> str:
    if v.errors:
        return "cxlbench gate: inputs unusable — " + "; ".join(v.errors)
    counts = v.rows["verdict"].value_counts().to_dict() if "verdict" in v.rows else {}
    head = {FAIL: "REGRESSION", SUSPECT: "SUSPECT", SHORT: "inconclusive"}.get(v.status, "pass")
    lines = [f"cxlbench gate: {head} — {v.current} against {len(v.reference)} runs of history"
             + ("" if not counts else " — " + ", ".join(f"{n} {k}" for k, n in counts.items()))]
    rows = []
    for _, r in v.rows.iterrows():
        conf = " ".join(_pct(c) for c in r["confirm_changes"]) or "—"
        rows.append([_name(r["label"], r.get("relative_to")), f"{format_number(r['baseline'])} {r['unit']}",
                     _pct(r["noise"], False),
                     _pct(r.get("detectable", math.nan), False).replace("±", "≥"),
                     format_number(r["current"]), _pct(r["change"]), _p(r["p"]), _p(r.get("q", math.nan)),
                     conf, r.get("verdict", "—")])
    lines += text_table(["figure", "history", "run-to-run", "detectable", "current", "change", "p", "q (BH)",
                         "confirmations", "verdict"], rows, {1, 2, 3, 4, 5, 6, 7})
    if v.normalize:
        lines.append(f"cases judged relative to their drift sentinels ({v.normalize}), each scaled to the "
                     f"sentinel's median over the history; the sentinels themselves raw")
    lines += v.notes
    lines.append(v.rule.text(len(v.rows)))
    return "\n".join(lines)


def verdict_json(v: HistoryVerdict) -> str:
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, (list, tuple)):
            return [clean(i) for i in x]
        if isinstance(x, (np.floating, np.integer)):
            return clean(x.item())
        return x
    rows = [{k: clean(val) for k, val in r.items()} for r in v.rows.to_dict("records")]
    return json.dumps({"status": v.status, "exit_code": v.exit_code, "current": v.current,
                       "normalize": v.normalize,
                       "reference": v.reference, "confirmations": v.confirmations, "errors": v.errors,
                       "notes": v.notes, "rule": v.rule.text(len(v.rows)), "points": rows}, indent=1)
