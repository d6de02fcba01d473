"""Figures derived from the host suites' curves — pure functions of tidy samples.

    knees(x, y)               where a latency curve steps up (cache / TLB reach)
    tlb_knees(samples)        per tier × page size: the TLB-reach knees and what a TLB
                              miss adds (random chase − windowed chase)
    loaded_curves(samples)    latency vs achieved bandwidth per (initiator, target, mix)
    crossover(uses, a, b)     the K from which strategy b beats a (first crossing)
    crossovers(samples)       per far tier: K where copying / migrating first pays off
    penalty_ratios(samples)   write-penalty slowdowns per tier, with the ECC state beside
                              (ecc_by_target(run.meta) gives the states a run recorded)
    mlp(samples)              memory-level parallelism: ns per load with N chains

Every function summarises per repetition first (the median of its inner
iterations), then takes the median over repetitions: repetitions are the
independent trials, inner iterations are not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cxlbench.analysis.stats import ratio_ci
from cxlbench.analysis.reduction import per_repetition


# ---- medians per point -------------------------------------------------------------

def medians(samples: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Median over repetitions of each repetition's median (summary.per_repetition),
    per `keys` (which must not include `repetition`); column `value` and `n`
    (repetitions)."""
    keys = [k for k in keys if k in samples.columns]
    if samples.empty:
        return pd.DataFrame(columns=keys + ["value", "n"])
    per_rep = per_repetition(samples, keys)
    out = per_rep.groupby(keys, dropna=False, sort=True)["value"].agg(["median", "size"]).reset_index()
    return out.rename(columns={"median": "value", "size": "n"})


def _rep_values(samples: pd.DataFrame, mask) -> np.ndarray:
    sub = samples[mask]
    if sub.empty:
        return np.array([])
    return per_repetition(sub, []).value.to_numpy(dtype=float)


# ---- knees ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Knee:
    """A step up of a curve: flat up to `at` (the last x before the rise: the reach of
    the cache or TLB level that ran out), rising until `to`, by `rise` (y units)."""
    at: float
    to: float
    before: float
    after: float

    @property
    def rise(self) -> float:
        return self.after - self.before


def lower_envelope(y) -> np.ndarray:
    """y[i] -> min(y[i:]): a latency curve never really falls with a growing working
    set, so a high point followed by lower ones is noise (another process, a
    timer interrupt) and is cut down to them."""
    y = np.asarray(y, dtype=float)
    return np.minimum.accumulate(y[::-1])[::-1] if y.size else y


def median3(y) -> np.ndarray:
    """Each interior point replaced by the median of it and its two neighbours: one
    point off on its own (a dip or a spike) goes; a monotone curve is unchanged."""
    y = np.asarray(y, dtype=float)
    if y.size < 3:
        return y.copy()
    out = y.copy()
    out[1:-1] = np.median(np.stack([y[:-2], y[1:-1], y[2:]]), axis=0)
    return out


def knees(x, y, rise: float = 0.25, step: float = 0.03, floor: float = 0.0, ref=None) -> list[Knee]:
    """The knees of a curve y(x), x increasing (working sets).

    On the lower envelope of the curve's running median of three (an isolated
    point, high or low, is noise), consecutive points that each climb by more than
    `step` (relative to ref, default y itself) form one rise; a rise counts as a
    knee when it climbs by at least max(floor, rise × ref) in all. ref: a curve of
    the same length to measure steps against (for a difference curve that starts
    near zero, the latency it is added to)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size != y.size:
        raise ValueError("x and y differ in length")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    y = median3(y)
    r = np.abs(y) if ref is None else np.abs(median3(np.asarray(ref, dtype=float)[order]))
    e = lower_envelope(y)
    out: list[Knee] = []
    i, n = 0, len(x)
    while i < n - 1:
        if e[i + 1] - e[i] > step * r[i]:
            j = i + 1
            while j < n - 1 and e[j + 1] - e[j] > step * r[j]:
                j += 1
            if e[j] - e[i] >= max(floor, rise * r[i]):
                out.append(Knee(float(x[i]), float(x[j]), float(e[i]), float(e[j])))
            i = j
        else:
            i += 1
    return out


# ---- page size and TLB -----------------------------------------------------------------

TLB_KEYS = ["benchmark", "initiator", "target", "page"]


def tlb_knees(samples: pd.DataFrame, rise: float = 0.10, floor_ns: float = 2.0) -> pd.DataFrame:
    """Per initiator × target × page size, from latency_ns over working_set_bytes with
    pattern random and window (the page_size family; the latency family's rows work
    too):

      tlb_knees        the knees of D = random − window (steps of at least `rise` of the
                       windowed latency and floor_ns): [(at, to, added_ns)], the first is
                       the L1 TLB's reach, the next the L2 TLB's, ...
      added_miss_ns    D at the largest working set both patterns measured: what a
                       TLB miss adds there (a page walk; nested in a VM)
      added_miss_frac  that over the windowed latency
      latency_knees    the knees of the random curve itself (caches and TLB together)
      largest_bytes    the largest working set both patterns measured
    """
    lat = samples[(samples["metric"] == "latency_ns")] if "metric" in samples.columns else samples
    need = {"working_set_bytes", "pattern"}
    cols = ["benchmark", "initiator", "target", "page", "tlb_knees", "added_miss_ns",
            "added_miss_frac", "latency_knees", "largest_bytes"]
    if lat.empty or not need <= set(lat.columns):
        return pd.DataFrame(columns=cols)
    if "chains" in lat.columns:
        lat = lat[lat["chains"].fillna(1) == 1]
    keys = [k for k in TLB_KEYS if k in lat.columns]
    med = medians(lat, keys + ["pattern", "working_set_bytes"])
    rows = []
    for key, g in med.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rnd = g[g["pattern"] == "random"].set_index("working_set_bytes")["value"].sort_index()
        win = g[g["pattern"] == "window"].set_index("working_set_bytes")["value"].sort_index()
        row = dict(zip(keys, key))
        row["latency_knees"] = [(k.at, k.to, k.rise) for k in knees(rnd.index, rnd.values)]
        common = rnd.index.intersection(win.index)
        if len(common):
            # below the window both chases are the same: D = 0 there
            small = rnd.index[rnd.index < common.min()]
            xs = np.concatenate([small.to_numpy(float), common.to_numpy(float)])
            d = np.concatenate([np.zeros(len(small)), (rnd[common] - win[common]).to_numpy()])
            base = np.concatenate([rnd[small].to_numpy(), win[common].to_numpy()])
            found = knees(xs, d, rise=rise, step=rise / 4, floor=floor_ns, ref=base)
            row["tlb_knees"] = [(k.at, k.to, k.rise) for k in found]
            big = common.max()
            row["added_miss_ns"] = float(rnd[big] - win[big])
            row["added_miss_frac"] = float((rnd[big] - win[big]) / win[big])
            row["largest_bytes"] = int(big)
        else:
            row.update(tlb_knees=[], added_miss_ns=math.nan, added_miss_frac=math.nan,
                       largest_bytes=None)
        rows.append(row)
    return pd.DataFrame(rows, columns=[c for c in cols if c in keys or c not in TLB_KEYS])


# ---- loaded latency ------------------------------------------------------------------

LOADED_KEYS = ["benchmark", "initiator", "target", "mix", "nt", "page", "ddr_weight"]


def loaded_curves(samples: pd.DataFrame) -> pd.DataFrame:
    """Latency vs achieved bandwidth: one row per (initiator, target, mix, ...) and
    point (load_threads, delay), with the medians of latency_ns and bandwidth_GBps,
    sorted by bandwidth; `idle` marks the point without load threads."""
    fam = samples[samples["metric"].isin(["latency_ns", "bandwidth_GBps"])]
    if fam.empty or "delay" not in fam.columns:
        return pd.DataFrame(columns=["initiator", "target", "delay", "load_threads",
                                     "latency_ns", "bandwidth_GBps", "idle"])
    keys = [k for k in LOADED_KEYS if k in fam.columns] + ["load_threads", "delay"]
    med = medians(fam, keys + ["metric"])
    wide = med.set_index(keys + ["metric"])["value"].unstack("metric").reset_index()
    wide.columns.name = None
    for m in ("latency_ns", "bandwidth_GBps"):
        if m not in wide.columns:
            wide[m] = math.nan
    wide["idle"] = wide["load_threads"] == 0
    group = [k for k in keys if k not in ("load_threads", "delay")]
    return wide.sort_values(group + ["bandwidth_GBps"], kind="stable").reset_index(drop=True)


def loaded_summary(curves: pd.DataFrame, at: float = 0.8) -> pd.DataFrame:
    """Per curve: the idle latency, the peak bandwidth, and the latency at `at` × peak
    (interpolated along the curve)."""
    group = [k for k in LOADED_KEYS if k in curves.columns]
    rows = []
    for key, g in curves.groupby(group, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        idle = g[g["idle"]]["latency_ns"]
        loaded = g[~g["idle"]].sort_values("bandwidth_GBps")
        peak = float(loaded["bandwidth_GBps"].max()) if len(loaded) else math.nan
        lat_at = math.nan
        if len(loaded) >= 2 and peak > 0:
            _, [lat_at] = at_share_of_peak(loaded["bandwidth_GBps"], [loaded["latency_ns"]], at)
        rows.append({**dict(zip(group, key)), "idle_latency_ns": float(idle.iloc[0]) if len(idle) else math.nan,
                     "peak_GBps": peak, f"latency_at_{int(at * 100)}pct_ns": lat_at,
                     "max_latency_ns": float(loaded["latency_ns"].max()) if len(loaded) else math.nan})
    return pd.DataFrame(rows)


def at_share_of_peak(bandwidth, values: list, at: float) -> tuple[float, list[float]]:
    """One loaded-latency curve read at `at` × its own peak bandwidth: (the peak, each
    of `values` interpolated there along the curve). Its own peak, not a pooled one:
    another curve's peak would put the point off this curve's knee."""
    bw = np.asarray(bandwidth, dtype=float)
    order = np.argsort(bw)
    peak = float(bw.max())
    return peak, [float(np.interp(at * peak, bw[order], np.asarray(v, dtype=float)[order])) for v in values]


# ---- zero-copy vs copy vs migrate ------------------------------------------------------

def crossover(uses, in_place, strategy) -> float:
    """The smallest K (interpolated linearly between measured Ks) from which
    `strategy` takes no longer than `in_place`; 0 if it never takes longer; inf if it
    is still slower at the largest K measured."""
    k = np.asarray(uses, dtype=float)
    d = np.asarray(strategy, dtype=float) - np.asarray(in_place, dtype=float)
    order = np.argsort(k)
    k, d = k[order], d[order]
    if d.size == 0:
        return math.nan
    return _first_cross(k, d)


def _first_cross(k: np.ndarray, d: np.ndarray) -> float:
    """First K where d goes from > 0 to <= 0, for good (the last crossing)."""
    above = np.nonzero(d > 0)[0]
    if above.size == 0:
        return float(k[0])
    last = above[-1]
    if last == len(d) - 1:
        return math.inf
    k0, k1, d0, d1 = k[last], k[last + 1], d[last], d[last + 1]
    return float(k0 + (k1 - k0) * d0 / (d0 - d1))


def crossovers(samples: pd.DataFrame) -> pd.DataFrame:
    """Per initiator × far tier × other strategy: crossover K against in_place (on the
    medians of `seconds` at each `uses`), the preparation's seconds (uses = 0), and
    the K the per-use slopes predict: prep / (per use in place − per use after)."""
    fam = samples[(samples["metric"] == "seconds") & samples["strategy"].notna()] \
        if {"strategy", "uses"} <= set(samples.columns) else samples.iloc[0:0]
    cols = ["initiator", "target", "strategy", "crossover_uses", "model_uses", "prep_s",
            "per_use_s", "in_place_per_use_s", "max_uses"]
    if fam.empty:
        return pd.DataFrame(columns=cols)
    med = medians(fam, ["initiator", "target", "strategy", "uses"])
    rows = []
    for (ini, tgt), g in med.groupby(["initiator", "target"], sort=True):
        base = g[g["strategy"] == "in_place"].set_index("uses")["value"].sort_index()
        if base.empty:
            continue
        b_slope = _slope(base)
        for strat, s in g[g["strategy"] != "in_place"].groupby("strategy", sort=True):
            s = s.set_index("uses")["value"].sort_index()
            common = base.index.intersection(s.index)
            prep = float(s.get(0, math.nan))
            slope = _slope(s)
            gain = b_slope - slope
            rows.append({"initiator": ini, "target": tgt, "strategy": strat,
                         "crossover_uses": crossover(common, base[common], s[common]),
                         "model_uses": prep / gain if gain > 0 else math.inf,
                         "prep_s": prep, "per_use_s": slope, "in_place_per_use_s": b_slope,
                         "max_uses": int(common.max()) if len(common) else 0})
    return pd.DataFrame(rows, columns=cols)


def _slope(curve: pd.Series) -> float:
    """Seconds per use: least squares over uses >= 1."""
    c = curve[curve.index >= 1]
    if len(c) < 2:
        return math.nan
    return float(np.polyfit(c.index.to_numpy(float), c.to_numpy(float), 1)[0])


# ---- write penalty -----------------------------------------------------------------------

#: (name, numerator case, denominator case): op, store, write_bytes (None: the partial size)
PENALTIES = [
    ("write ÷ read", ("write", "regular", 64), ("read", "regular", 64)),
    ("write nt ÷ read", ("write", "nt", 64), ("read", "regular", 64)),
    ("write nt ÷ write", ("write", "nt", 64), ("write", "regular", 64)),
    ("rmw ÷ read", ("rmw", "regular", 64), ("read", "regular", 64)),
    ("rmw ÷ write", ("rmw", "regular", 64), ("write", "regular", 64)),
    ("3:1 ÷ read", ("3:1", "regular", 64), ("read", "regular", 64)),
    ("2:1 ÷ read", ("2:1", "regular", 64), ("read", "regular", 64)),
    ("1:1 ÷ read", ("1:1", "regular", 64), ("read", "regular", 64)),
    ("partial ÷ write", ("partial", "regular", None), ("write", "regular", 64)),
    ("partial nt ÷ write nt", ("partial", "nt", None), ("write", "nt", 64)),
    ("partial nt ÷ partial", ("partial", "nt", None), ("partial", "regular", None)),
]


def penalty_ratios(samples: pd.DataFrame, ecc: str | dict | None = None,
                   confidence: float = 0.95) -> pd.DataFrame:
    """Write-penalty slowdowns per initiator × target × threads (× page size): the ratio of the
    median ns_per_line of two ops (above 1: the first is slower per 64-byte line),
    with its confidence interval over repetitions. `ecc`: the run's ECC state (one
    line, or {target: line}) put beside every ratio — the measured ratio is the
    finding; the ECC state is context, never its cause by itself."""
    cols = ["initiator", "target", "threads", "page", "ratio", "value", "lo", "hi", "numerator_ns",
            "denominator_ns", "write_bytes", "ecc"]
    fam = samples[(samples["metric"] == "ns_per_line")] if "metric" in samples.columns else samples
    if fam.empty or "op" not in fam.columns:
        return pd.DataFrame(columns=cols)
    rows = []
    keys = ["initiator", "target", "threads"] + (["page"] if "page" in fam.columns else [])
    for key, g in fam.groupby(keys, sort=True):
        ini, tgt, thr = key[:3]
        page = {"page": key[3]} if len(key) > 3 else {}        # never a ratio across page sizes
        sizes = sorted(g.loc[g["op"] == "partial", "write_bytes"].dropna().unique()) or [None]
        for name, num, den in PENALTIES:
            for wb in sizes:
                a = _case_mask(g, num, wb)
                b = _case_mask(g, den, wb)
                va, vb = _rep_values(g, a), _rep_values(g, b)
                if va.size == 0 or vb.size == 0:
                    continue
                r = ratio_ci(vb, va, confidence)
                partial = "partial" in (num[0], den[0])
                rows.append({"initiator": ini, "target": tgt, "threads": int(thr), **page,
                             "ratio": name.replace("partial", f"partial {int(wb)} B") if partial and wb else name,
                             "value": r.ratio, "lo": r.lo, "hi": r.hi,
                             "numerator_ns": float(np.median(va)), "denominator_ns": float(np.median(vb)),
                             "write_bytes": int(wb) if partial and wb else 64,
                             "ecc": ecc.get(tgt) if isinstance(ecc, dict) else ecc})
                if not partial:
                    break
    return pd.DataFrame(rows, columns=cols)


def ecc_by_target(meta: dict) -> dict[str, str]:
    """The ECC state each write-penalty case recorded (its info["ecc"]), by target;
    the run's end state (run.json "ecc") for targets without one."""
    state = (meta.get("ecc") or {}).get("state")
    out = {c["target"]: c["info"]["ecc"] for c in meta.get("cases", [])
           if c.get("benchmark") == "write_penalty" and (c.get("info") or {}).get("ecc")}
    for c in meta.get("cases", []):
        if state and c.get("benchmark") == "write_penalty":
            out.setdefault(c["target"], state)
    return out


def _case_mask(g: pd.DataFrame, spec: tuple, partial_bytes) -> pd.Series:
    op, store, wb = spec
    mask = (g["op"] == op) & (g["store"] == store)
    want = partial_bytes if wb is None else wb
    if want is not None and "write_bytes" in g.columns:
        mask &= g["write_bytes"] == want
    return mask


# ---- memory-level parallelism ----------------------------------------------------------

def mlp(samples: pd.DataFrame) -> pd.DataFrame:
    """Per initiator × target × page × working set: ns per load with N chains (1 chain:
    the latency) and the speed-up over one chain — how many misses the tier keeps in
    flight."""
    lat = samples[samples["metric"].isin(["latency_ns", "ns_per_load"])]
    cols = ["initiator", "target", "page", "working_set_bytes", "chains", "ns_per_load", "speedup"]
    if lat.empty or "chains" not in lat.columns:
        return pd.DataFrame(columns=cols)
    one = lat[(lat["metric"] == "latency_ns") & (lat["chains"] == 1)]
    many = lat[(lat["metric"] == "ns_per_load") & (lat["chains"] > 1)]
    keys = [k for k in ["initiator", "target", "page", "pattern", "working_set_bytes"] if k in lat.columns]
    per = pd.concat([medians(one, keys + ["chains"]), medians(many, keys + ["chains"])])
    per = per.rename(columns={"value": "ns_per_load"})
    base = per[per["chains"] == 1][keys + ["ns_per_load"]].rename(columns={"ns_per_load": "_one"})
    per = per.merge(base, on=keys, how="left")
    per["speedup"] = per["_one"] / per["ns_per_load"]
    return per.drop(columns="_one").sort_values(keys + ["chains"]).reset_index(drop=True)
