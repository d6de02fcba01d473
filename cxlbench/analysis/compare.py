"""Runs side by side: cases matched across machines, ratios with intervals, verdicts.

Cases are matched on benchmark, parameters, metric and *slots*: a tier's kind and
its ordinal among the run's tiers of that kind (ddr0 on one machine is ddr[0],
so is ddr0 on another; the first CXL node is cxl[0] whether it is node 2 or 3),
and the same for initiators (cpu:node0 → cpu[0]). The first run is the baseline
of every ratio. What cannot be matched is listed, never dropped silently.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from cxlbench.analysis import drift, machine as machine_mod
from cxlbench.analysis.stats import (CONFIDENCE, INCONCLUSIVE, VERDICTS, discount_instability,
                                     discount_interference, frames_can_move, judge, note_contiguity, ratio_ci,
                                     repetitions_needed, skew_note)
from cxlbench.analysis.reduction import axis_columns, point_id, points, repetitions
from cxlbench.analysis.thresholds import Thresholds, assume_vm_noise, check_names, load_thresholds
from cxlbench.results.store import ResultsError, Run, load_run, measured_whole
from cxlbench.units import format_number, format_size, natural_key

#: Parameters left out of matching: places on one machine (a scratch directory) and
#: how much work a case did (sized from each machine's caches), not what was measured.
UNMATCHED_PARAMS = frozenset({"path", "dir", "directory", "file", "filename", "device",
                              "array_bytes", "iterations", "min_sample_s"})

RunLike = Run | str | Path


def as_run(run: RunLike) -> Run:
    return run if isinstance(run, Run) else load_run(run)


@dataclass
class RunInfo:
    index: int
    name: str                  # label or run id, unique within a comparison
    run_id: str
    label: str | None
    machine_name: str | None
    hostname: str | None
    status: str
    path: str
    started: str | None
    ended: str | None
    profile: machine_mod.Profile

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "run_id": self.run_id, "label": self.label,
                "machine": self.machine_name, "hostname": self.hostname, "status": self.status,
                "path": self.path, "started": self.started, "ended": self.ended,
                "identity": self.profile.identity, "context": self.profile.context}


def run_info(run: Run, index: int = 0) -> RunInfo:
    meta = run.meta
    return RunInfo(index, str(meta.get("label") or meta.get("run_id")), str(meta.get("run_id")),
                   meta.get("label"), meta.get("machine_name"), meta.get("hostname"),
                   str(meta.get("status", "unknown")), str(run.path), meta.get("started"),
                   meta.get("ended"), machine_mod.profile(meta))


def slots(meta: dict[str, Any]) -> dict[str, str]:
    """Tier and initiator names → kind[ordinal] (ddr0 → ddr[0], cxl3 → cxl[0], cpu:node1 → cpu[1])."""
    out: dict[str, str] = {}
    kinds: dict[str, list[str]] = {}
    for t in machine_mod.tiers(meta):
        kinds.setdefault(str(t.get("kind") or re.sub(r"\d+$", "", t["name"])), []).append(t["name"])
    for c in meta.get("cases", []) or []:
        tgt, kind = c.get("target"), c.get("tier_kind")
        if tgt and not any(tgt in v for v in kinds.values()):
            kinds.setdefault(str(kind or re.sub(r"\d+$", "", tgt)), []).append(tgt)
    for kind, names in kinds.items():
        for i, name in enumerate(sorted(set(names), key=natural_key)):
            out[name] = f"{kind}[{i}]"
    inits: dict[str, set[str]] = {}
    for c in meta.get("cases", []) or []:
        ini = c.get("initiator")
        if ini:
            inits.setdefault(ini.split(":", 1)[0], set()).add(ini)
    for kind, names in inits.items():
        for i, name in enumerate(sorted(names, key=natural_key)):
            out.setdefault(name, f"{kind}[{i}]")
    return out


def _fmt_value(k: str, v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if k.endswith("_bytes") and isinstance(v, int):
        return format_size(v)
    return str(v)


def params_text(params: dict[str, Any], keys: Iterable[str] | None = None) -> str:
    """Short, readable parameters: ws=1GiB page=4KiB pattern=random."""
    short = {"working_set_bytes": "ws", "page_bytes": "page"}
    items = []
    for k in (keys if keys is not None else sorted(params)):
        v = params.get(k)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        name = short.get(k, k[:-6] if k.endswith("_bytes") else k)
        items.append(f"{name}={_fmt_value(k, v)}")
    return " ".join(items)


def _case_params(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["case_id"]: dict(c.get("params") or {}) for c in meta.get("cases", []) or []
            if c.get("case_id")}


def parse_case_params(case_id: str) -> dict[str, Any]:
    parts = case_id.split("/", 3)
    if len(parts) < 4 or not parts[3]:
        return {}
    out = {}
    for item in parts[3].split(","):
        k, _, v = item.partition("=")
        out[k] = v
    return out


def _canon(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def annotate_points(run: Run, pts: pd.DataFrame, index: int) -> pd.DataFrame:
    """Add run index, slots, the case's asked-for parameters and the match key."""
    meta = run.meta
    slot = slots(meta)
    asked = _case_params(meta)
    axes = pts.attrs.get("axes", [])
    pts = pts.copy()
    pts["run"] = index
    pts["target_slot"] = [slot.get(t, str(t)) for t in pts["target"]]
    pts["initiator_slot"] = [slot.get(i, str(i)) for i in pts["initiator"]]
    keys, texts = [], []
    axis_records = pts[axes].to_dict("records") if axes else [{}] * len(pts)
    for cid, bench, ini, tgt, metric, ax in zip(pts["case_id"], pts["benchmark"], pts["initiator_slot"],
                                                  pts["target_slot"], pts["metric"], axis_records):
        params = asked.get(cid)
        if params is None:
            params = parse_case_params(cid)
        params = {k: v for k, v in params.items() if k not in UNMATCHED_PARAMS}
        ax = {k: v for k, v in ax.items() if not (v is None or (isinstance(v, float) and math.isnan(v)))}
        atext = ",".join(f"{k}={_canon(ax[k])}" for k in sorted(ax))
        keys.append(f"{_case_key(bench, ini, tgt, params)}|{atext}/{metric}")
        texts.append({**params, **ax})
    pts["key"] = keys
    pts["params"] = texts
    return pts


def _case_key(benchmark: str, initiator_slot: str, target_slot: str, params: dict[str, Any]) -> str:
    """A case as runs of other machines name it: its tiers by slot (cxl2 here is cxl3
    there), its asked parameters without paths; a point's key begins with it."""
    ptext = ",".join(f"{k}={_canon(params[k])}" for k in sorted(params) if k not in UNMATCHED_PARAMS)
    return f"{benchmark}/{initiator_slot}/{target_slot}/{ptext}"


def cases_by_key(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each planned case's record under its key (what precedes "|" in its points' keys):
    how one run's case is found in another run, whose tiers may be named otherwise."""
    slot = slots(meta)
    return {_case_key(str(c.get("benchmark")), slot.get(c.get("initiator"), str(c.get("initiator"))),
                      slot.get(c.get("target"), str(c.get("target"))), dict(c.get("params") or {})): c
            for c in meta.get("cases", []) or [] if c.get("case_id")}      # params as annotate_points reads them


def _split_values(run: int, ids: list[str], metrics, vals) -> dict[tuple, Any]:
    """{(run, point, metric): per-repetition values} without a slow groupby loop."""
    if len(ids) == 0:
        return {}
    keys = pd.Series(ids, dtype=object) + "\x1f" + pd.Series(metrics, dtype=object).astype(str)
    codes, uniques = pd.factorize(keys, sort=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    out = {}
    for code_idx, chunk in zip(codes[order][np.concatenate([[0], bounds])], np.split(order, bounds)):
        point, _, metric = uniques[code_idx].partition("\x1f")
        out[(run, point, metric)] = vals[chunk]
    return out


def _per_point(run: int, ids: list[str], reps: pd.DataFrame, column: str, how: str) -> dict[tuple, float]:
    """{(run, point): `how` ("min", "median") of `column` over its repetitions}, where
    recorded. A repetition counts once, however many metrics it gave the point."""
    if column not in reps.columns or len(ids) == 0:
        return {}
    frame = pd.DataFrame({"point": ids, "repetition": reps["repetition"].to_numpy(),
                          "value": pd.to_numeric(reps[column], errors="coerce").to_numpy(float)})
    found = frame.drop_duplicates(["point", "repetition"]).dropna(subset=["value"])
    return {(run, point): float(v) for point, v in found.groupby("point")["value"].agg(how).items()}


@dataclass
class Comparison:
    runs: list[RunInfo]
    differences: list[machine_mod.Difference]
    rows: pd.DataFrame             # one row per matched point per run after the first
    unmatched: pd.DataFrame        # run, point, benchmark, metric, target, why
    points: pd.DataFrame           # every run's points, with run index and key
    not_measured: pd.DataFrame     # skipped / failed cases of every run
    thresholds: Thresholds
    confidence: float
    labels: dict[str, str] = field(default_factory=dict)   # key → readable label
    normalized: str = ""           # what was judged relative to the drift sentinels, if anything
    sentinels: dict[int, list[tuple[str, float]]] = field(default_factory=dict)  # run → (probe, ÷ baseline)

    def counts(self, run: int | None = None) -> dict[str, int]:
        rows = self.rows if run is None else self.rows[self.rows["run"] == run]
        return {v: int((rows["verdict"] == v).sum()) for v in VERDICTS}

    @property
    def identity_differences(self) -> list[machine_mod.Difference]:
        return [d for d in self.differences if d.kind == "identity"]

    @property
    def context_differences(self) -> list[machine_mod.Difference]:
        return [d for d in self.differences if d.kind == "context"]


ROW_COLUMNS = ["key", "run", "benchmark", "metric", "unit", "better", "label", "target_slot",
               "target_base", "target", "point_base", "point", "case_id", "base_n", "base_median",
               "base_lo", "base_hi", "n", "median", "lo_value", "hi_value", "ratio", "lo", "hi",
               "verdict", "mde", "threshold", "se_log", "df", "note", "needed"]


def _labels(pts: pd.DataFrame) -> dict[str, str]:
    """Readable label per key: target slot's name in run 0 + the parameters that vary."""
    out: dict[str, str] = {}
    for bench, grp in pts.groupby("benchmark", sort=False):
        keys_varying = set()
        params = list(grp["params"])
        allk = sorted({k for p in params for k in p})
        for k in allk:
            vals = {_canon(p.get(k)) for p in params}
            if len(vals) > 1:
                keys_varying.add(k)
        order = [k for k in ("working_set_bytes", "page_bytes", "kernel", "threads", "pattern")
                 if k in keys_varying] + sorted(keys_varying - {"working_set_bytes", "page_bytes",
                                                                "kernel", "threads", "pattern"})
        for key, tgt, ini, p in zip(grp["key"], grp["target"], grp["initiator"], grp["params"]):
            if key in out:
                continue
            where = f"{tgt}" if str(ini).endswith(f"node{_node_of(tgt)}") or ini == "cpu:node0" \
                else f"{ini}→{tgt}"
            out[key] = (where + " " + params_text(p, order)).strip()
    return out


def _node_of(target: str) -> str:
    m = re.search(r"(\d+)$", str(target))
    return m.group(1) if m else ""


def compare(runs: Sequence[RunLike], threshold: float | str | None = None,
            thresholds_file: str | Path | None = None, thresholds: Thresholds | None = None,
            confidence: float = CONFIDENCE, normalize: str | None = None) -> Comparison:
    """Compare runs: the first is the baseline of every ratio.

    threshold: the "same" band (default 5%); thresholds_file: a TOML file with
    per-benchmark thresholds (see analysis.thresholds); normalize: "sentinel" judges
    each case relative to its drift sentinel at its time (analysis.drift; every run
    needs sentinels), "dram_chase,triad" only the cases those probes stand for. The sentinels' own rows are never compared as cases. Raises
    ResultsError for a run that cannot be read or normalised.
    """
    loaded = [as_run(r) for r in runs]
    if not loaded:
        raise ValueError("compare needs at least one run")
    infos = [run_info(r, i) for i, r in enumerate(loaded)]
    th = assume_vm_noise(thresholds or load_thresholds(thresholds_file, threshold),
                         [h for i in infos if (h := i.profile.context.get("hypervisor"))])
    seen: dict[str, int] = {}
    for info in infos:                        # unique display names
        if info.name in seen:
            seen[info.name] += 1
            info.name = f"{info.name} ({seen[info.name]})"
        else:
            seen[info.name] = 1

    try:
        probes = drift.probes_asked(normalize) if normalize else None
    except ValueError as e:
        raise ResultsError(str(e)) from None
    all_pts, values, held, contiguity, refs, used = [], {}, {}, {}, None, (0, 0)
    present: dict[str, set[str]] = {}             # benchmark -> metrics, for the thresholds' names
    for i, run in enumerate(loaded):
        whole = measured_whole(run.samples, run.meta)         # a case that failed part-way has no figure
        samples = drift.cases_only(whole, run.meta)
        if normalize:
            if drift.trace(run.samples, run.meta).empty:
                raise ResultsError(f"{infos[i].name} has no drift sentinels to normalise by "
                                   f"(made before them, or with sentinels = false)")
            refs = refs or drift.references(run.samples, run.meta)     # the baseline's medians
            samples = drift.normalize(whole, run.meta, refs, probes)
            used = max(used, (int(samples["sentinel"].notna().sum()), len(samples)))
            samples = samples.drop(columns="sentinel")
        reps = repetitions(samples)
        pts = annotate_points(run, points(reps), i)
        all_pts.append(pts)
        for bench, grp in reps.groupby("benchmark"):
            present.setdefault(str(bench), set()).update(map(str, grp["metric"].unique()))
        axes = axis_columns(reps)
        ids = ([point_id(c, a) for c, a in zip(reps["case_id"], reps[axes].to_dict("records"))]
               if axes else list(reps["case_id"]))
        values.update(_split_values(i, ids, reps["metric"].to_numpy(), reps["value"].to_numpy(float)))
        held.update(_per_point(i, ids, reps, "cpu_held", "min"))
        contiguity.update(_per_point(i, ids, reps, "phys_contiguity", "median"))
    check_names(th, present)
    pts = pd.concat(all_pts, ignore_index=True) if all_pts else pd.DataFrame()
    pts.attrs["axes"] = sorted({a for p in all_pts for a in p.attrs.get("axes", [])})

    rows, unmatched = [], []
    by_run = {i: p.drop_duplicates("key") for i, p in enumerate(all_pts)}
    dup = [(i, p[p.duplicated("key", keep="first")]) for i, p in enumerate(all_pts)]
    for i, d in dup:
        for _, r in d.iterrows():
            unmatched.append({"run": i, "point": r["point"], "benchmark": r["benchmark"],
                              "metric": r["metric"], "target": r["target"], "key": r["key"],
                              "why": "another case of this run has the same benchmark, parameters and tier slot"})
    base = by_run[0]
    base_names = infos[0].name
    for i in range(1, len(loaded)):
        cur = by_run[i]
        for side, a, b, name_a, name_b in (("base", base, cur, base_names, infos[i].name),
                                           ("cur", cur, base, infos[i].name, base_names)):
            only = a[~a["key"].isin(b["key"])]
            for r in only[["point", "benchmark", "metric", "target", "key"]].to_dict("records"):
                unmatched.append({"run": i, **r, "why": f"in {name_a}, not in {name_b}"})
        cols = ["key", "point", "benchmark", "metric", "unit", "better", "target", "target_slot",
                "case_id", "n", "median", "lo", "hi"]
        both = base[cols].merge(cur[cols], on="key", suffixes=("_b", "_c"), sort=False)
        for r in both.to_dict("records"):
            bv = values[(0, r["point_b"], r["metric_b"])]
            cv = values[(i, r["point_c"], r["metric_c"])]
            bench, metric = str(r["benchmark_b"]), str(r["metric_b"])
            thr = th.for_case(bench, metric)
            better = str(r["better_b"]) if str(r["better_b"]) in ("lower", "higher") else "lower"
            rat = ratio_ci(bv, cv, confidence, th.noise_for(bench))
            ch = discount_instability(judge(rat, better, thr), bv, cv)
            ch = discount_interference(ch, held.get((0, r["point_b"]), 1.0), held.get((i, r["point_c"]), 1.0))
            if frames_can_move(metric):
                ch = note_contiguity(ch, contiguity.get((0, r["point_b"])), contiguity.get((i, r["point_c"])))
            note = ch.note
            if str(r["better_c"]) != better:
                ch, note = judge(ratio_ci([], []), better, thr), "the runs disagree on the direction"
            elif str(r["unit_c"]) != str(r["unit_b"]):      # µs against ns read as -99.9%, "faster"
                ch = judge(ratio_ci([], []), better, thr)
                note = f"the runs record it in different units ({r['unit_b']}, {r['unit_c']}): not compared"
            needed = repetitions_needed(bv, cv, thr, confidence, th.noise_for(bench)) \
                if ch.verdict == INCONCLUSIVE and not note else math.nan
            note = "; ".join(n for n in (note, skew_note(ch)) if n)
            rows.append({"key": r["key"], "run": i, "benchmark": bench, "metric": metric,
                         "unit": r["unit_b"], "better": better, "target_slot": r["target_slot_b"],
                         "target_base": r["target_b"], "target": r["target_c"], "point_base": r["point_b"],
                         "point": r["point_c"], "case_id": r["case_id_c"], "base_n": int(r["n_b"]),
                         "base_median": r["median_b"], "base_lo": r["lo_b"], "base_hi": r["hi_b"],
                         "n": int(r["n_c"]), "median": r["median_c"], "lo_value": r["lo_c"],
                         "hi_value": r["hi_c"], "ratio": ch.ratio, "lo": ch.lo, "hi": ch.hi,
                         "verdict": ch.verdict, "mde": ch.mde, "threshold": thr, "se_log": rat.se_log,
                         "df": rat.df, "note": note, "needed": needed})
    labels = _labels(pts) if not pts.empty else {}
    frame = pd.DataFrame(rows, columns=[c for c in ROW_COLUMNS if c != "label"])
    frame.insert(6, "label", [labels.get(k, k) for k in frame["key"]])
    um = pd.DataFrame(unmatched, columns=["run", "point", "benchmark", "metric", "target", "key", "why"])
    nm = []
    for i, run in enumerate(loaded):
        for c in run.meta.get("cases", []) or []:
            if c.get("status") not in (None, "ok"):
                nm.append({"run": i, "case_id": c.get("case_id"), "benchmark": c.get("benchmark"),
                           "target": c.get("target"), "status": c.get("status"),
                           "reason": c.get("reason") or ""})
    not_measured = pd.DataFrame(nm, columns=["run", "case_id", "benchmark", "target", "status", "reason"])
    moved = {i: drift.between(loaded[0].samples, loaded[0].meta, r.samples, r.meta)
             for i, r in enumerate(loaded) if i}
    how = (f"relative to the drift sentinels ({'every probe' if probes is None else ', '.join(sorted(probes))}): "
           f"each value x the baseline's sentinel median / the sentinel at its time "
           f"({used[0]} of {used[1]} samples)") if normalize else ""
    return Comparison(infos, machine_mod.differences([x.profile for x in infos]), frame, um, pts,
                      not_measured, th, confidence, labels, how, {i: m for i, m in moved.items() if m})


# ------------------------------------------------------------------ terminal text

fmt_num = format_number


def fmt_needed(n: float) -> str:
    """How many repetitions per run would decide an inconclusive case, or 'ab'."""
    if n is None or not math.isfinite(n):
        return "ab"
    return f"~{n:.0f} reps"


def fmt_change(ratio: float) -> str:
    if ratio is None or not math.isfinite(ratio):
        return "—"
    return f"{(ratio - 1) * 100:+.1f}%"


def fmt_ci_change(lo: float, hi: float) -> str:
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "—"
    return f"[{(lo - 1) * 100:+.1f}%, {(hi - 1) * 100:+.1f}%]"


def fmt_pct(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    if 0 < abs(x) < 0.0005:          # a threshold of 1e-9 printed as "0.0%"
        return f"{x * 100:.2g}%"
    return f"{x * 100:.1f}%"


SYMBOL = {"slower": "✗ slower", "faster": "✓ faster", "same": "= same", "inconclusive": "? inconclusive"}


def text_table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def sentinel_lines(cmp: Comparison) -> list[str]:
    """How the machine itself moved between the runs (their sentinels' medians), and
    whether the cases were judged relative to them."""
    out = []
    for i, moved in cmp.sentinels.items():
        out.append(f"Drift sentinels, {cmp.runs[i].name} / {cmp.runs[0].name}: "
                   + ", ".join(f"{label} {fmt_change(r)}" for label, r in moved))
    if cmp.normalized:
        out.append(f"Judged {cmp.normalized}.")
    return out


def format_comparison(cmp: Comparison, *, verdicts: Iterable[str] | None = None,
                      limit: int | None = None) -> str:
    """A terminal report: runs, machine differences, a table per benchmark and
    metric (medians, change with its interval, verdict, MDE), unmatched cases."""
    show = set(verdicts) if verdicts else None
    out = []
    for info in cmp.runs:
        role = "baseline" if info.index == 0 else f"run {info.index}"
        out.append(f"{role}: {info.name}  ({info.hostname or info.machine_name}, {info.status}, {info.path})")
    if cmp.identity_differences:
        out.append("")
        out.append("Different machines (identity):")
        out += [f"  {d}" for d in cmp.identity_differences]
    if cmp.context_differences:
        out.append("")
        out.append("Settings that move figures differ (context):")
        out += [f"  {d}" for d in cmp.context_differences]
    out.append("")
    out.append(f"Threshold: {cmp.thresholds.describe()}; intervals at {cmp.confidence:.0%} confidence, "
               f"per process repetition.")
    out += sentinel_lines(cmp)
    rows = cmp.rows
    for (bench, metric), grp in rows.groupby(["benchmark", "metric"], sort=False):
        if show is not None:
            grp = grp[grp["verdict"].isin(show)]
        if grp.empty:
            continue
        unit = grp["unit"].iloc[0]
        better = grp["better"].iloc[0]
        out.append("")
        out.append(f"{bench} · {metric} ({unit}, {better} is better)")
        headers = ["case", f"{cmp.runs[0].name}"]
        table, notes = [], []
        shown = sorted(grp["run"].unique())
        for i in shown:
            headers += [cmp.runs[i].name, "change", f"{cmp.confidence:.0%} CI", "verdict", "MDE", "to decide"]
        for key, kg in grp.groupby("key", sort=False):
            first = kg.iloc[0]
            label = first["label"]
            others = sorted(set(kg["target"]) - {first["target_base"]})
            if others:                                 # cxl2 here is cxl3 there
                label += " (" + ", ".join(others) + ")"
            cells = [label, fmt_num(first["base_median"])]
            by_run = {int(r["run"]): r for _, r in kg.iterrows()}
            for i in shown:                            # a run without this case: a dash, in its own columns
                r = by_run.get(int(i))
                if r is None:
                    cells += ["—"] + [""] * 5
                    continue
                flag = "*" if r["note"] else ""
                cells += [fmt_num(r["median"]), fmt_change(r["ratio"]), fmt_ci_change(r["lo"], r["hi"]),
                          SYMBOL.get(r["verdict"], r["verdict"]) + flag,
                          fmt_pct(r["mde"]) if r["verdict"] in ("same", INCONCLUSIVE) else "",
                          fmt_needed(r["needed"]) if r["verdict"] == INCONCLUSIVE else ""]
                if flag:
                    notes.append(f"  * {label}: {r['note']}")
            table.append(cells)
        if limit is not None and len(table) > limit:
            extra = len(table) - limit
            table = table[:limit] + [[f"… {extra} more"] + [""] * (len(headers) - 1)]
        right = {1} | {i for i in range(2, len(headers)) if (i - 2) % 6 in (0, 1, 2, 4, 5)}
        out += text_table(headers, table, right) + notes[:limit or len(notes)]
    counts = cmp.counts()
    out.append("")
    out.append("Verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    if counts.get(INCONCLUSIVE):
        out.append("To decide: the repetitions per run after which the interval would clear the "
                   "threshold, if medians and spread held; 'ab': the run-to-run noise alone is wider "
                   "than the margin, and only the two sides measured interleaved (cxlbench ab) decide.")
    if not cmp.unmatched.empty:
        out.append(f"Unmatched ({len(cmp.unmatched)}):")
        for _, u in cmp.unmatched.head(limit or 20).iterrows():
            out.append(f"  {u['point']} [{u['metric']}]: {u['why']}")
        if len(cmp.unmatched) > (limit or 20):
            out.append(f"  … {len(cmp.unmatched) - (limit or 20)} more")
    if not cmp.not_measured.empty:
        out.append(f"Not measured ({len(cmp.not_measured)}):")
        for _, c in cmp.not_measured.iterrows():
            out.append(f"  {cmp.runs[int(c['run'])].name}: {c['case_id']} — {c['status']}: {c['reason']}")
    return "\n".join(out) + "\n"
