"""The device check: run the GPU suite here, render its report, print the table.

    python -m cxlbench.cli.devicecheck OUT [--suite gpu] [--nvme DIR] [--budget S]
    python -m cxlbench.cli.devicecheck --table RUN_DIR        # the table of a run
    python -m cxlbench.cli.devicecheck --dpu [--configs small] [--nvme DIR]
                                       # the offload engine with and without DPU

OUT receives results/ (the run) and report.html; the table is printed and kept
as OUT/table.md. Each GPU target is a row with its verdict:

  HBM copy           our copy kernel >= 95% of torch's device-to-device copy on
                     the same buffers, and of the published figure for the card
                     (H200: ~4.3 TB/s counting reads + writes)
  pinned H2D / D2H   ours >= 95% of torch's copy_ on the same pinned buffers
  L1 / L2 / HBM      chase latency in cycles within 10% of the published Hopper
                     figures (~34 / ~265-470 / ~650 cycles)

The --dpu check runs the offload engine's training cases with and without the
delayed parameter update (train.dpu) on the GPU, one short case each, and prints
each step beside the step-time model's composition for it ("overlapped" and
"dpu": the host's update hidden behind the GPU's forward and backward).

Exit status: 0 when the run completed with no failed case, 1 when a case
failed (a wrong result is a failure), 2 when no GPU case ran at all.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

#: published figures (REFERENCES.md), GB/s counting reads + writes for copy
PUBLISHED = {
    "H200": {"copy": 4300.0, "read": 3890.0, "triad": 3530.0, "h2d": 55.0, "d2h": 55.0},
    "H100": {"copy": 3000.0, "read": 2900.0, "triad": 2700.0, "h2d": 55.0, "d2h": 55.0},
}
#: Hopper single-thread chase (cycles): L1, L2 (near..far), HBM
HOPPER_CYCLES = {"L1": (34.0, 34.0), "L2": (265.0, 470.0), "HBM": (650.0, 650.0)}
BANDWIDTH_TARGET = 0.95
LATENCY_TOLERANCE = 0.10


# ---- reading a run -----------------------------------------------------------------------

def _medians(samples, benchmark: str, metric: str, keys: list[str]):
    from cxlbench.analysis.derive import medians
    if samples.empty or "benchmark" not in samples.columns:
        return None
    fam = samples[(samples["benchmark"] == benchmark) & (samples["metric"] == metric)]
    if fam.empty:
        return None
    return medians(fam, [k for k in keys if k in fam.columns])


def _pick(frame, **where):
    if frame is None:
        return frame
    for k, v in where.items():
        if k not in frame.columns:
            return frame.iloc[0:0]
        frame = frame[frame[k] == v]
    return frame


def _card(samples, meta: dict) -> str:
    for gpu in (meta.get("machine") or {}).get("gpus", []) or []:
        name = str(gpu.get("name", ""))
        for card in PUBLISHED:
            if card in name:
                return card
    return ""


def _fmt(v, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if abs(v) >= 100:
        text = f"{v:,.0f}"
    elif abs(v) >= 10:
        text = f"{v:.1f}"
    else:
        text = f"{v:.3g}"
    return f"{text} {unit}".strip()


def _verdict(ok: bool | None) -> str:
    return "—" if ok is None else ("meets" if ok else "SHORT")


def _depths(samples, best) -> str:
    """', N loads in flight' kept by the copy's repetitions at the row's size (the
    kernel tries two depths: which one each GPU keeps is the finding)."""
    if "loads_in_flight" not in samples.columns:
        return ""
    rows = samples[(samples["benchmark"] == "gpu_bandwidth") & (samples["op"] == "copy")
                   & (samples["size_bytes"] == best["size_bytes"]) & (samples["target"] == best["target"])]
    kept = sorted({int(d) for d in rows["loads_in_flight"].dropna()})
    return f", {' or '.join(map(str, kept))} loads in flight" if kept else ""


def bandwidth_rows(samples, card: str) -> list[list[str]]:
    """Ours vs torch on the same buffers, and vs the published figure."""
    med = _medians(samples, "gpu_bandwidth", "bandwidth_GBps",
                   ["initiator", "target", "op", "impl", "size_bytes", "host_memory", "page", "cache",
                    "bytes_counted"])
    rows = []
    if med is None:
        return rows
    published = PUBLISHED.get(card, {})
    pairs = [("copy", "memcpy_d2d", "HBM copy kernel vs torch D2D copy"),
             ("h2d", "h2d", "pinned H2D vs torch copy_"), ("d2h", "d2h", "pinned D2H vs torch copy_")]
    for ours_op, ref_op, label in pairs:
        ours = _pick(med, op=ours_op, impl="cuda")
        if "host_memory" in med.columns and ours_op != "copy":
            ours = ours[ours["host_memory"] == "pinned"]
        if "cache" in med.columns and ours_op == "copy":
            ours = ours[ours["cache"].isin(["cold"]) | ours["cache"].isna()]
        ref = _pick(med, op=ref_op, impl="torch")
        if ours_op != "copy" and "target" in med.columns and not ours.empty:
            ref = ref[ref["target"].isin(ours["target"])]
        if ours.empty:
            continue
        best = ours.loc[ours["value"].idxmax()]
        same = ref[(ref["size_bytes"] == best["size_bytes"]) & (ref["target"] == best["target"])] \
            if not ref.empty else ref
        if same.empty and not ref.empty:             # compare at the largest size both have
            common = sorted(set(ours["size_bytes"]) & set(ref["size_bytes"]))
            if common:
                best = ours[ours["size_bytes"] == common[-1]].sort_values("value").iloc[-1]
                same = ref[(ref["size_bytes"] == common[-1]) & (ref["target"] == best["target"])]
        ref_v = float(same["value"].max()) if not same.empty else None
        ratio = best["value"] / ref_v if ref_v else None
        where = f"{best['target']}, {_size(best['size_bytes'])}"
        if ours_op == "copy":
            where += _depths(samples, best)
        rows.append([label, where, _fmt(best["value"], "GB/s"), _fmt(ref_v, "GB/s"),
                     f"{ratio:.1%}" if ratio else "—",
                     _verdict(ratio >= BANDWIDTH_TARGET if ratio else None)])
        pub = published.get(ours_op)
        if pub:
            r = best["value"] / pub
            rows.append([f"{label.split(' vs ')[0]} vs published {card}", where, _fmt(best["value"], "GB/s"),
                         _fmt(pub, "GB/s"), f"{r:.1%}",
                         _verdict(r >= BANDWIDTH_TARGET) if ours_op == "copy" else "info"])
    for op in ("read", "write", "triad", "bidir", "sm_read", "sm_write"):
        sub = _pick(med, op=op, impl="cuda")
        if sub is None or sub.empty:
            continue
        for target, g in sub.groupby("target"):
            if "host_memory" in g.columns:
                g = g[g["host_memory"].isna() | (g["host_memory"] == "pinned")]
            if g.empty:
                continue
            best = g.loc[g["value"].idxmax()]
            pub = published.get(op) if target.startswith("hbm") else None
            rows.append([f"{op}", f"{target}, {_size(best['size_bytes'])}", _fmt(best["value"], "GB/s"),
                         _fmt(pub, "GB/s") if pub else "—",
                         f"{best['value'] / pub:.1%}" if pub else "—", "info"])
    pageable = _pick(med, impl="cuda")
    if pageable is not None and "host_memory" in pageable.columns:
        for (op, target, page), g in pageable[pageable["host_memory"] == "pageable"].groupby(
                ["op", "target", "page"]):
            pinned = med[(med["op"] == op) & (med["target"] == target) & (med["impl"] == "cuda")
                         & (med["host_memory"] == "pinned") & (med["size_bytes"].isin(g["size_bytes"]))]
            best = g.loc[g["value"].idxmax()]
            pv = float(pinned["value"].max()) if not pinned.empty else None
            rows.append([f"pageable {page} {op}", f"{target}, {_size(best['size_bytes'])}",
                         _fmt(best["value"], "GB/s"), _fmt(pv, "GB/s") + " pinned" if pv else "—",
                         f"{best['value'] / pv:.1%}" if pv else "—", "info"])
    return rows


def latency_rows(samples) -> list[list[str]]:
    """Chase cycles at the L1, L2 and HBM points vs the published Hopper figures; the
    host tiers in ns."""
    med = _medians(samples, "gpu_latency", "cycles",
                   ["initiator", "target", "tier_kind", "working_set_bytes", "stride_bytes", "pattern"])
    ns = _medians(samples, "gpu_latency", "latency_ns",
                  ["initiator", "target", "tier_kind", "working_set_bytes", "stride_bytes", "pattern"])
    rows = []
    if med is None:
        return rows
    hbm = med[(med["tier_kind"] == "hbm") & (med["stride_bytes"] == 64) & (med["pattern"] == "random")]
    levels = {"L1": hbm[hbm["working_set_bytes"] <= 32 << 10],
              "L2": hbm[(hbm["working_set_bytes"] >= 4 << 20) & (hbm["working_set_bytes"] <= 32 << 20)],
              "HBM": hbm[(hbm["working_set_bytes"] >= 256 << 20) & (hbm["working_set_bytes"] <= 1 << 30)]}
    for level, g in levels.items():
        if g.empty:
            continue
        # L1: the smallest set; L2: the largest that still fits; HBM: the smallest past the
        # L2 (the published figures are taken within the TLBs' reach)
        point = g.sort_values("working_set_bytes").iloc[-1 if level == "L2" else 0]
        lo, hi = HOPPER_CYCLES[level]
        v = float(point["value"])
        ok = lo * (1 - LATENCY_TOLERANCE) <= v <= hi * (1 + LATENCY_TOLERANCE)
        nsv = _value(ns, target=point["target"], working_set_bytes=point["working_set_bytes"],
                     stride_bytes=64, pattern="random")
        ref = f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}"
        rows.append([f"{level} latency (chase, 64 B random)", f"{point['target']}, "
                     f"{_size(point['working_set_bytes'])}", f"{v:.0f} cycles ({_fmt(nsv, 'ns')})",
                     f"{ref} cycles", f"{v / ((lo + hi) / 2):.0%}", _verdict(ok)])
    if ns is not None:
        host = ns[ns["tier_kind"].isin(["ddr", "cxl"])]
        for target, g in host.groupby("target"):
            point = g.sort_values("working_set_bytes").iloc[-1]
            rows.append([f"GPU → {target} latency (zero-copy chase)", f"{target}, "
                         f"{_size(point['working_set_bytes'])}", _fmt(float(point["value"]), "ns"),
                         "—", "—", "info"])
    return rows


def _value(frame, **where):
    sub = _pick(frame, **where)
    return float(sub["value"].iloc[0]) if sub is not None and not sub.empty else None


def crossovers(samples):
    """Per initiator × tier × data size × strategy: the K from which the strategy's
    time (preparation + K uses) is no more than reading in place K times."""
    import pandas as pd

    from cxlbench.analysis.derive import crossover
    med = _medians(samples, "gpu_zerocopy", "seconds",
                   ["initiator", "target", "data_bytes", "strategy", "uses"])
    cols = ["initiator", "target", "data_bytes", "strategy", "crossover_uses", "prep_s"]
    if med is None:
        return pd.DataFrame(columns=cols)
    rows = []
    for (ini, tgt, size), g in med.groupby(["initiator", "target", "data_bytes"]):
        base = g[g["strategy"] == "in_place"].set_index("uses")["value"].sort_index()
        if base.empty:
            continue
        for strat, sg in g[g["strategy"] != "in_place"].groupby("strategy"):
            sg = sg.set_index("uses")["value"].sort_index()
            common = base.index.intersection(sg.index)
            rows.append({"initiator": ini, "target": tgt, "data_bytes": int(size), "strategy": strat,
                         "crossover_uses": crossover(common, base[common], sg[common]),
                         "prep_s": float(sg.get(0, math.nan))})
    return pd.DataFrame(rows, columns=cols)


def zerocopy_rows(samples) -> list[list[str]]:
    rows = []
    for _, r in crossovers(samples).iterrows():
        k = r["crossover_uses"]
        text = "never (in place stays faster)" if k == math.inf else f"K ≥ {k:.1f}"
        rows.append([f"{r['strategy']} beats in-place", f"{r['target']}, {_size(r['data_bytes'])}",
                     text, f"prep {_fmt(r['prep_s'] * 1e3, 'ms')}", "—", "info"])
    return rows


def penalty_rows(samples) -> list[list[str]]:
    med = _medians(samples, "gpu_write_penalty", "ns_per_sector",
                   ["initiator", "target", "op", "write_bytes", "ecc"])
    rows = []
    if med is None:
        return rows
    for target, g in med.groupby("target"):
        def ns(op, wb=None):
            sub = g[g["op"] == op]
            if wb is not None:
                sub = sub[sub["write_bytes"] == wb]
            return float(sub["value"].iloc[0]) if not sub.empty else None
        read, write = ns("read"), ns("write")
        ecc = g["ecc"].dropna().iloc[0] if "ecc" in g.columns and g["ecc"].notna().any() else "?"
        if read and write:
            rows.append([f"write ÷ read per sector (ECC {ecc})", target, f"{write / read:.2f}×",
                         f"{_fmt(write, 'ns')} / {_fmt(read, 'ns')}", "—", "info"])
        for wb in (4, 8, 16):
            part = ns("partial", wb)
            if part and write:
                rows.append([f"partial {wb} B ÷ full write per sector", target, f"{part / write:.2f}×",
                             f"{_fmt(part, 'ns')} / {_fmt(write, 'ns')}", "—", "info"])
    return rows


def storage_rows(samples) -> list[list[str]]:
    med = _medians(samples, "gpu_storage", "bandwidth_GBps", ["target", "path", "chunk_bytes", "gds"])
    rows = []
    if med is None:
        return rows
    for _, r in med.iterrows():
        label = f"NVMe → HBM ({r['path']}" + (f", {r['gds']}" if r.get("gds") else "") + ")"
        rows.append([label, str(r["target"]), _fmt(float(r["value"]), "GB/s"), "—", "—", "info"])
    return rows


def _size(n) -> str:
    from cxlbench.units import format_size
    try:
        return format_size(int(n))
    except (TypeError, ValueError):
        return "?"


def table(run_dir: str | Path) -> tuple[str, dict]:
    """The device check's table (markdown) for a run, and counts for the exit status."""
    from cxlbench.results.store import load_run
    run = load_run(run_dir)
    samples, meta = run.samples, run.meta
    card = _card(samples, meta)
    cases = run.cases()
    gpu_cases = cases[cases["benchmark"].astype(str).str.startswith("gpu_")] if not cases.empty else cases
    counts = {s: int((gpu_cases["status"] == s).sum()) for s in ("ok", "skipped", "failed")}
    head = ["what", "where", "measured", "reference", "ratio", "verdict"]
    rows = bandwidth_rows(samples, card) + latency_rows(samples) + zerocopy_rows(samples) \
        + penalty_rows(samples) + storage_rows(samples)
    gpus = (meta.get("machine") or {}).get("gpus") or []
    name = ", ".join(str(g.get("name")) for g in gpus) or "no GPU"
    clocks = ""
    if not samples.empty and "sm_clock_mhz" in samples.columns:
        sm = samples["sm_clock_mhz"].dropna()
        if len(sm):
            clocks = f"; SM clock during cases {sm.min():.0f}–{sm.max():.0f} MHz (NVML)"
    extras = []
    for col, label in (("power_limit_w", "power limit {:.0f} W"), ("ecc", "ECC {}")):
        if col in samples.columns and samples[col].notna().any():
            extras.append(label.format(samples[col].dropna().iloc[0]))
    lines = [f"GPU: {name}{clocks}" + (f"; {', '.join(extras)}" if extras else ""),
             f"GPU cases: {counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed "
             f"(run {meta.get('run_id')}, {meta.get('status')})",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    failed = gpu_cases[gpu_cases["status"] == "failed"] if not gpu_cases.empty else gpu_cases
    for _, c in failed.head(10).iterrows():
        lines.append(f"FAILED {c['case_id']}: {c['reason']}")
    reasons = gpu_cases[gpu_cases["status"] == "skipped"]["reason"].value_counts() if len(gpu_cases) else []
    for reason, n in list(reasons.items())[:6]:
        lines.append(f"skipped {n}× : {reason}")
    return "\n".join(lines), counts


DPU_HEAD = ["config", "optimizer on", "DPU", "step measured (ms)", "model (ms)", "composition",
            "measured ÷ model", "fwd + bwd (ms)", "update (ms)", "update wait (ms)", "loss first→last"]


def dpu_row(case, samples, info: dict) -> list[str]:
    """One training case as a row of the DPU table: medians over its steady steps."""
    import statistics
    by: dict[str, list[float]] = {}
    for s in samples:
        if set(s.params) <= {"iteration"}:                    # the per-step samples
            by.setdefault(s.metric, []).append(s.value)
    ms = lambda *ks: sum(statistics.median(by[k]) for k in ks if by.get(k)) * 1e3  # noqa: E731
    pred = next(s for s in samples if s.metric == "predicted_step_s")
    step = ms("step_time_s")
    curve = info.get("loss_curve") or [math.nan]
    dpu = info.get("dpu")
    return [case.params["config"], case.target,
            f"on (warm-up {dpu['warmup_steps']}, staleness {dpu['staleness']})" if dpu else "off",
            f"{step:.4g}", f"{pred.value * 1e3:.4g}", str(pred.params.get("model_overlap")),
            f"{step / (pred.value * 1e3):.2f}", f"{ms('forward_s', 'backward_s'):.4g}",
            f"{ms('optimizer_s', 'nvme_read_s', 'nvme_write_s'):.4g}",
            f"{ms('update_wait_s'):.3g}" if dpu else "—", f"{curve[0]:.2f}→{curve[-1]:.2f}"]


def dpu_check(configs: list[str], optimizer_on: list[str], compute: str = "gpu", steps: int = 10,
              warmup: int = 3, nvme: str | None = None, budget: float | None = None):
    """The offload engine with and without the delayed parameter update, one case each
    per config and optimizer tier, in this process: yields the markdown table's lines
    as each case ends (a check stopped by its time limit keeps what it printed), then
    the cases that did not run and why."""
    import gc
    import time

    import torch

    from cxlbench.benchmarks import spec as family_spec
    from cxlbench.benchmarks import training
    from cxlbench.benchmarks.base import Skip
    from cxlbench.runner.run import build_env

    env = build_env("/", [f"nvme={nvme}"] if nvme else [], {})
    spec = family_spec.of(training, config=configs, engine=["offload"], optimizer_on=optimizer_on,
                          compute=[compute], steps=steps, warmup_steps=warmup, dpu=[False, True],
                          impl="auto")
    yield "| " + " | ".join(DPU_HEAD) + " |"
    yield "|" + "---|" * len(DPU_HEAD)
    notes, start = [], time.monotonic()
    for planned in training.plan(spec, env):
        case = planned.case
        if planned.skip:
            notes.append(f"- skipped {case.case_id}: {planned.skip}")
            continue
        if budget is not None and time.monotonic() - start + planned.estimate_s > budget:
            notes.append(f"- skipped {case.case_id}: time budget of {budget:.0f} s spent")
            continue
        info: dict = {}
        try:
            samples = training.measure(case, env, info)
        except Skip as e:
            notes.append(f"- skipped {case.case_id}: {e}")
            continue
        except Exception as e:                  # noqa: BLE001 - one case's failure, the table goes on
            notes.append(f"- FAILED {case.case_id}: {type(e).__name__}: {e}")
            continue
        finally:
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        yield "| " + " | ".join(dpu_row(case, samples, info)) + " |"
        notes += [f"- note ({'DPU' if info.get('dpu') else 'no DPU'}): {n}" for n in info.get("notes") or []]
    yield from notes


# Not cut from __doc__: python -OO strips docstrings, and the parser with them.
DESCRIPTION = "The device check: run the GPU suite here, render its report, print the table."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=DESCRIPTION)
    ap.add_argument("out", nargs="?", help="directory for the run, the report and the table")
    ap.add_argument("--suite", default="gpu")
    ap.add_argument("--nvme", help="a directory on an NVMe disk (declares the nvme tier)")
    ap.add_argument("--budget", type=float, help="time budget in seconds (overrides the suite's)")
    ap.add_argument("--table", metavar="RUN_DIR", help="only print the table of an existing run")
    ap.add_argument("--dpu", action="store_true",
                    help="only the offload engine with and without the delayed parameter update")
    ap.add_argument("--configs", default="small", help="--dpu: model configs (comma-separated)")
    ap.add_argument("--optimizer-on", default="ddr", help="--dpu: the optimizer state's tiers")
    ap.add_argument("--compute", default="gpu", help="--dpu: gpu, or cpu (the same path on the CPU)")
    ap.add_argument("--steps", type=int, default=10, help="--dpu: steady steps per case")
    args = ap.parse_args(argv)
    if args.dpu:
        delayed = 0
        for line in dpu_check(args.configs.split(","), args.optimizer_on.split(","), args.compute,
                              args.steps, nvme=args.nvme, budget=args.budget):
            print(line, flush=True)
            delayed += line.startswith("|") and "| on (" in line
        return 0 if delayed else 2
    if args.table:
        text, counts = table(args.table)
        print(text)
        return _status(counts)
    if not args.out:
        ap.error("give the output directory")
    from cxlbench.runner.run import RunConfig, run
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    decl = [f"nvme={args.nvme}"] if args.nvme else []
    outcome = run(RunConfig(args.suite, decl, "device-check", str(out / "results"),
                            command=["python", "-m", "cxlbench.cli.devicecheck", *(argv or sys.argv[1:])],
                            time_budget_s=args.budget))
    (out / "run_path").write_text(str(outcome.path) + "\n")
    try:
        from cxlbench.report import render
        print(f"report: {render([outcome.path], str(out / 'report.html'))}")
    except Exception as e:           # noqa: BLE001 - the table matters more than the page
        print(f"report not rendered: {type(e).__name__}: {e}")
    text, counts = table(outcome.path)
    (out / "table.md").write_text(text + "\n")
    print(text)
    return _status(counts)


def _status(counts: dict) -> int:
    if counts["failed"]:
        return 1
    return 0 if counts["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
