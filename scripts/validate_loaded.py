#!/usr/bin/env python3
"""Does loaded latency's idle point agree with the latency suite? Interleaved
rounds on one tier: a latency-family run (random chase) and a loaded-latency
run with no load (its idle point, same code path as the loaded points), at
the same working set and page size, back to back so drift hits both alike.

    .venv/bin/python scripts/validate_loaded.py [--rounds 5] [--tier ddr0]
        [--working-set 256MiB] [--pages 4k,thp] [--out validation-out/loaded]

Prints per round and page size the medians over repetitions of: the latency
family (wall-clock chase), the loaded-latency idle point (sub-windows in which
the chase thread had its CPU), and that idle point's plain wall-clock figure
over every sub-window; then the median of the rounds and the ratios.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from cxlbench.analysis.reduction import per_repetition
from cxlbench.results.store import load_run
from cxlbench.runner.run import RunConfig, run

SUITE = """name = "validate-loaded-{page}"
repetitions = {reps}
warmup = 1
min_sample_s = {sample_s}

[[benchmark]]
name = "latency"
tiers = ["{tier}"]
page = ["{page}"]
pattern = ["random"]
working_set = ["{ws}"]

[[benchmark]]
name = "loaded_latency"
tiers = ["{tier}"]
page = ["{page}"]
mix = ["read"]
delays = "idle"
working_set = "{ws}"
load_bytes = "4KiB"
"""


def one_round(args, page: str, out: Path, tag: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        suite = Path(d) / f"validate-loaded-{page}.toml"
        suite.write_text(SUITE.format(page=page, tier=args.tier, ws=args.working_set,
                                      reps=args.repetitions, sample_s=args.sample_s))
        outcome = run(RunConfig(suite=str(suite), out=str(out), label=tag))
    r = load_run(outcome.path)
    s = r.samples[r.samples["metric"] == "latency_ns"]
    per_rep = per_repetition(s, ["benchmark", "case_id"]).groupby("benchmark")["value"]
    wall = [v for c in r.meta["cases"] if c["benchmark"] == "loaded_latency"
            for v in (c["info"].get("wall_clock_latency_ns", {}).get("idle") or [])]
    return {"latency": statistics.median(per_rep.get_group("latency")),
            "loaded_idle": statistics.median(per_rep.get_group("loaded_latency")),
            "loaded_idle_wall": statistics.median(wall) if wall else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tier", default="ddr0")
    ap.add_argument("--working-set", default="256MiB")
    ap.add_argument("--pages", default="4k,thp")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--sample-s", type=float, default=0.2)
    ap.add_argument("--out", default="validation-out/loaded")
    args = ap.parse_args()
    out = Path(args.out)
    pages = args.pages.split(",")
    rows: dict[str, list[dict[str, float]]] = {p: [] for p in pages}
    print(f"{'round':>5} {'page':>5} {'latency':>9} {'idle':>9} {'idle wall':>9}  (ns, medians of "
          f"{args.repetitions} repetitions)")
    for i in range(1, args.rounds + 1):
        for page in pages:
            got = one_round(args, page, out, f"round{i}-{page}")
            rows[page].append(got)
            print(f"{i:>5} {page:>5} {got['latency']:9.1f} {got['loaded_idle']:9.1f} "
                  f"{got['loaded_idle_wall']:9.1f}", flush=True)
    print()
    for page in pages:
        med = {k: statistics.median(r[k] for r in rows[page]) for k in rows[page][0]}
        print(f"{page}: median of rounds: latency suite {med['latency']:.1f} ns, loaded idle "
              f"{med['loaded_idle']:.1f} ns ({med['loaded_idle'] / med['latency'] - 1:+.1%}), "
              f"loaded idle wall-clock {med['loaded_idle_wall']:.1f} ns "
              f"({med['loaded_idle_wall'] / med['latency'] - 1:+.1%})")


if __name__ == "__main__":
    main()
