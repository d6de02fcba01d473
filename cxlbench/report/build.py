"""What a report shows, computed from runs: plain dicts and lists for the templates.

Nothing here writes HTML (the templates do, with autoescape on), so every string
taken from a machine reaches the page escaped.
"""
from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Iterable
from urllib.parse import quote

import numpy as np
import pandas as pd

from cxlbench.analysis import machine as machine_mod
from cxlbench.analysis.compare import fmt_num, params_text
from cxlbench.analysis.derive import LOADED_KEYS, at_share_of_peak
from cxlbench.analysis.headlines import Figure
from cxlbench.analysis.held import Held
from cxlbench.analysis.reduction import precision
from cxlbench.analysis.stats import ratio_ci
from cxlbench.results.schema import case_warnings
from cxlbench.report.plots import MARKERS, PALETTE, STYLES, Chart, Series, render
from cxlbench.units import format_count, format_cpulist, format_number, format_param, format_size, tier_order

#: For a run that records no description of a family (made before families
#: described themselves) or whose declared axis did not vary: the x axis and the
#: facets a reader would choose, in order of preference.
X_PREFERENCE = ["working_set_bytes", "threads", "delay_cycles", "delay", "queue_depth", "iodepth",
                "block_bytes", "reuse", "uses", "k", "chains", "size_bytes", "buffer_bytes", "bytes",
                "weight", "batch", "seq_len"]
FACET_PREFERENCE = ["kernel", "mix", "op", "mode", "access", "direction", "strategy", "pattern",
                    "placement"]
CSV_BUDGET = 6 * 2**20          # bytes of CSV embedded in the page at most
MAX_CHARTS = 12                 # per family and metric
MAX_TABLE_ROWS = 400
NO_PARAM = {"run", "target_slot", "initiator_slot", "key", "params", "point"}


# ------------------------------------------------------------------ formatting

def num(x: Any) -> str:
    try:
        return fmt_num(float(x))
    except (TypeError, ValueError):
        return "—"


def size(x: Any) -> str:
    try:
        return format_size(int(x)) if x is not None and float(x) > 0 else "—"
    except (TypeError, ValueError):
        return "—"


def param_header(name: str) -> str:
    return {"working_set_bytes": "working set", "page_bytes": "page found", "block_bytes": "block",
            "delay_cycles": "delay (cycles)", "threads": "threads", "queue_depth": "queue depth"}.get(
        name, name[:-6].replace("_", " ") if name.endswith("_bytes") else name.replace("_", " "))


param_value = format_param


def cell(median: float | None, lo: float | None = None, hi: float | None = None,
         note: str = "") -> dict[str, Any] | None:
    if median is None or not math.isfinite(median):
        return None
    ci = f"{num(lo)}–{num(hi)}" if lo is not None and hi is not None and math.isfinite(lo) \
        and math.isfinite(hi) and lo != hi else ""
    return {"value": num(median), "ci": ci, "note": note}


def _duration(start: str | None, end: str | None) -> str:
    try:
        s = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return "—"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


# ------------------------------------------------------------------ the machine

def caches(meta: dict) -> list[tuple[float, str]]:
    """(size, label) of data/unified caches, for chart marks and the machine table."""
    cpu = machine_mod.machine_record(meta).get("cpu") or {}
    out = []
    for c in cpu.get("caches") or []:
        if c.get("kind") == "Instruction" or not c.get("size_bytes"):
            continue
        label = f"L{c.get('level')}{'d' if c.get('kind') == 'Data' else ''}"
        out.append((float(c["size_bytes"]), label))
    return sorted(set(out))


def machine_section(meta: dict) -> dict[str, Any]:
    m = machine_mod.machine_record(meta)
    cpu = m.get("cpu") or {}
    env = machine_mod.environment(meta)
    nodes = {int(k): v for k, v in (m.get("nodes") or {}).items()} if isinstance(m.get("nodes"), dict) else {}
    cache_text = ", ".join(f"{label} {format_size(int(s))}" for s, label in caches(meta)) or "not reported"
    facts = [
        ("Host", meta.get("hostname") or m.get("hostname") or "—"),
        ("CPU", cpu.get("model") or "—"),
        ("Topology", f"{cpu.get('sockets', '?')} socket(s), {cpu.get('cores', '?')} cores, "
                     f"{cpu.get('threads', '?')} threads (SMT {'on' if cpu.get('smt_active') else 'off'})"
         if cpu else "—"),
        ("Caches", cache_text),
        ("Kernel", env.get("kernel") or (meta.get("versions") or {}).get("kernel") or "—"),
        ("Platform", " · ".join(x for x in [env.get("dmi_product"),
                                            f"VM ({env['hypervisor']})" if env.get("hypervisor")
                                            else "bare metal"] if x)),
        ("THP", f"enabled={env.get('thp_enabled') or '?'}, defrag={env.get('thp_defrag') or '?'}"),
        ("CPU governor", f"{env.get('governor') or 'not exposed'}"
                         + (f" · {num(env['cpu_mhz'])} MHz" if env.get("cpu_mhz") else "")),
        ("NUMA balancing", {0: "off", 1: "on"}.get(env.get("numa_balancing"), str(env.get("numa_balancing")))
         if env.get("numa_balancing") is not None else "—"),
    ]
    ecc_modes = sorted({e.get("mode") or "unknown" for e in m.get("edac") or []})
    edac = [{"name": e.get("name"), "mode": e.get("mode") or "unknown", "ce": e.get("ce_count"),
             "ue": e.get("ue_count")} for e in m.get("edac") or []]
    tiers = []
    for t in machine_mod.tiers(meta):
        node = nodes.get(t.get("node")) if t.get("node") is not None else None
        pages = ["4 KiB"]
        if node:
            for sz, pool in sorted((node.get("hugepages") or {}).items(), key=lambda kv: int(kv[0])):
                pages.append(f"{format_size(int(sz))} × {pool.get('total', 0)} reserved "
                             f"({pool.get('free', 0)} free)")
        if t.get("kind") == "hbm":
            gpu = next((g for g in m.get("gpus") or [] if g.get("index") == t.get("gpu")), {})
            ecc = {True: "on", False: "off"}.get(gpu.get("ecc_enabled"), "unknown")
            pages = ["GPU pages"]
        elif t.get("kind") == "ddr" and ecc_modes:
            ecc = ", ".join(ecc_modes) + " (EDAC)"
        elif t.get("kind") == "nvme":
            ecc, pages = "—", ["—"]
        else:
            ecc = "not exposed"
        hmat = ""
        for h in (node or {}).get("hmat") or []:
            if h.get("read_latency_ns") or h.get("read_bandwidth_MBps"):
                hmat = (f"{h.get('read_latency_ns') or '?'} ns, "
                        f"{num((h.get('read_bandwidth_MBps') or 0) / 1000)} GB/s read")
                break
        tiers.append({"name": t.get("name"), "kind": t.get("kind"),
                      "where": (f"node {t['node']}" if t.get("node") is not None else
                                f"GPU {t['gpu']}" if t.get("gpu") is not None else t.get("path") or "—"),
                      "capacity": size(t.get("capacity_bytes")), "free": size(t.get("free_bytes")),
                      "pages": pages, "ecc": ecc,
                      "memory_tier": node.get("memory_tier") if node and node.get("memory_tier") is not None
                      else "—", "hmat": hmat or "—",
                      "how": (f"declared {t['declared']}" if t.get("declared") else t.get("evidence") or "—")})
    node_rows = []
    ids = sorted(nodes)
    for i in ids:
        n = nodes[i]
        dist = n.get("distances") or {}
        node_rows.append({"id": i, "cpus": format_cpulist(n.get("cpus") or []) or "none",
                          "memory": size(n.get("mem_total_bytes")), "free": size(n.get("mem_free_bytes")),
                          "distances": [str(dist.get(str(j), dist.get(j, "—"))) for j in ids]})
    gpus = [{"index": g.get("index"), "name": g.get("name"), "memory": size(g.get("memory_bytes")),
             "ecc": {True: "on", False: "off"}.get(g.get("ecc_enabled"), "unknown"),
             "pcie": f"Gen{g['pcie_gen']} ×{g.get('pcie_width') or '?'}" if g.get("pcie_gen") else "—",
             "node": g.get("numa_node") if g.get("numa_node") is not None else "—",
             "driver": g.get("driver") or "—"} for g in m.get("gpus") or []]
    disks = [{"name": d.get("name"), "model": d.get("model") or "—", "size": size(d.get("size_bytes")),
              "kind": "NVMe" if d.get("is_nvme") else ("rotational" if d.get("rotational") else "other"),
              "node": d.get("numa_node") if d.get("numa_node") is not None else "—"}
             for d in m.get("block_devices") or []]
    cxl = [{"name": r.get("name"), "size": size(r.get("size_bytes")), "mode": r.get("mode") or "—",
            "ways": r.get("interleave_ways") or "—", "memdevs": ", ".join(r.get("memdevs") or []) or "—",
            "node": r.get("numa_node") if r.get("numa_node") is not None else "—"}
           for r in m.get("cxl_regions") or []]
    return {"facts": facts, "tiers": tiers, "nodes": node_rows, "node_ids": ids, "gpus": gpus,
            "disks": disks, "cxl": cxl, "edac": edac, "warnings": machine_mod.warnings(meta)}


# ------------------------------------------------------------------ tier summary

def _values(reps: pd.DataFrame, pts_row: pd.Series) -> np.ndarray:
    sel = (reps["case_id"] == pts_row["case_id"]) & (reps["metric"] == pts_row["metric"])
    for a in reps.attrs.get("axes", []):
        v = pts_row.get(a)
        sel &= reps[a].isna() if v is None or (isinstance(v, float) and math.isnan(v)) else reps[a] == v
    return reps.loc[sel, "value"].to_numpy(float)


def _pick(frame: pd.DataFrame) -> pd.Series | None:
    return None if frame.empty else frame.iloc[0]


#: Figures derived across metrics, after the families' headline columns.
DERIVED = [("loaded latency @80% of peak", "ns"), ("write penalty", "×")]


def tier_summary(pts: pd.DataFrame, reps: pd.DataFrame, meta: dict,
                 figs: list[Figure]) -> dict[str, Any]:
    """Per tier, one column per headline the run's families declared (the first
    figure of a column when a headline gives several, e.g. one per page size), then
    the loaded latency at 80% of the peak load and the write penalty — each with its
    interval, each only when the run has the benchmark that measures it."""
    columns = list(dict.fromkeys((f.column, f.unit) for f in figs))
    names = [t["name"] for t in machine_mod.tiers(meta)]
    if not pts.empty:
        names += [t for t in pts["target"].unique() if t not in names]
    kinds = {t["name"]: t.get("kind") for t in machine_mod.tiers(meta)}
    caps = {t["name"]: t.get("capacity_bytes") for t in machine_mod.tiers(meta)}
    rows = []
    for name in sorted(names, key=tier_order):
        tp = pts[pts["target"] == name] if not pts.empty else pts
        mine = {}
        for f in figs:
            if f.tier == name:
                mine.setdefault((f.column, f.unit), f)
        cells = [_figure_cell(mine.get(c)) for c in columns]
        cells += [_loaded_latency(tp), _write_penalty(tp, reps)]
        rows.append({"name": name, "kind": kinds.get(name) or (tp["tier_kind"].iloc[0] if len(tp) else "—"),
                     "capacity": size(caps.get(name)), "cells": cells})
    rows = [r for r in rows if any(r["cells"]) or r["kind"] in ("ddr", "cxl", "hbm")]
    cols = [{"title": t, "unit": u} for t, u in columns + DERIVED]
    # The page shows it turned: a row per figure, a column per tier. Figures grow with
    # the families a run has (a dozen in quick) and tiers stay few, so this way it fits
    # the page's width; a figure no tier has is left out rather than a row of dashes.
    figures = [{**c, "cells": [r["cells"][i] for r in rows]} for i, c in enumerate(cols)
               if any(r["cells"][i] for r in rows)]
    return {"columns": cols, "rows": rows, "figures": figures}


def _figure_cell(f: Figure | None) -> dict[str, Any] | None:
    if f is None:
        return None
    if f.count:
        return {"value": format_count(f.median), "ci": "", "note": f.label, "shared": f.held.mark(),
                "verdict": f.verdict}
    return {**cell(f.median, f.lo, f.hi, f.label), "shared": f.held.mark(), "verdict": f.verdict}


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series([np.nan] * len(frame), index=frame.index)


#: where on its curve a tier's summary cell reads the loaded latency: this share of the peak
LOADED_AT = 0.8


def _loaded_latency(tp: pd.DataFrame) -> dict | None:
    """The latency at 80% of one curve's own peak load, interpolated along that curve
    (as derive.loaded_summary): pooling curves (initiators, mixes, page sizes) would
    read one curve's point against another's peak. The curve: read load, temporal
    stores (MLC's defaults), then the nearest initiator (the lowest idle latency)."""
    fam = tp[tp["benchmark"] == "loaded_latency"]
    lat, bw = fam[fam["metric"] == "latency_ns"], fam[fam["metric"] == "bandwidth_GBps"]
    if lat.empty or bw.empty:
        return None
    pair = lat.merge(bw[["point", "median"]], on="point", suffixes=("", "_bw"))
    for col, want in (("mix", "read"), ("nt", False)):
        if col in pair.columns and (pair[col] == want).any():
            pair = pair[pair[col] == want]
    keys = [k for k in LOADED_KEYS if k in pair.columns and k != "benchmark"]
    pair = pair.assign(loaded=pair["load_threads"] > 0 if "load_threads" in pair.columns else pair["median_bw"] > 0)
    curves = [(g.loc[~g["loaded"], "median"].min(), name, g[g["loaded"]])
              for name, g in (pair.groupby(keys, dropna=False, sort=True) if keys else [((), pair)])]
    curves = [c for c in curves if len(c[2]) >= 2]
    if not curves:
        return None
    idle, name, curve = min(curves, key=lambda c: (math.isnan(c[0]), c[0]))
    peak, [median, lo, hi] = at_share_of_peak(curve["median_bw"], [curve[c] for c in ("median", "lo", "hi")],
                                              LOADED_AT)
    x = LOADED_AT * peak
    which = ", ".join(f"{k} {v}" for k, v in zip(keys, name if isinstance(name, tuple) else (name,))
                      if k not in ("target",) and pd.notna(v))
    return cell(median, lo, hi,
                f"{which}: at {num(x)} GB/s, {LOADED_AT:.0%} of its {num(peak)} GB/s peak, interpolated "
                f"between its points (their intervals too)")


def _write_penalty(tp: pd.DataFrame, reps: pd.DataFrame) -> dict | None:
    fam = tp[(tp["benchmark"] == "write_penalty") & (tp["metric"] == "bandwidth_GBps")]
    if fam.empty:
        return None
    for col in [c for c in fam.columns if fam[c].dtype == object or str(fam[c].dtype).startswith("str")]:
        vals = fam[col].astype(str).str.lower()
        if (vals == "read").any() and vals.str.contains("write").any():
            read = fam[vals == "read"].sort_values("median", ascending=False).iloc[0]
            alike = pd.Series(True, index=fam.index)         # a write of the read's threads and page
            for same in ("threads", "page"):
                if same in fam.columns and pd.notna(read.get(same)):
                    alike &= fam[same] == read[same]
            writes = fam[vals.str.contains("write") & alike]
            if writes.empty:
                return None
            exact = writes[writes[col].astype(str).str.lower() == "write"]
            write = (exact if len(exact) else writes).sort_values("median").iloc[0]
            r = ratio_ci(_values(reps, write), _values(reps, read), 0.95)
            return cell(r.ratio, r.lo, r.hi, f"read ÷ {write[col]}")
    return None


# ------------------------------------------------------------------ charts and tables

def _is_numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and s.dropna().size > 0


def requested_params(metas: Iterable[dict], benchmark: str, axes: Iterable[str] = ()) -> list[str] | None:
    """The parameters a benchmark's cases asked for (from run.json), plus the axes;
    None when the runs don't record them. Values found while measuring (the page
    size obtained, steps) are shown but never plotted as if they had been asked for."""
    names: dict[str, None] = {}
    seen = False
    for meta in metas:
        for c in meta.get("cases", []) or []:
            if c.get("benchmark") == benchmark and isinstance(c.get("params"), dict):
                seen = True
                names.update(dict.fromkeys(c["params"]))
    if not seen:
        return None
    names.update(dict.fromkeys(axes))
    return list(names)


def _params(frame: pd.DataFrame, allowed: Iterable[str] | None = None) -> list[str]:
    skip = set(NO_PARAM) | {"point", "n", "median", "lo", "hi", "coverage", "min", "max", "rcv",
                            "precision", "n_inner", "run_id", "case_id", "metric", "benchmark", "initiator",
                            "target", "tier_kind", "unit", "better", "huge_coverage", "phys_contiguity",
                            "steps"}
    cols = [c for c in frame.columns if c not in skip]
    if allowed is not None:
        allowed = set(allowed)
        cols = [c for c in cols if c in allowed]
    return cols


#: axes a case records only when on, so that the ordinary cases keep their ids (other
#: True-or-missing columns, such as gpu_bandwidth's torch_pinned, are not flags: absent
#: there means "not a torch case", not "off"). The training family's page is no flag:
#: its optimizer samples all say theirs, and a train case's probes, filled with 4 KiB,
#: would carry a page they never vary over into every label.
FLAG_AXES = ("dpu",)


def flags_off(fam: pd.DataFrame) -> pd.DataFrame:
    """Where some of a family's points have a flag axis on, the rest are off: said so,
    or two placements that differ only by it would share one label."""
    for c in FLAG_AXES:
        if c in fam.columns and 0 < fam[c].notna().sum() < len(fam):
            fam = fam.assign(**{c: fam[c].astype(object).where(fam[c].notna(), False)})
    return fam


def _varying(frame: pd.DataFrame, cols: Iterable[str]) -> list[str]:
    out = []
    for c in cols:
        if c in frame.columns:
            vals = frame[c].dropna()
            if vals.astype(str).nunique() > 1:
                out.append(c)
    return out


class ChartMaker:
    """Draws charts with stable ids and consistent colours across one page."""

    def __init__(self, prefix: str = "c", order: Iterable[str] = ()):
        self.prefix = prefix
        self.count = 0
        self.colors: dict[str, str] = {}
        for key in order:                 # tiers (or runs) in their natural order get the first colours
            self.color(str(key) + "|")

    def color(self, key: str) -> str:
        if key not in self.colors:
            self.colors[key] = PALETTE[len(self.colors) % len(PALETTE)]
        return self.colors[key]

    def svg(self, chart: Chart, wide: bool = False) -> str:
        self.count += 1
        if wide:
            return render(chart, f"{self.prefix}{self.count}", width=11.0, height=4.2)
        return render(chart, f"{self.prefix}{self.count}")


def relative_bars(maker: ChartMaker, title: str, xlabel: str,
                  bars: list[tuple[str, str, float | None, float, str]]) -> Chart:
    """Throughput relative to the best (1 = the best), a bar per (label, tier,
    relative, tokens/s, why none), coloured by tier as the page colours its tiers; a
    bar without a relative value is empty and says why."""
    labels = [b[0] for b in bars]
    values = [b[2] if b[2] is not None else 0.0 for b in bars]
    texts = [f"{rel * 100:.3g}% · {format_number(tokens)} tokens/s" if rel is not None else why
             for _, _, rel, tokens, why in bars]
    colors = "|".join(maker.color(f"{tier}|") for _, tier, *_ in bars)
    return Chart(title, xlabel, "", [Series("", labels, values, color=colors)], bars=True, bar_labels=texts)


def look(metas: Iterable[dict], benchmark: str) -> dict[str, Any]:
    """How a family is shown, as the first run that describes it recorded it (its
    title, description, x axis, facets, a metric pair); a family no run describes
    is shown by its name, with the axes a reader would choose."""
    for meta in metas:
        described = (meta.get("families") or {}).get(benchmark)
        if described and described.get("title"):
            return {"x": None, "facets": [], "pair": None, **described}
    return {"title": benchmark, "description": "Every point of this benchmark, by metric.",
            "x": None, "facets": [], "pair": None}


#: A paired family (loaded latency) that also records this metric gets its curve too.
TAIL_CURVE = "p99_ns"


def family_charts(fam: pd.DataFrame, show: dict[str, Any], meta_caches: list[tuple[float, str]],
                  maker: ChartMaker, color_by: str = "target", facet_by: Iterable[str] = (),
                  names: dict | None = None, allowed: Iterable[str] | None = None) -> list[dict[str, str]]:
    """Charts for one benchmark family's points (several runs when color_by='run'),
    as `show` (see look) says; `allowed`: the parameters the cases asked for (see
    requested_params)."""
    names = names or {}
    allowed = list(allowed) if allowed is not None else None
    out: list[dict[str, str]] = []
    metrics = list(dict.fromkeys(fam["metric"]))
    if show.get("pair") and set(show["pair"]) <= set(metrics):
        out += _paired_charts(fam, show, maker, color_by, facet_by, names, allowed)
        if TAIL_CURVE in metrics and show["pair"][1] != TAIL_CURVE:     # the tail's curve beside the mean's
            out += _paired_charts(fam, {**show, "pair": (show["pair"][0], TAIL_CURVE)}, maker,
                                  color_by, facet_by, names, allowed)
        metrics = []
    for metric in metrics:
        mp = fam[fam["metric"] == metric]
        unit = str(mp["unit"].iloc[0])
        params = _varying(mp, _params(mp, allowed))
        numeric = [c for c in params if _is_numeric(mp[c])]
        x = next((c for c in [show.get("x")] + X_PREFERENCE if c in numeric), numeric[0] if numeric else None)
        page = "page" if "page" in params else ("page_bytes" if "page_bytes" in params else None)
        if x is None:
            if 0 < len(mp) <= 40:
                out.append(_bar_chart(mp, show["title"], metric, unit, params, maker, color_by, names))
            continue
        rest = [c for c in params if c != x]
        facets = list(facet_by) + list(dict.fromkeys(c for c in [*show.get("facets", []), *FACET_PREFERENCE]
                                                     if c in rest))
        series_params = [c for c in rest if c not in facets]
        if mp["initiator"].nunique() > 1 and color_by == "target":
            series_params = ["initiator"] + series_params
        # too many lines in one chart: move parameters into facets
        while series_params:
            n_series = mp.groupby([color_by] + series_params, dropna=False).ngroups
            if n_series <= 8:
                break
            movable = [c for c in series_params if c not in ("initiator", page)] or series_params
            worst = max(movable, key=lambda c: mp[c].astype(str).nunique())
            series_params.remove(worst)
            facets.append(worst)
        facets = [f for f in facets if f in mp.columns]
        groups = sorted(mp.groupby(facets, dropna=False, sort=True), key=lambda g: _facet_rank(g[0])) \
            if facets else [((), mp)]
        n = 0
        for fkey, fp in groups:
            if n >= MAX_CHARTS:
                break
            fkey = fkey if isinstance(fkey, tuple) else (fkey,)
            facet_text = " · ".join(f"{param_header(f)}: {param_value(f, v)}" if f not in ("target_slot",)
                                    else str(v) for f, v in zip(facets, fkey))
            series = []
            pages = sorted(fp[page].dropna().astype(str).unique(), key=_page_order) \
                if page in series_params else []
            groups_s = list(fp.groupby([color_by] + series_params, dropna=False, sort=True))
            rank = {k.split("|")[0]: i for i, k in enumerate(maker.colors)}
            groups_s.sort(key=lambda g: rank.get(str(g[0][0] if isinstance(g[0], tuple) else g[0]), 1 << 20))
            for skey, sp in groups_s:
                skey = skey if isinstance(skey, tuple) else (skey,)
                sp = sp[sp[x].notna()].sort_values(x)
                if sp.empty:
                    continue
                who = names.get(skey[0], str(skey[0]))
                extra = [(p, v) for p, v in zip(series_params, skey[1:])]
                label = " · ".join([who] + [f"{param_header(p)} {param_value(p, v)}" if p != "initiator"
                                            else str(v) for p, v in extra
                                            if not (isinstance(v, float) and math.isnan(v))])
                ckey = str(skey[0]) + "|" + "|".join(str(v) for p, v in extra if p != page)
                pv = str(dict(extra).get(page)) if page else None
                style = STYLES[pages.index(pv) % len(STYLES)] if pages and pv in pages else "-"
                series.append(Series(label, sp[x].astype(float).tolist(), sp["median"].tolist(),
                                     sp["lo"].tolist(), sp["hi"].tolist(), maker.color(ckey), style,
                                     MARKERS[len(series) % len(MARKERS)]))
            if not series:
                continue
            is_bytes = x.endswith("_bytes")
            xs = [v for s in series for v in s.x]
            ys = [v for s in series for v in s.y if v > 0]
            several = len(set(fam["metric"])) > 1
            chart = Chart(title=" · ".join(t for t in [show["title"],
                                                        metric_title(metric) if several else "",
                                                        facet_text] if t),
                          xlabel=param_header(x) + (" (log₂)" if is_bytes or _wide(xs) else ""),
                          ylabel=f"{metric_title(metric)} ({unit})", series=series,
                          x_bytes=is_bytes, logx=not is_bytes and _wide(xs) and min(xs) > 0,
                          logy=metric in ("latency_ns", "cycles", "seconds") and bool(ys)
                          and max(ys) / min(ys) > 30,
                          y_from_zero=unit in ("GB/s", "IO/s", "tokens/s", "params/s"),
                          marks=meta_caches if x == "working_set_bytes" else [])
            out.append({"chart": chart, "title": chart.title})
            n += 1
    wide = len(out) == 1          # a family's only chart gets the page's full width
    return [{"svg": maker.svg(c["chart"], wide), "title": c["title"], "wide": wide} for c in out]


def _facet_rank(key) -> tuple:
    """Facets in a reader's order: tiers by kind (hbm, ddr, cxl, nvme), then by value."""
    key = key if isinstance(key, tuple) else (key,)
    return tuple(tier_order(str(v)) for v in key)


def _page_order(v: str) -> tuple:
    """4k before thp before 2m before 1g; numbers by size."""
    order = {"4k": 0, "thp": 1, "2m": 2, "1g": 3}
    try:
        return (0, float(v))
    except ValueError:
        return (1, order.get(v.lower(), 9), v)


def _wide(xs: list[float]) -> bool:
    xs = [v for v in xs if v and v > 0]
    return bool(xs) and max(xs) / min(xs) >= 16


def metric_title(metric: str) -> str:
    return {"latency_ns": "latency", "bandwidth_GBps": "bandwidth", "iops": "IOPS",
            "tokens_per_s": "tokens/s", "step_time_s": "step time", "params_per_s": "params/s",
            "tflops": "TFLOP/s", "mfu": "MFU"}.get(metric, _percentile_title(metric))


def _percentile_title(metric: str) -> str:
    """p99_9_ns -> "p99.9 of k-load blocks", floor_p99_ns -> "floor p99 of k-load
    blocks": the tail metrics are percentiles of blocks' means (benchmarks.tails), and
    say so; any other metric its name with spaces."""
    m = re.fullmatch(r"(floor_)?p(\d+)(?:_(\d+))?_ns", metric)
    if not m:
        return metric.replace("_", " ")
    pct = m.group(2) + (f".{m.group(3)}" if m.group(3) else "")
    return ("floor " if m.group(1) else "") + "p" + pct + " of k-load blocks"


def _paired_charts(fam, show, maker, color_by, facet_by, names, allowed=None) -> list[dict[str, str]]:
    """One metric against another measured at the same points (latency against the
    bandwidth achieved)."""
    x_metric, y_metric = show["pair"]
    lat = fam[fam["metric"] == y_metric]
    bw = fam[fam["metric"] == x_metric]
    keys = ["point"] + (["run"] if "run" in fam.columns else [])
    pair = lat.merge(bw[keys + ["median"]], on=keys, suffixes=("", "_bw"))
    if pair.empty:
        return []
    params = [c for c in _varying(pair, _params(pair, allowed)) if not _is_numeric(pair[c])]
    facets = [f for f in facet_by if f in pair.columns]
    out = []
    groups = sorted(pair.groupby(facets, dropna=False, sort=True), key=lambda g: _facet_rank(g[0])) \
        if facets else [((), pair)]
    for fkey, fp in list(groups)[:MAX_CHARTS]:
        fkey = fkey if isinstance(fkey, tuple) else (fkey,)
        series = []
        for skey, sp in fp.groupby([color_by] + params, dropna=False, sort=True):
            skey = skey if isinstance(skey, tuple) else (skey,)
            sp = sp.sort_values("median_bw")
            label = " · ".join([names.get(skey[0], str(skey[0]))] +
                               [f"{param_header(p)} {v}" for p, v in zip(params, skey[1:])])
            series.append(Series(label, sp["median_bw"].tolist(), sp["median"].tolist(),
                                 sp["lo"].tolist(), sp["hi"].tolist(),
                                 maker.color(str(skey[0]) + "|" + "|".join(map(str, skey[1:]))),
                                 "-", MARKERS[len(series) % len(MARKERS)]))
        title = (f"{show['title']} · {metric_title(y_metric)} vs {metric_title(x_metric)}"
                 + (" · " + " · ".join(map(str, fkey)) if fkey else ""))
        x_unit, y_unit = (str(fam.loc[fam["metric"] == m, "unit"].iloc[0]) for m in (x_metric, y_metric))
        out.append({"chart": Chart(title, f"{metric_title(x_metric)} achieved ({x_unit})",
                                   f"{metric_title(y_metric)} ({y_unit})", series, y_from_zero=True),
                    "title": title})
    return out


def _bar_chart(mp, family_title, metric, unit, params, maker, color_by, names) -> dict[str, str]:
    mp = mp.sort_values([color_by] + params)
    labels = []
    colors = []
    for _, r in mp.iterrows():
        who = names.get(r[color_by], str(r[color_by]))
        labels.append(" · ".join([who] + [f"{param_header(p)} {param_value(p, r[p])}" for p in params]))
        colors.append(maker.color(str(r[color_by]) + "|"))
    s = Series("", labels, mp["median"].tolist(), mp["lo"].tolist(), mp["hi"].tolist(), "|".join(colors))
    title = f"{family_title} · {metric_title(metric)}"
    return {"chart": Chart(title, f"{metric_title(metric)} ({unit})", "", [s], bars=True), "title": title}


def points_tables(fam: pd.DataFrame, allowed: Iterable[str] | None = None,
                  held: dict[tuple[str, str], Held] | None = None,
                  failed: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One table per metric: tier, the parameters that vary (and the page size
    found, when it was not asked for), n, median with its interval, the precision
    that interval gives (its half-width relative to the median), spread — and, when a
    repetition of a point held its CPU less than 90% of its time (analysis.held), the
    lowest share held, so a figure from a shared CPU is not read as clean. The points
    of a case that failed part-way (`failed`: case ids) say so by their n: its
    repetitions are kept, but they are not its figure."""
    failed = set(failed)
    tables = []
    fam = fam.assign(precision=precision(fam))
    for metric, mp in fam.groupby("metric", sort=False):
        unit = str(mp["unit"].iloc[0])
        params = _varying(mp, _params(mp, allowed))
        if allowed is not None and "page_bytes" in mp.columns and "page_bytes" not in params \
                and mp["page_bytes"].notna().any():
            params.append("page_bytes")
        sort_cols = ["target"] + params
        mp = mp.sort_values(sort_cols, kind="stable")
        show_init = mp["initiator"].nunique() > 1
        headers = (["initiator"] if show_init else []) + ["tier"] + [param_header(p) for p in params] + \
            ["n", f"median ({unit})", "95% CI", "precision", "spread"]
        numeric_cols = set(range(len(headers) - 5, len(headers)))
        numeric_cols |= {i + (2 if show_init else 1) for i, p in enumerate(params) if _is_numeric(mp[p])}
        rows = []
        for _, r in mp.head(MAX_TABLE_ROWS).iterrows():
            rows.append(([r["initiator"]] if show_init else []) + [r["target"]] +
                        [param_value(p, r[p]) for p in params] +
                        [str(int(r["n"])) + (" (case failed)" if r.get("case_id") in failed else ""),
                         num(r["median"]), f"{num(r['lo'])}–{num(r['hi'])}",
                         f"±{r['precision']:.1%}" if pd.notna(r["precision"]) else "—",
                         f"±{r['rcv'] * 100:.1f}%" if pd.notna(r["rcv"]) else "—"])
        _held_column(headers, numeric_cols, rows, mp.head(MAX_TABLE_ROWS), metric, held or {})
        tables.append({"metric": metric, "title": f"{metric_title(metric)} ({unit}, "
                                                  f"{mp['better'].iloc[0]} is better)",
                       "headers": headers, "numeric": sorted(numeric_cols), "rows": rows,
                       "more": max(0, len(mp) - MAX_TABLE_ROWS)})
    return tables


def _held_column(headers: list[str], numeric: set[int], rows: list[list[str]], mp: pd.DataFrame,
                 metric: str, held: dict[tuple[str, str], Held]) -> None:
    """A "CPU held" column, only in a table with a point whose CPU was shared."""
    mine = [held.get((str(p), metric), Held()) for p in mp["point"]] if "point" in mp.columns else []
    if not any(h.shared for h in mine):
        return
    headers.append("CPU held (least)")
    numeric.add(len(headers) - 1)
    for row, h in zip(rows, mine):
        row.append(h.cell())


def family_order(benchmarks: Iterable[str], metas: Iterable[dict] = ()) -> list[str]:
    """The families measured, in the order the runs planned them; others alphabetically."""
    b = list(dict.fromkeys(benchmarks))
    planned = list(dict.fromkeys(f for meta in metas for f in meta.get("families") or {}))
    return [f for f in planned if f in b] + sorted(x for x in b if x not in planned)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


# ------------------------------------------------------------------ not measured, provenance, data

def not_measured(meta: dict) -> list[dict[str, str]]:
    rows = []
    for c in meta.get("cases", []) or []:
        if c.get("status") in (None, "ok"):
            continue
        rows.append({"status": c.get("status"), "benchmark": c.get("benchmark") or "—",
                     "target": c.get("target") or "—", "initiator": c.get("initiator") or "—",
                     "params": params_text(c.get("params") or {}), "reason": c.get("reason") or "no reason given"})
    return sorted(rows, key=lambda r: (r["status"] != "failed", r["benchmark"], r["target"]))


def warned(meta: dict) -> list[dict[str, str]]:
    """The measured cases' warnings, one row each with its case: the figure stands,
    and the reader sees beside it what may have moved it."""
    cases = {c.get("case_id"): c for c in meta.get("cases", []) or []}
    return [{"benchmark": cases[cid].get("benchmark") or "—", "target": cases[cid].get("target") or "—",
             "initiator": cases[cid].get("initiator") or "—", "params": params_text(cases[cid].get("params") or {}),
             "warning": text} for cid, text in case_warnings(meta)]


def provenance(meta: dict, n_samples: int) -> dict[str, Any]:
    cases = meta.get("cases", []) or []
    counts = {s: sum(1 for c in cases if c.get("status") == s) for s in ("ok", "skipped", "failed")}
    cmd = meta.get("command")
    suite = meta.get("suite")
    return {"command": " ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd or "—"),
            "versions": [(k, str(v)) for k, v in (meta.get("versions") or {}).items()],
            "started": meta.get("started") or "—", "ended": meta.get("ended") or "—",
            "duration": _duration(meta.get("started"), meta.get("ended")),
            "status": meta.get("status", "unknown"), "run_id": meta.get("run_id"),
            "suite": suite.get("name") if isinstance(suite, dict) else (suite or "—"),
            "cases": counts, "samples": n_samples, "warnings": meta.get("warnings") or [],
            "interrupted": bool(meta.get("interrupted"))}


def data_link(samples: pd.DataFrame, reps: pd.DataFrame, pts: pd.DataFrame, stem: str,
              first: str = "every sample") -> dict[str, Any]:
    """The run's data as a data: URI CSV: every sample when it fits the budget, else
    one row per repetition, else one per point — and the page says which."""
    n = len(samples) if samples is not None else 0
    choices = [("samples", samples, first),
               ("repetitions", reps, f"one row per repetition (the median of its inner samples): "
                                     f"all {n:,} samples would not fit in the page"),
               ("points", pts.drop(columns=[c for c in ("params",) if c in pts.columns]),
                f"one row per point (median and interval): the {n:,} samples would not fit in the page")]
    for what, frame, desc in choices:
        if frame is None or frame.empty and what != "samples":
            continue
        head = frame.head(2000).to_csv(index=False)
        estimate = len(head) * max(len(frame), 1) / max(min(len(frame), 2000), 1)
        if estimate > CSV_BUDGET * 1.3 and what != "points":
            continue
        text = frame.to_csv(index=False)         # every digit: the shortest text that reads back exact
        if len(text) > CSV_BUDGET and what != "points":
            continue
        uri = "data:text/csv;charset=utf-8," + quote(text, safe=",.:;=/_-+ ()[]|'@*!~").replace(" ", "%20")
        return {"href": uri, "filename": f"{stem}-{what}.csv", "rows": len(frame), "what": desc,
                "size": format_size(len(text)), "complete": what == "samples"}
    return {"href": "data:text/csv;charset=utf-8,", "filename": f"{stem}.csv", "rows": 0,
            "what": "no data", "size": "0B", "complete": True}
