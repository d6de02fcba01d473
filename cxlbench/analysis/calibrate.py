"""`cxlbench calibrate`: two runs of the same suite on one machine (A/A).

Nothing changed between them, so every difference is noise. For each case it
reports the noise floor — the spread of its repetitions and the smallest change
the gate could catch (MDE) — the apparent A/A change with its interval, and the
gate's false-positive rate: observed (the share of cases the gate would call
slower, or faster) and expected from the repetitions' noise alone. When the
observed rate exceeds the expected one, the runs differ by more than their
repetitions show (page placement, clocks, neighbours): calibrate estimates that
run-to-run noise per benchmark and writes it, with the thresholds, as a TOML
file the gate reads ([noise]); the gate then widens its intervals by it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import chi2

from cxlbench.analysis.compare import (Comparison, RunLike, as_run, text_table, compare, fmt_change, fmt_ci_change,
                                       fmt_pct)
from cxlbench.analysis.history import suite_name
from cxlbench.analysis.stats import (CONFIDENCE, FASTER, SAME, SLOWER, false_alarm_probability,
                                     minimum_detectable_effect, run_noise_estimate)
from cxlbench.analysis.thresholds import Thresholds, to_toml
from cxlbench.results.store import ResultsError

#: Thresholds a suggestion rounds up to.
LADDER = (0.02, 0.03, 0.05, 0.075, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40, 0.50)


@dataclass
class Calibration:
    comparison: Comparison
    cases: pd.DataFrame          # one row per case: noise floor, A/A change, verdict, P(false alarm)
    benchmarks: pd.DataFrame     # one row per benchmark: rates and the suggested threshold
    warnings: list[str] = field(default_factory=list)

    @property
    def false_positive_rate(self) -> float:
        """Observed: share of compared cases the gate called slower in an A/A pair."""
        return float((self.cases["verdict"] == SLOWER).mean()) if len(self.cases) else math.nan

    @property
    def false_change_rate(self) -> float:
        """Observed: share called slower or faster (either is wrong in an A/A pair)."""
        return float(self.cases["verdict"].isin([SLOWER, FASTER]).mean()) if len(self.cases) else math.nan

    @property
    def expected_false_positive_rate(self) -> float:
        """Mean per-case probability of a false 'slower' from the repetitions' noise."""
        p = self.cases["p_false_alarm"].dropna()
        return float(p.mean()) if len(p) else math.nan

    @property
    def gate_false_failure_probability(self) -> float:
        """Probability that a whole A/A gate fails (any case slower), from the noise alone."""
        p = self.cases["p_false_alarm"].dropna().to_numpy()
        return float(1 - np.prod(1 - p)) if len(p) else math.nan

    def suggested_thresholds(self) -> Thresholds:
        """The thresholds in force, with each benchmark's measured run-to-run noise."""
        th = self.comparison.thresholds
        noise = dict(th.noise)
        for r in self.benchmarks.to_dict("records"):
            if np.isfinite(r["suggested_noise"]):
                noise[r["benchmark"]] = _round_up(r["suggested_noise"])
        return Thresholds(default=th.default, benchmarks=dict(th.benchmarks), metrics=dict(th.metrics),
                          noise=noise, source="cxlbench calibrate")

    def thresholds_toml(self) -> str:
        runs = self.comparison.runs
        comment = ("Suggested by `cxlbench calibrate` from the A/A pair\n"
                   f"{runs[0].name} / {runs[1].name} on {runs[0].hostname}. One pair is one sample of\n"
                   "run-to-run noise: calibrate a few pairs before trusting these.")
        return to_toml(self.suggested_thresholds(), comment)

    def to_dict(self) -> dict[str, Any]:
        def clean(records):
            return [{k: (None if isinstance(v, float) and not math.isfinite(v) else
                         (v.item() if hasattr(v, "item") else v)) for k, v in r.items()} for r in records]
        return {"tool": "cxlbench calibrate",
                "runs": [r.to_dict() for r in self.comparison.runs],
                "confidence": self.comparison.confidence,
                "false_positive_rate": _none(self.false_positive_rate),
                "false_change_rate": _none(self.false_change_rate),
                "expected_false_positive_rate": _none(self.expected_false_positive_rate),
                "gate_false_failure_probability": _none(self.gate_false_failure_probability),
                "warnings": self.warnings,
                "benchmarks": clean(self.benchmarks.to_dict("records")),
                "cases": clean(self.cases.to_dict("records"))}

    def to_json(self, indent: int = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str, allow_nan=False)

    def format(self, limit: int = 30) -> str:
        """Terminal text."""
        runs = self.comparison.runs
        out = [f"A/A calibration: {runs[0].name} vs {runs[1].name} ({runs[0].hostname})"]
        out += [f"warning: {w}" for w in self.warnings]
        out.append(f"False positives: {fmt_pct(self.false_positive_rate)} of cases called slower "
                   f"(expected from repetition noise: {fmt_pct(self.expected_false_positive_rate)}); "
                   f"{fmt_pct(self.false_change_rate)} called slower or faster.")
        out.append(f"Chance that an A/A gate fails from repetition noise alone: "
                   f"{fmt_pct(self.gate_false_failure_probability)}.")
        out.append("")
        rows = [[b["benchmark"], str(b["cases"]), fmt_pct(b["median_rcv"]), fmt_pct(b["max_abs_change"]),
                 fmt_pct(b["false_positive_rate"]), fmt_pct(b["threshold"]), fmt_pct(b["median_mde"]),
                 fmt_pct(b["run_noise"]), fmt_pct(b["suggested_noise"]), fmt_pct(b["mde_with_noise"])]
                for b in self.benchmarks.to_dict("records")]
        out += text_table(["benchmark", "cases", "repetition noise (rCV)", "max |A/A change|", "false +",
                       "threshold", "MDE", "run-to-run noise", "suggested", "MDE with it"], rows,
                      set(range(1, 10)))
        out.append("")
        out.append("Run-to-run noise: what the runs differ by beyond their repetitions' spread; "
                   "suggested: its 90% upper bound, which thresholds_toml() writes as [noise] for the gate.")
        noisy = self.cases.sort_values("mde", ascending=False).head(limit)
        out.append("")
        out.append(f"Noisiest cases (noise floor = MDE at {self.comparison.confidence:.0%} confidence):")
        rows = [[r["benchmark"], r["label"], r["metric"], fmt_pct(r["rcv"]), fmt_pct(r["mde"]),
                 fmt_change(r["ratio"]), fmt_ci_change(r["lo"], r["hi"]), r["verdict"]]
                for r in noisy.to_dict("records")]
        out += text_table(["benchmark", "case", "metric", "rCV", "MDE", "A/A change", "CI", "verdict"],
                      rows, {3, 4, 5, 6})
        return "\n".join(out) + "\n"

    def markdown(self) -> str:
        text = self.format()
        return "## cxlbench calibrate\n\n```\n" + text.replace("```", "'''") + "```\n"


def _none(x: float):
    return None if not math.isfinite(x) else x


def _ladder(x: float) -> float:
    for step in LADDER:
        if x <= step:
            return step
    return LADDER[-1]


def _upper_factor(n: int, p: float = 0.10) -> float:
    """sqrt((n−1)/χ²_p(n−1)): turns a σ estimated from n cases into its one-sided
    90% upper bound (scipy's exact χ² quantile)."""
    k = max(n - 1, 1)
    return float(np.sqrt(k / chi2.ppf(p, k)))


def _round_up(x: float) -> float:
    """Two significant figures, rounded up (0.1234 → 0.13)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (np.floor(np.log10(x)) - 1)
    return float(np.ceil(x / scale - 1e-9) * scale)


def _an_aa_pair(runs: list) -> None:
    """Two distinct runs of one suite: a run copied to a second folder read noise 0,
    and runs of two suites calibrated on what they happened to share."""
    a, b = runs
    if a.run_id == b.run_id:
        raise ResultsError(f"both runs are {a.run_id} (a copy of one run): an A/A pair is two runs")
    suites = [suite_name(r.meta) for r in runs]
    if suites[0] != suites[1]:
        raise ResultsError(f"the runs are of two suites ({suites[0]}, {suites[1]}): an A/A pair is two runs of one suite")
    for r in runs:                    # a run half measured would calibrate half the cases
        if r.status != "complete":
            raise ResultsError(f"{r.path} is {r.status}, not complete: an A/A pair is two whole runs (the cases "
                               f"it lacks would keep the default threshold without a word)")


def calibrate(run_a: RunLike, run_b: RunLike, threshold: float | str | None = None,
              thresholds_file: str | Path | None = None, confidence: float = CONFIDENCE) -> Calibration:
    """Noise floor per case and the gate's false-positive rate from an A/A pair."""
    runs = [as_run(r) for r in (run_a, run_b)]
    for run in runs:
        values = run.samples["value"].to_numpy(float)
        if not (np.isfinite(values) & (values > 0)).any():
            raise ResultsError(f"{run.run_id} holds no positive figure (every sample is 0, negative or not a "
                               "number): nothing to calibrate from; re-run it")
    _an_aa_pair(runs)
    cmp = compare(runs, threshold=threshold, thresholds_file=thresholds_file, confidence=confidence)
    warnings = []
    if cmp.identity_differences:          # the noise of one machine: another's is not it
        raise ResultsError("the two runs are not of the same machine (" + "; ".join(map(str, cmp.identity_differences))
                           + "): an A/A pair is two runs of one suite on one machine")
    if cmp.rows.empty:
        raise ResultsError("the two runs have no case in common: nothing to calibrate (an A/A pair is two runs "
                           "of one suite)")
    if cmp.context_differences:
        warnings.append("settings differ between the runs: " + "; ".join(map(str, cmp.context_differences)))
    if not cmp.unmatched.empty:
        warnings.append(f"{len(cmp.unmatched)} cases are in only one of the runs (not calibrated)")
    rows = cmp.rows.copy()
    pts = cmp.points.set_index(["run", "key"])["rcv"]
    rows["rcv"] = [float(np.nanmax([pts.get((0, k), np.nan), pts.get((1, k), np.nan)]))
                   if not (np.isnan(pts.get((0, k), np.nan)) and np.isnan(pts.get((1, k), np.nan)))
                   else np.nan for k in rows["key"]]
    rows["p_false_alarm"] = [false_alarm_probability(se, df, thr, confidence)
                             for se, df, thr in zip(rows["se_log"], rows["df"], rows["threshold"])]
    rows["abs_change"] = (rows["ratio"] - 1).abs()
    # how far the interval reaches from 1: a threshold beyond it makes the case "same"
    rows["reach"] = np.maximum((rows["hi"] - 1).abs(), (rows["lo"] - 1).abs())
    cases = rows[["benchmark", "metric", "unit", "label", "case_id", "point", "base_n", "n", "rcv", "mde",
                  "ratio", "lo", "hi", "verdict", "threshold", "p_false_alarm", "abs_change", "reach"]]
    th = cmp.thresholds
    # the repetitions' own standard error, without any run noise the thresholds already add
    used = np.array([th.noise_for(b) for b in rows["benchmark"]])
    within = np.sqrt(np.maximum(rows["se_log"].to_numpy(float) ** 2 - 2 * used ** 2, 0))
    cases = cases.assign(se_within=within)
    bench = []
    for b, g in cases.groupby("benchmark", sort=False):
        sigma = run_noise_estimate(np.log(g["ratio"].to_numpy(float)), g["se_within"].to_numpy(float))
        df = rows.loc[g.index, "df"].to_numpy(float)
        upper = sigma * _upper_factor(len(g)) if np.isfinite(sigma) else sigma
        with_noise = [minimum_detectable_effect(float(np.sqrt(se ** 2 + 2 * upper ** 2)), d, thr, confidence)
                      for se, d, thr in zip(g["se_within"], df, g["threshold"])] if np.isfinite(sigma) else []
        bench.append({"benchmark": b, "cases": int(len(g)), "median_rcv": float(g["rcv"].median()),
                      "median_mde": float(g["mde"].replace([np.inf], np.nan).median()),
                      "max_abs_change": float(g["abs_change"].max()),
                      "false_positive_rate": float((g["verdict"] == SLOWER).mean()),
                      "same_rate": float((g["verdict"] == SAME).mean()),
                      "expected_false_positive_rate": float(g["p_false_alarm"].mean()),
                      "threshold": float(g["threshold"].iloc[0]),
                      "run_noise": sigma,
                      "suggested_noise": sigma * _upper_factor(len(g)) if np.isfinite(sigma) else sigma,
                      "mde_with_noise": float(np.nanmedian(with_noise)) if len(with_noise) else float("nan")})
    return Calibration(cmp, cases.reset_index(drop=True), pd.DataFrame(bench), warnings)
