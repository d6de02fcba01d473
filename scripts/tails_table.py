#!/usr/bin/env python3
"""The latency distributions of stored runs, checked: for every one-chain latency
case and repetition, the mean figure (latency_ns), the histogram's mean and how far
apart they are, the clock's cost per block, the blocks lost to another process,
p50 / p99 / p99.9, and the L1 floor's p99.9 beside them.

    .venv/bin/python scripts/tails_table.py RESULTS [--min-working-set 1GiB]

RESULTS: a run or a folder of runs (as `cxlbench.load` takes). Prints one row per
repetition, then per case the worst |mean - histogram mean| over its repetitions.
"""
from __future__ import annotations

import argparse

import pandas as pd

from cxlbench.results.store import find_runs, load_run
from cxlbench.units import parse_size


def rows(path) -> list[dict]:
    out = []
    for run_path in find_runs(path):
        run = load_run(run_path)
        s = run.samples[run.samples["benchmark"] == "latency"]
        for case in run.meta["cases"]:
            info = case.get("info") or {}
            checks = list(info.get("distribution") or []) + [       # every process's, not the first's alone
                c for p in info.get("processes") or [] for c in (p.get("info") or {}).get("distribution") or []]
            for c in checks:
                mine = s[(s["case_id"] == case["case_id"]) & (s["repetition"] == c["repetition"])]
                metric = dict(zip(mine["metric"], mine["value"]))
                if "latency_ns" not in metric:
                    continue
                out.append({"run": run.meta.get("label") or run.run_id, "page": case["params"]["page"],
                            "working_set_bytes": case["params"]["working_set_bytes"],
                            "rep": c["repetition"], "latency_ns": metric["latency_ns"],
                            "hist_mean_ns": c["mean_ns"], "diff": c["mean_vs_latency"],
                            "k": c["k"], "clock_ns": c["timer_overhead_ns"],
                            "lost": c["lost_blocks"] / max(c["blocks"] + c["lost_blocks"], 1),
                            "p50": metric.get("p50_ns"), "p99": metric.get("p99_ns"),
                            "floor p99": metric.get("floor_p99_ns"), "p99.9": metric.get("p99_9_ns"),
                            "floor p99.9": metric.get("floor_p99_9_ns"),
                            "cpu_held": mine["cpu_held"].iloc[0] if "cpu_held" in mine else None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--min-working-set", default="0")
    args = ap.parse_args()
    df = pd.DataFrame(rows(args.results))
    if df.empty:
        raise SystemExit("no one-chain latency case with a distribution in these runs")
    df = df[df["working_set_bytes"] >= parse_size(args.min_working_set)]
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(df.round(3).to_string(index=False))
        worst = df.assign(absdiff=df["diff"].abs()).groupby(["page", "working_set_bytes"])["absdiff"]
        print("\nworst |latency_ns - histogram mean| / latency_ns per case:")
        print(worst.max().round(4).to_string())


if __name__ == "__main__":
    main()
