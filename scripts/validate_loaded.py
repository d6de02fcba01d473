#!/usr/bin/env python3
"""Does loaded latency agree with the tools it is checked against? Two checks.

Idle (default): interleaved rounds on one tier of a latency-family run (random
chase) and a loaded-latency run with no load (its idle point, same code path as
the loaded points), at the same working set and page size, back to back so
drift hits both alike.

    .venv/bin/python scripts/validate_loaded.py [--rounds 5] [--tier ddr0]
        [--working-set 256MiB] [--pages 4k,thp] [--out validation-out/loaded]

Loaded (--multiload PATH): google/multichase's multiload runs the same
experiment, `-c chaseload -l stream-sum -t 2`: one chase thread and one read
load thread at full injection. Interleaved rounds (the tool that goes first
alternates), both on CPUs 0-1 (multiload under taskset; cxlbench's family
chases on the tier's first CPU and loads from the second), same working set
for the chase and for the load, 4 KiB pages; cxlbench also at --delays. Two
loads that move different bandwidths put the chase at different points of a
curve that is steep near saturation, so each multiload is also compared with
cxlbench's chase at multiload's own load bandwidth (interpolated on cxlbench's
delays in the same round). multiload's Makefile builds without -march (SSE2
loads); cxlbench's read load uses AVX2: give a second multiload built with
-march=native -mprefer-vector-width=256 to compare vector width alike.

    .venv/bin/python scripts/validate_loaded.py --multiload ML[,ML_AVX2] \
        [--rounds 5] [--working-set 512MiB] [--delays 0,2,8]

Prints per round and page size the medians over repetitions of: the latency
family (wall-clock chase), the loaded-latency idle point (sub-windows in which
the chase thread had its CPU), and that idle point's plain wall-clock figure
over every sub-window; then the median of the rounds and the ratios.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
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


def run_suite(text: str, out: Path, tag: str):
    """One ordinary run of the suite `text` (written to a file of its own) into `out`."""
    with tempfile.TemporaryDirectory() as d:
        suite = Path(d) / "validate-loaded.toml"
        suite.write_text(text)
        return load_run(run(RunConfig(suite=str(suite), out=str(out), label=tag)).path)


def one_round(args, page: str, out: Path, tag: str) -> dict[str, float]:
    r = run_suite(SUITE.format(page=page, tier=args.tier, ws=args.working_set, reps=args.repetitions,
                               sample_s=args.sample_s), out, tag)
    s = r.samples[r.samples["metric"] == "latency_ns"]
    per_rep = per_repetition(s, ["benchmark", "case_id"]).groupby("benchmark")["value"]
    wall = [v for c in r.meta["cases"] if c["benchmark"] == "loaded_latency"
            for v in (c["info"].get("wall_clock_latency_ns", {}).get("idle") or [])]
    return {"latency": statistics.median(per_rep.get_group("latency")),
            "loaded_idle": statistics.median(per_rep.get_group("loaded_latency")),
            "loaded_idle_wall": statistics.median(wall) if wall else float("nan")}


LOADED_SUITE = """name = "validate-loaded-multiload"
repetitions = {reps}
warmup = 1
min_sample_s = {sample_s}

[[benchmark]]
name = "loaded_latency"
tiers = ["{tier}"]
page = ["4k"]
mix = ["read"]
delays = "{delays}"
load_threads = [1]
working_set = "{ws}"
load_bytes = "{ws}"
"""


def cxlbench_loaded(args, out: Path, tag: str) -> dict[int, tuple[float, float]]:
    """{delay: (chase ns, load GB/s)}: medians over repetitions."""
    s = run_suite(LOADED_SUITE.format(tier=args.tier, ws=args.working_set, delays=args.delays,
                                      reps=args.repetitions, sample_s=args.sample_s), out, tag).samples
    s = s[s["delay"].notna() & (s["load_threads"] > 0)]
    got = {}
    for delay, g in s.groupby("delay"):
        med = g.groupby("metric")["value"].median()
        got[int(delay)] = (float(med["latency_ns"]), float(med["bandwidth_GBps"]))
    return got


def multiload(args, binary: str) -> tuple[float, float]:
    """(chase ns, the load thread's GB/s) of one multiload run: the medians over its
    0.5 s samples (-v prints each; a median, so one sample in which another
    process took a CPU does not decide it, as cxlbench keeps only sub-windows in
    which its threads held their CPUs). A uniformly random chase over 64-byte
    lines (-s 64, one TLB group as large as the arena), its own 4 KiB pages."""
    m = args.working_set.lower().replace("ib", "")
    cmd = ["taskset", "-c", "0-1", binary, "-c", "chaseload", "-l", "stream-sum",
           "-t", "2", "-m", m, "-s", "64", "-T", m, "-a", "-v", "-n", str(args.samples)]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    chase = [float(x) for x in re.findall(r"sample_no=\d+\s+avg=([\d.]+)\(ns\)", text)]
    mibs = [float(x) for x in re.findall(r"Total\(MiB/s\)=([\d.]+)", text)]
    if not chase or not mibs:
        raise SystemExit(f"multiload printed no samples:\n{text}")
    return statistics.median(chase), statistics.median(mibs) * 2**20 / 1e9


def at_bandwidth(curve: dict[int, tuple[float, float]], gbps: float) -> float | None:
    """cxlbench's chase ns at `gbps` of load, linear between the two points of its
    curve (delay -> (ns, GB/s)) whose bandwidths bracket it; None outside the curve.
    A chase near saturation moves steeply with the load, so two tools whose loads
    differ are compared at the same load, not at the same setting."""
    pts = sorted((bw, ns) for ns, bw in curve.values())
    for (b0, n0), (b1, n1) in zip(pts, pts[1:]):
        if b0 <= gbps <= b1 and b1 > b0:
            return n0 + (n1 - n0) * (gbps - b0) / (b1 - b0)
    return None


def against_multiload(args) -> None:
    """Rounds of every multiload binary given and cxlbench's delays, interleaved (the
    tool that goes first alternates), then each binary's medians beside cxlbench's
    at every delay and at the binary's own load bandwidth."""
    out = Path(args.out)
    delays = [int(d) for d in args.delays.split(",")]
    binaries = args.multiload.split(",")
    rows = []
    print(f"{'round':>5} " + " ".join(f"{'ml' + str(b) + ' ns':>8} {'GB/s':>6}" for b in range(len(binaries)))
          + " " + " ".join(f"{'d' + str(d) + ' ns':>8} {'GB/s':>6}" for d in delays), flush=True)
    for i in range(1, args.rounds + 1):
        first_mc = i % 2 == 1
        mc = [multiload(args, b) for b in binaries] if first_mc else None
        cx = cxlbench_loaded(args, out, f"multiload-round{i}")
        if not first_mc:
            mc = [multiload(args, b) for b in binaries]
        rows.append((mc, cx))
        print(f"{i:>5} " + " ".join(f"{ns:8.1f} {bw:6.2f}" for ns, bw in mc) + " " +
              " ".join(f"{cx[d][0]:8.1f} {cx[d][1]:6.2f}" for d in delays), flush=True)
    med = statistics.median
    for k, binary in enumerate(binaries):
        mc_ns, mc_bw = med(r[0][k][0] for r in rows), med(r[0][k][1] for r in rows)
        print(f"\nml{k} = {binary}, median of {args.rounds} rounds: chase {mc_ns:.1f} ns, load {mc_bw:.2f} GB/s")
        for d in delays:
            ns, bw = med(r[1][d][0] for r in rows), med(r[1][d][1] for r in rows)
            print(f"  cxlbench delay {d}: chase {ns:.1f} ns ({ns / mc_ns:.2f}x), load {bw:.2f} GB/s "
                  f"({bw / mc_bw:.2f}x)")
        matched = [(at_bandwidth(r[1], r[0][k][1]), r[0][k][0]) for r in rows]
        ratios = [ns / mc for ns, mc in matched if ns is not None]
        per = ", ".join("outside" if ns is None else f"{ns / mc:.2f}" for ns, mc in matched)
        if ratios:
            print(f"  cxlbench's chase at ml{k}'s load, same round: {med(ratios):.2f}x ml{k}'s chase "
                  f"(rounds: {per})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tier", default="ddr0")
    ap.add_argument("--working-set", default="256MiB")
    ap.add_argument("--pages", default="4k,thp")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--sample-s", type=float, default=0.2)
    ap.add_argument("--out", default="validation-out/loaded")
    ap.add_argument("--multiload", help="multiload binaries, comma-separated (e.g. the shipped build and one "
                    "built -march=native, vector width alike): check loaded points against each")
    ap.add_argument("--delays", default="0,2,8", help="cxlbench's delays beside multiload")
    ap.add_argument("--samples", type=int, default=5, help="multiload's 0.5 s samples")
    args = ap.parse_args()
    if args.multiload:
        against_multiload(args)
        return
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
