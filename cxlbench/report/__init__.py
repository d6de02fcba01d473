"""Reports: one self-contained HTML file per run, or per comparison of runs.

    render(runs, out_path=None, *, title=None, threshold=None, thresholds_file=None) -> Path
    render_run_html(run) -> str
    render_comparison_html(comparison, runs) -> str

The page needs nothing but itself: inline CSS, inline SVG charts, the data as a
downloadable CSV in a data: URI, no script and no network. It is rendered by
jinja2 with autoescape on, so text from a machine (hostnames, labels, CPU
models, reasons) reaches the page escaped.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import jinja2
import pandas as pd

from cxlbench.version import __version__
from cxlbench.analysis.compare import (Comparison, RunLike, as_run, compare, fmt_change, fmt_ci_change,
                                       fmt_pct)
from cxlbench import units
from cxlbench.analysis.headlines import figures
from cxlbench.analysis.held import by_point
from cxlbench.analysis.reduction import points, repetitions
from cxlbench.report import build, distributions, drift as drift_section, step_breakdown
from cxlbench.results.schema import failed_cases
from cxlbench.results.store import Run, atomic_write, measured_whole, safe_name

TEMPLATES = Path(__file__).with_name("templates")
DEFAULT_DIR = Path("reports")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters["num"] = build.num
    env.filters["pct"] = fmt_pct
    env.filters["change"] = fmt_change
    env.filters["slug"] = build.slug
    return env


def _css() -> str:
    return (TEMPLATES / "style.css").read_text(encoding="utf-8")


def run_context(run: Run) -> dict[str, Any]:
    meta = run.meta
    reps = repetitions(run.samples)
    pts = points(reps)
    tiers = [t["name"] for t in build.machine_mod.tiers(meta)]
    if not pts.empty:
        tiers += sorted(set(pts["target"]) - set(tiers))
    maker = build.ChartMaker("r", sorted(tiers, key=units.tier_order))
    marks = build.caches(meta)
    hists = distributions.run_histograms(run.path)
    families = []
    held = by_point(reps)            # a figure from a shared CPU is marked (analysis.held)
    if not pts.empty:
        for bench in build.family_order(pts["benchmark"], [meta]):
            fam = build.flags_off(pts[pts["benchmark"] == bench])
            show = build.look([meta], bench)
            if show.get("sentinel"):                  # the drift trace, not a sweep
                families.append({"id": "family-" + build.slug(bench), "name": show["title"], "benchmark": bench,
                                 "description": show["description"],
                                 **drift_section.section(run.samples, meta, maker)})
                continue
            allowed = build.requested_params([meta], bench, pts.attrs.get("axes", []))
            lead = distributions.latency_cdfs(hists, maker) if bench == "latency" else []
            families.append({"id": "family-" + build.slug(bench), "name": show["title"], "benchmark": bench,
                             "description": show["description"], "lead_charts": lead,
                             "charts": build.family_charts(fam, show, marks, maker, allowed=allowed),
                             **(step_breakdown.section(run.samples, maker) if bench == "training" else {}),
                             "tables": build.points_tables(fam, allowed, held, failed_cases(meta)),
                             "advice": _advice(run, maker) if bench == "training" else None})
    status = str(meta.get("status", "unknown"))
    warned = build.warned(meta)
    label = meta.get("label")
    host = meta.get("hostname") or meta.get("machine_name") or "unknown host"
    toc = [("machine", "Machine"), ("summary", "Tier summary")] + \
        [(f["id"], f["name"]) for f in families] + \
        [("not-measured", "Not measured")] + ([("warned", "Warnings")] if warned else []) + \
        [("provenance", "How it was made"), ("data", "Data")]
    return {
        "kind": "run", "css": _css(), "version": __version__,
        "title": f"{label or meta.get('run_id')} on {host}",
        "run_id": meta.get("run_id"), "label": label, "host": host, "status": status,
        "partial": status != "complete",
        "suite": build.provenance(meta, len(run.samples))["suite"],
        "toc": toc, "machine": build.machine_section(meta),
        "summary": _summary(run, reps, pts),
        "families": families, "not_measured": build.not_measured(meta), "warned": warned,
        "provenance": build.provenance(meta, len(run.samples)),
        "data": build.data_link(run.samples, reps, pts, safe_name(str(meta.get("run_id")))),
    }


def _summary(run: Run, reps: pd.DataFrame, pts: pd.DataFrame) -> dict[str, Any]:
    """The tier summary, from the cases measured whole: a case that failed part-way
    keeps its repetitions in the family's charts and tables, but they are not its
    figure (as the terminal's summary and the gates)."""
    whole = measured_whole(run.samples, run.meta)
    if whole is not run.samples:
        reps = repetitions(whole)
        pts = points(reps)
    return build.tier_summary(pts, reps, run.meta, figures(whole, run.meta, pts))


def _advice(run: Run, maker: build.ChartMaker) -> dict[str, Any] | None:
    """The placement advice a training run's own figures support (report.placements)."""
    from cxlbench.report.placements import run_advice
    return run_advice(run, maker)


def render_run_html(run: Run | str | Path) -> str:
    """The report of one run as an HTML string."""
    return environment().get_template("run.html").render(**run_context(as_run(run)))


def comparison_context(cmp: Comparison, runs: Sequence[Run]) -> dict[str, Any]:
    maker = build.ChartMaker("k", [i.index for i in cmp.runs])
    pts = cmp.points.copy()
    names = {i.index: i.name for i in cmp.runs}
    marks = build.caches(runs[0].meta) if runs else []
    families = []
    if not pts.empty:
        metas = [r.meta for r in runs]
        for bench in build.family_order(pts["benchmark"], metas):
            fam = build.flags_off(pts[pts["benchmark"] == bench])
            show = build.look(metas, bench)
            rows = cmp.rows[cmp.rows["benchmark"] == bench]
            families.append({"id": "family-" + build.slug(bench), "name": show["title"], "benchmark": bench,
                             "description": "One line per run; one chart per tier (matched by kind and "
                                            "ordinal). " + show["description"],
                             "charts": build.family_charts(
                                 fam, show, marks, maker, color_by="run", facet_by=["target_slot"],
                                 names=names, allowed=build.requested_params(
                                     [r.meta for r in runs], bench, pts.attrs.get("axes", []))),
                             "tables": _comparison_tables(rows, cmp)})
    counts = [{"name": i.name, **cmp.counts(i.index)} for i in cmp.runs[1:]]
    runs_info = []
    for info, run in zip(cmp.runs, runs):
        prov = build.provenance(run.meta, len(run.samples))
        runs_info.append({"name": info.name, "run_id": info.run_id, "host": info.hostname or "—",
                          "cpu": info.profile.identity.get("cpu_model") or "—",
                          "kernel": info.profile.identity.get("kernel") or "—",
                          "status": info.status, "started": info.started or "—",
                          "duration": prov["duration"], "suite": prov["suite"],
                          "command": prov["command"], "cxlbench": info.profile.context.get("cxlbench") or "—"})
    diffs = [{"field": d.field, "kind": d.kind, "cells": [_show(v) for v in d.values]}
             for d in cmp.differences if d.kind in ("identity", "context")]
    unmatched = [{"run": cmp.runs[int(u["run"])].name, "point": u["point"], "metric": u["metric"],
                  "why": u["why"]} for u in cmp.unmatched.to_dict("records")]
    not_measured = [{"run": cmp.runs[int(c["run"])].name, "benchmark": c["benchmark"],
                     "target": c["target"], "status": c["status"], "reason": c["reason"],
                     "case_id": c["case_id"]} for c in cmp.not_measured.to_dict("records")]
    table = cmp.rows.drop(columns=["key"]).copy()
    table.insert(0, "baseline", cmp.runs[0].name)
    table.insert(1, "run_name", [names[int(r)] for r in table["run"]])
    toc = [("runs", "Runs"), ("verdicts", "Verdicts")] + [(f["id"], f["name"]) for f in families] + \
        [("unmatched", "Unmatched"), ("data", "Data")]
    title = " vs ".join(i.name for i in cmp.runs)
    return {"kind": "compare", "css": _css(), "version": __version__, "title": title,
            "runs": runs_info, "differences": diffs, "counts": counts,
            "thresholds": cmp.thresholds.describe(), "confidence": f"{cmp.confidence:.0%}",
            "normalized": cmp.normalized,
            "partial": any(i.status != "complete" for i in cmp.runs),
            "partial_runs": [i.name for i in cmp.runs if i.status != "complete"],
            "families": families, "unmatched": unmatched, "not_measured": not_measured, "toc": toc,
            "data": build.data_link(table, None, table, "comparison",
                                    "every compared case: both medians, the ratio, its interval, "
                                    "the verdict and MDE")}


def _show(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, (list, tuple)):
        return ", ".join(_show(x) for x in v) or "none"
    return str(v)


def _comparison_tables(rows: pd.DataFrame, cmp: Comparison) -> list[dict[str, Any]]:
    tables = []
    for metric, mr in rows.groupby("metric", sort=False):
        unit = str(mr["unit"].iloc[0])
        others = sorted(int(r) for r in mr["run"].unique())
        headers = ["case", f"{cmp.runs[0].name} ({unit})"]
        for i in others:
            headers += [f"{cmp.runs[i].name} ({unit})", "change", f"{cmp.confidence:.0%} CI", "verdict", "MDE"]
        out_rows = []
        for key, kr in mr.groupby("key", sort=False):
            first = kr.iloc[0]
            label = first["label"]
            if any(kr["target"] != kr["target_base"]):
                label += " (" + ", ".join(sorted(set(kr["target"]) - {first["target_base"]})) + ")"
            cells = [{"text": label}, {"text": build.num(first["base_median"]), "num": True,
                                       "ci": f"{build.num(first['base_lo'])}–{build.num(first['base_hi'])}"}]
            by_run = {int(r["run"]): r for _, r in kr.iterrows()}
            for i in others:
                r = by_run.get(i)
                if r is None:
                    cells += [{"text": "—", "num": True}] + [{"text": ""}] * 4
                    continue
                cells += [{"text": build.num(r["median"]), "num": True,
                           "ci": f"{build.num(r['lo_value'])}–{build.num(r['hi_value'])}"},
                          {"text": fmt_change(r["ratio"]), "num": True},
                          {"text": fmt_ci_change(r["lo"], r["hi"]), "num": True},
                          {"text": r["verdict"], "verdict": r["verdict"], "note": r["note"] or ""},
                          {"text": fmt_pct(r["mde"]) if r["verdict"] in ("same", "inconclusive")
                           and math.isfinite(r["mde"]) else "", "num": True}]
            out_rows.append(cells)
        tables.append({"metric": metric, "title": f"{build.metric_title(metric)} ({unit}, "
                                                  f"{mr['better'].iloc[0]} is better)",
                       "headers": headers, "rows": out_rows[:build.MAX_TABLE_ROWS],
                       "more": max(0, len(out_rows) - build.MAX_TABLE_ROWS)})
    return tables


def render_comparison_html(cmp: Comparison, runs: Sequence[RunLike] | None = None) -> str:
    """The comparison report as an HTML string."""
    loaded = [as_run(r) for r in runs] if runs is not None else [as_run(i.path) for i in cmp.runs]
    return environment().get_template("compare.html").render(**comparison_context(cmp, loaded))


def render(runs: RunLike | Sequence[RunLike], out_path: str | Path | None = None, *,
           threshold: float | str | None = None, thresholds_file: str | Path | None = None,
           normalize: str | None = None) -> Path:
    """Write the report of one run, or the comparison of several (the first is the
    baseline), to out_path (default: reports/<run id>.html or reports/compare-<ids>.html);
    `normalize` judges the comparison relative to the drift sentinels, as compare's.
    Returns the path written."""
    if isinstance(runs, (str, Path, Run)):
        runs = [runs]
    loaded = [as_run(r) for r in runs]
    if not loaded:
        raise ValueError("render needs at least one run")
    if len(loaded) == 1:
        html = environment().get_template("run.html").render(**run_context(loaded[0]))
        default = f"{safe_name(str(loaded[0].run_id))}.html"
    else:
        cmp = compare(loaded, threshold=threshold, thresholds_file=thresholds_file, normalize=normalize)
        html = environment().get_template("compare.html").render(**comparison_context(cmp, loaded))
        default = "compare-" + "-vs-".join(safe_name(str(r.meta.get("label") or r.run_id))
                                           for r in loaded)[:150] + ".html"
    path = Path(out_path) if out_path is not None else DEFAULT_DIR / default
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, html.encode("utf-8", "backslashreplace"))
    return path


__all__ = ["render", "render_run_html", "render_comparison_html", "run_context", "comparison_context"]
