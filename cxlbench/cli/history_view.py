"""A history and a gate against it, as terminal text and as JSON for CI."""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from cxlbench.analysis.compare import text_table
from cxlbench.analysis.history import History, PointChange, display_label as _name, trends
from cxlbench.analysis.history_gate import ERROR, FAIL, PASS, HistoryVerdict, SHORT, SUSPECT
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
        lines.append(left_out_line(h.left_out))
    return "\n".join(lines)


def left_out_line(left: list[str]) -> str:
    """The runs a history could not use (damaged, unfinished), named: a gate that drops
    them without a word would judge on less history than its user thinks."""
    return f"left out: {len(left)} run(s) — " + "; ".join(left[:3]) + (" ..." if len(left) > 3 else "")


def verdict_text(v: HistoryVerdict) -> str:
    if v.errors:
        return "cxlbench gate: inputs unusable — " + "; ".join(v.errors)
    counts = v.rows["verdict"].value_counts().drop("—", errors="ignore").to_dict() if "verdict" in v.rows else {}
    head = {FAIL: "REGRESSION", SUSPECT: "SUSPECT", SHORT: "inconclusive",
            ERROR: "POINTS MISSING"}.get(v.status, "pass")
    lines = [f"cxlbench gate: {head} — {v.current} against {len(v.reference)} runs of history"
             + _before_steps(v)
             + ("" if not counts else " — " + ", ".join(f"{n} {k}" for k, n in counts.items()))]
    rows = []
    for _, r in v.rows.iterrows():
        conf = " ".join(_pct(c) for c in r["confirm_changes"]) or "—"
        rows.append([_name(r["label"], r.get("relative_to")), f"{format_number(r['baseline'])} {r['unit']}",
                     _pct(r["noise"], False),
                     _pct(r.get("detectable", math.nan), False).replace("±", "≥"),
                     format_number(r["current"]), _pct(r["change"]), *map(_p, _p_q(r)),
                     conf, r.get("verdict", "—")])
    lines += text_table(["figure", "history", "run-to-run", "detectable", "current", "change", "p", "q (BH)",
                         "confirmations", "verdict"], rows, {1, 2, 3, 4, 5, 6, 7})
    lines += [f"note: {n}" for n in point_notes(v)]
    if v.normalize:
        lines.append(f"cases judged relative to their drift sentinels ({v.normalize}), each scaled to the "
                     f"sentinel's median over the history; the sentinels themselves raw")
    lines += v.notes
    lines.append(v.rule.text(v.judged))
    return "\n".join(lines)


def _p_q(r) -> tuple[float, float]:
    """The p and q of the test that gave the verdict: the good way's for a faster point."""
    if r.get("verdict") == "faster":
        return r["p_faster"], r["q_faster"]
    return r["p"], r.get("q", math.nan)


def _before_steps(v: HistoryVerdict) -> str:
    """How many points are judged from before an unaccepted step, on fewer runs than the
    window: the header's count is the window's."""
    if "stepped" not in v.rows:
        return ""
    stepped = v.rows[v.rows["stepped"] != ""]
    if stepped.empty:
        return ""
    n = stepped["n_history"]
    runs = f"{n.min()}" if n.min() == n.max() else f"{n.min()}-{n.max()}"
    return f" ({len(stepped)} point{'s' if len(stepped) > 1 else ''} against the {runs} before their steps)"


def point_notes(v: HistoryVerdict) -> list[str]:
    """'figure: note' for each point the gate left a note on (buffers on other frames)."""
    if "note" not in v.rows:
        return []
    return [f"{_name(r['label'], r.get('relative_to'))}: {r['note']}"
            for _, r in v.rows.iterrows() if r["note"]]


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
                       "notes": v.notes, "rule": v.rule.text(v.judged), "points": rows}, indent=1)


_TITLES = {FAIL: "❌ cxlbench history gate: slower, confirmed",
           SUSPECT: "⏳ cxlbench history gate: suspect, confirmation runs needed",
           SHORT: "❔ cxlbench history gate: inconclusive",
           PASS: "✅ cxlbench history gate: pass",
           ERROR: "⚠️ cxlbench history gate: points of the history missing from the run"}


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict_markdown(v: HistoryVerdict) -> str:
    """The verdict for a CI job's page: the status, the rule it was judged by, and every
    figure with its history, its detectable change and its verdict."""
    if v.errors:
        return "## ⚠️ cxlbench history gate: inputs unusable\n\n" + "".join(f"- {_md(e)}\n" for e in v.errors)
    out = [f"## {_TITLES.get(v.status, v.status)}", "",
           f"- **Current**: `{v.current}` against {len(v.reference)} runs of history{_before_steps(v)}",
           *([f"- **Confirmation runs**: {', '.join(f'`{c}`' for c in v.confirmations)}"] if v.confirmations else []),
           f"- **Rule**: {_md(v.rule.text(v.judged).removeprefix('rule: '))}"]
    out += [f"- {_md(n)}" for n in v.notes + point_notes(v)]
    out += ["", "| figure | history | run-to-run | detectable | current | change | q (BH) | verdict |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    for _, r in v.rows.iterrows():
        out.append(f"| {_md(_name(r['label'], r.get('relative_to')))} | {format_number(r['baseline'])} {_md(r['unit'])} "
                   f"| {_pct(r['noise'], False)} | {_pct(r.get('detectable', math.nan), False).replace('±', '≥')} "
                   f"| {format_number(r['current'])} | {_pct(r['change'])} | {_p(_p_q(r)[1])} "
                   f"| {_md(r.get('verdict', '—'))} |")
    return "\n".join(out) + "\n"


def verdict_junit(v: HistoryVerdict) -> str:
    """JUnit XML, one testcase per figure: slower (confirmed) is a failure, suspect a
    failure awaiting its confirmation runs, inconclusive history a skip."""
    import xml.etree.ElementTree as ET
    suite = ET.Element("testsuite", name="cxlbench history gate")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if v.errors:
        tc = ET.SubElement(suite, "testcase", classname="cxlbench.gate", name="inputs")
        ET.SubElement(tc, "error", message="inputs unusable").text = "\n".join(v.errors)
        counts.update(tests=1, errors=1)
    for _, r in v.rows.iterrows():
        counts["tests"] += 1
        tc = ET.SubElement(suite, "testcase", classname=f"cxlbench.{r.get('benchmark', 'case')}",
                           name=_name(r["label"], r.get("relative_to")))
        detail = (f"history {format_number(r['baseline'])} {r['unit']} (run-to-run {_pct(r['noise'], False)}), "
                  f"current {format_number(r['current'])}, change {_pct(r['change'])}, q {_p(_p_q(r)[1])}")
        if r.get("stepped"):
            detail += f"; judged against the runs before its step at {r['stepped']} ({_pct(r['step'])}), not accepted"
        if r.get("note"):
            detail += f"; {r['note']}"
        verdict = str(r.get("verdict", ""))
        if verdict in ("slower", "suspect"):
            counts["failures"] += 1
            ET.SubElement(tc, "failure", message=f"{verdict}: {_pct(r['change'])}").text = detail
        elif verdict == "missing" and v.status == ERROR:
            counts["errors"] += 1
            ET.SubElement(tc, "error", message=f"missing: {r['note']}").text = detail
        elif verdict == "missing":
            counts["skipped"] += 1
            ET.SubElement(tc, "skipped", message=f"missing (--allow-missing): {r['note']}").text = detail
        elif v.status == SHORT:
            counts["skipped"] += 1
            ET.SubElement(tc, "skipped", message="inconclusive: too little history").text = "; ".join(v.notes)
        else:
            ET.SubElement(tc, "system-out").text = f"{verdict}: {detail}"
    suite.attrib.update({k: str(n) for k, n in counts.items()})
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
