"""The table `cxlbench run` ends with: per tier, idle latency at the largest
working set, peak read and triad bandwidth, each with its spread.

Figures are summarised per repetition first (a repetition is an independent
trial; its inner iterations are not independent), then the median and the
range across repetitions are shown.
"""
from __future__ import annotations

import pandas as pd

from cxlbench.units import format_count


def per_repetition(frame: pd.DataFrame) -> pd.DataFrame:
    """One value per (case, repetition): the median of that trial's inner iterations."""
    keys = ["case_id", "target", "initiator", "benchmark", "metric", "repetition"]
    extra = [c for c in ("page", "working_set_bytes", "kernel", "threads") if c in frame.columns]
    return frame.groupby(keys + extra, dropna=False, as_index=False)["value"].median()


def _spread(values: pd.Series) -> tuple[float, float, float]:
    return float(values.median()), float(values.min()), float(values.max())


def _latency(reps: pd.DataFrame, tier: str, page: str):
    sel = reps[(reps.benchmark == "latency") & (reps.target == tier) & (reps.page == page)]
    if sel.empty:
        return None
    largest = sel.working_set_bytes.max()
    return _spread(sel[sel.working_set_bytes == largest].value), int(largest)


def _peak_bandwidth(reps: pd.DataFrame, tier: str, kernel: str):
    sel = reps[(reps.benchmark == "bandwidth") & (reps.target == tier) & (reps.kernel == kernel)]
    if sel.empty:
        return None
    medians = sel.groupby("case_id").value.median()
    best = medians.idxmax()
    threads = int(sel[sel.case_id == best].threads.iloc[0])
    return _spread(sel[sel.case_id == best].value), threads


def _storage(frame: pd.DataFrame, tier: str) -> list[str]:
    """QD1 4 KiB random-read latency, the best random-read IOPS, sequential peaks."""
    sel = frame[(frame.benchmark == "storage") & (frame.target == tier)]
    if sel.empty:
        return []
    by_rep = lambda rows: rows.groupby(["case_id", "repetition"]).value.median()  # noqa: E731
    lines = []
    rand = sel[(sel.rw == "randread") & (sel.block_bytes == 4096)]
    p50 = rand[(rand.metric == "latency_ns") & (rand.qd == 1)]
    p50 = p50[p50.percentile == 50] if "percentile" in p50.columns else p50.iloc[0:0]
    if not p50.empty:
        lines.append(_line("4 KiB random read, QD1, p50 latency",
                           _fmt((_spread(by_rep(p50) / 1e3), 0), 'us', 1)))
    iops = rand[rand.metric == "iops"]
    if not iops.empty:
        best = iops.groupby("case_id").value.median().idxmax()
        rows = iops[iops.case_id == best]
        lines.append(_line(f"4 KiB random read, peak IOPS (QD{int(rows.qd.iloc[0])})",
                           _fmt((_spread(by_rep(rows)), 0), 'IO/s', 0)))
    for rw in ("read", "write"):
        seq = sel[(sel.rw == rw) & (sel.metric == "bandwidth_GBps")]
        if not seq.empty:
            best = seq.groupby("case_id").value.median().idxmax()
            rows = seq[seq.case_id == best]
            lines.append(_line(f"sequential {rw} peak ({int(rows.block_bytes.iloc[0]) >> 10} KiB, "
                               f"QD{int(rows.qd.iloc[0])})", _fmt((_spread(by_rep(rows)), 0), 'GB/s', 2)))
    return lines


def _training(frame: pd.DataFrame, tier: str) -> list[str]:
    """Tokens/s (over the steady steps) of each training placement whose optimizer
    state is on this tier, with its loss from the first to the last step; the CPU
    AdamW rate with the state here (NVMe: including the file I/O)."""
    sel = frame[(frame.benchmark == "training") & (frame.target == tier)]
    if sel.empty or "mode" not in sel.columns:
        return []
    lines = []
    for _, rows in sel[sel["mode"] == "train"].groupby("case_id", sort=False):
        order = "iteration" if "iteration" in rows.columns else "repetition"
        tok = rows[rows.metric == "tokens_per_s"].value
        loss = rows[rows.metric == "loss"].sort_values(order).value
        if tok.empty:
            continue
        first = rows.iloc[0]
        text = _fmt((_spread(tok), 0), "tokens/s", 0)
        if len(loss) > 1:
            text += f", loss {loss.iloc[0]:.2f} -> {loss.iloc[-1]:.2f}"
        lines.append(_line(f"training {first.get('config')}, engine {first.get('engine')} "
                           f"({first.get('compute')})", text))
    for _, row in sel[(sel["mode"] == "find_max") & (sel.metric == "max_params")].iterrows():
        lines.append(_line(f"largest config that fits, {row.get('engine')} ({row.get('compute')})",
                           f"{row.get('max_config')} ({format_count(row.value, ' ')} params)"))
    opt = sel[(sel["mode"] == "optimizer") & (sel.metric == "params_per_s")]
    if "impl" in opt.columns:
        opt = opt[opt["impl"].notna()]
    in_files = opt[opt["io"] == "nvme"] if "io" in opt.columns else opt.iloc[0:0]
    if not in_files.empty:
        opt, what = in_files, "in files, with I/O"
    else:
        opt = opt[opt["io"] != "memory"] if "io" in opt.columns else opt
        what = "state here"
    if not opt.empty:
        rates = opt.groupby(["case_id", "impl"]).value.median()
        case_id, impl = rates.idxmax()
        rows = opt[(opt.case_id == case_id) & (opt["impl"] == impl)]
        threads = rows["threads"].iloc[0] if "threads" in rows.columns else float("nan")
        who = "all CPUs" if pd.isna(threads) else f"{int(threads)} thread" + ("s" if threads != 1 else "")
        lines.append(_line(f"AdamW, {what} ({impl}, {who})",
                           _fmt((_spread(rows.value / 1e6), 0), "M params/s", 0)))
    return lines


def _line(label: str, value: str) -> str:
    return f"  {label:<44}: {value}"


def _fmt(stat, unit: str, digits: int) -> str:
    (med, lo, hi), _ = stat
    return f"{med:.{digits}f} {unit} [{lo:.{digits}f}-{hi:.{digits}f}]"


def tier_summary(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "no samples were measured"
    reps = per_repetition(frame)
    lines = []
    for tier in sorted(frame.target.unique()):
        lines.append(f"{tier}")
        for page in ("4k", "thp", "hugetlb-2m", "hugetlb-1g"):
            if "page" in reps.columns and (lat := _latency(reps, tier, page)):
                size = lat[1] >> 20
                lines.append(_line(f"latency, {size} MiB working set, {page} pages", _fmt(lat, 'ns', 1)))
        for kernel in ("read", "triad"):
            if "kernel" in reps.columns and (bw := _peak_bandwidth(reps, tier, kernel)):
                lines.append(_line(f"peak {kernel} bandwidth ({bw[1]} threads)", _fmt(bw, 'GB/s', 2)))
        if "rw" in frame.columns:
            lines.extend(_storage(frame, tier))
        lines.extend(_training(frame, tier))
        if lines[-1] == tier:
            lines.append("  (no summary figure for what ran here; the report has every figure)")
    over = "repetitions (training: steady steps)" if (frame.benchmark == "training").any() else "repetitions"
    lines.append(f"median [min-max] over {over}; GB/s = 10^9 bytes/s")
    return "\n".join(lines)
