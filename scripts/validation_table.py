"""Summarise scripts/validate.sh's (or, with --kernels, validate_kernels.sh's; with
--multichase, validate_multichase.sh's) output: medians over rounds of cxlbench and
of the reference tools, and their ratio.
Usage: python scripts/validation_table.py [--kernels | --multichase] OUT"""
import functools
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

import cxlbench
from cxlbench.analysis.reduction import per_repetition


def floats(path: Path, column: int = -1, when=lambda fields: True) -> list[float]:
    values = []
    for line in path.read_text().splitlines() if path.exists() else []:
        fields = line.split()
        if fields and when(fields):
            try:
                values.append(float(fields[column]))
            except ValueError:
                pass
    return values


def lat_mem_rd_1g(out: Path) -> list[float]:
    return [v for p in sorted(out.glob("lat_mem_rd-*.txt"))
            for v in floats(p, 1, lambda f: f[0] == "1024.00000")]


def where(frame, **equal):
    """The rows whose columns equal the given values."""
    for column, want in equal.items():
        frame = frame[frame[column] == want]
    return frame


def values(frame, **equal) -> list[float]:
    return list(where(frame, **equal).value)


def per_round(frame, keys: list[str]):
    """One figure per round (run) and keys: the median over its repetitions of each
    repetition's median over its iterations (the reduction every cxlbench figure uses)."""
    reps = per_repetition(frame, ["case_id", *keys])
    return reps.groupby(["run_id", *keys], dropna=False).value.median().reset_index()


def main(out: Path) -> None:
    skipped = out / "skipped.txt"
    for line in skipped.read_text().splitlines() if skipped.exists() else []:
        print(line)
    df = cxlbench.load(out / "results")
    # each family's headline figure only: the latency family also stores its tails
    # (p50 ... max, the floor's), which a median over every metric would mix in
    per_run = per_round(df[df.metric.isin(["latency_ns", "bandwidth_GBps"])], ["benchmark", "page", "threads"])

    def ours(benchmark, page, threads=None):
        return values(per_run, benchmark=benchmark, page=page,
                      **({} if threads is None else {"threads": threads}))

    rows = [
        ("latency, 1 GiB, 4 KiB pages (ns)", ours("latency", "4k"), lat_mem_rd_1g(out), "lat_mem_rd -t"),
        ("read, 1 thread (GB/s)", ours("bandwidth", "4k", 1),
         likwid_reads(out, 1), "likwid-bench load_avx"),
        ("read, 2 threads (GB/s)", ours("bandwidth", "4k", 2),
         likwid_reads(out, 2), "likwid-bench load_avx"),
        ("read, 1 thread (GB/s)", ours("bandwidth", "4k", 1),
         [v / 1e3 for v in floats(out / "bw_mem-P1.txt", 1)], "bw_mem rd"),
        ("read, 2 threads (GB/s)", ours("bandwidth", "4k", 2),
         [v / 1e3 for v in floats(out / "bw_mem-P2.txt", 1)], "bw_mem -P 2 rd"),
    ]
    table(rows)
    per_run["round"] = per_run.run_id.map(run_rounds(out)).astype(float)
    for threads in (1, 2):
        sandwich(out, per_run, threads)
    print(contiguity_line(df))
    thp = ours("latency", "thp")
    if thp:
        print(f"\nlatency, 1 GiB, THP (lat_mem_rd has none; multichase -H, below, does): median {statistics.median(thp):.3g} ns "
              f"over rounds {', '.join(f'{x:.3g}' for x in thp)}")


def run_rounds(out: Path) -> dict[str, int | None]:
    """run_id -> the round its label names (validate.sh's "r3-read", older "round3")."""
    rounds = {}
    for run in (out / "results").rglob("run.json"):
        meta = json.loads(run.read_text())
        found = re.match(r"r(?:ound)?(\d+)", meta.get("label", ""))
        rounds[meta["run_id"]] = int(found[1]) if found else None
    return rounds


def geomean(xs: list[float]) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def likwid_around(path: Path) -> dict[int, dict[str, float]]:
    """validate.sh's likwid-bench reads, GB/s: round -> {"before": x, "after": y}
    (lines ROUND WHEN MBYTE/S; a folder from before run K has the figure only, and
    gives none)."""
    around: dict[int, dict[str, float]] = {}
    for fields in (line.split() for line in (path.read_text().splitlines() if path.exists() else [])):
        if len(fields) == 3:
            around.setdefault(int(fields[0]), {})[fields[1]] = float(fields[2]) / 1e3
    return around


def likwid_reads(out: Path, threads: int) -> list[float]:
    """One likwid-bench figure per round: the geometric mean of its runs before and
    after ours where validate.sh sandwiched them, else each run's figure."""
    path = out / f"likwid-load-T{threads}.txt"
    around = likwid_around(path)
    if not around:
        return [v / 1e3 for v in floats(path)]
    return [geomean(list(pair.values())) for _, pair in sorted(around.items())]


def sandwich(out: Path, per_run, threads: int) -> None:
    """Each round's read against likwid-bench's runs just before and after it (their
    geometric mean): on a VM whose bandwidth moves between minutes, the ratio of
    medians over rounds minutes apart mixes the minutes in; this does not."""
    around = likwid_around(out / f"likwid-load-T{threads}.txt")
    if not around:
        return
    sel = where(per_run, benchmark="bandwidth", page="4k", threads=threads)
    ours: dict[int, list[float]] = {}
    for r, v in zip(sel["round"], sel.value):
        if np.isfinite(r):                                  # NaN: no round in its run's label
            ours.setdefault(int(r), []).append(v)
    paired = [r for r in sorted(ours) if len(ours[r]) == 1 and set(around.get(r, {})) == {"before", "after"}]
    ratios = [ours[r][0] / geomean(list(around[r].values())) for r in paired]
    unpaired = sorted((set(ours) | set(around)) - set(paired))
    if ratios:
        gm = geomean(ratios)
        print(f"read, {_threads(threads)}, ours ÷ likwid-bench's runs just before and after it, per round: "
              f"median {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}), "
              f"geometric mean {gm:.3f}, {len(ratios)} round{'s' if len(ratios) > 1 else ''}")
    if unpaired:
        print(f"  (rounds {', '.join(map(str, unpaired))} left unpaired: not one cxlbench read with one "
              "likwid-bench run before and one after)")


def contiguity_line(df) -> str:
    """Our read buffers' physical contiguity, which moves a one-thread 4 KiB read on a
    VM by up to a fifth (docs/validation.md, run L): the peers' is not recorded."""
    sel = where(df, benchmark="bandwidth", page="4k", metric="bandwidth_GBps")
    if sel.empty:
        return "read buffers' physical contiguity: no read in these runs"
    if "phys_contiguity" not in sel.columns or sel.phys_contiguity.isna().all():
        return "read buffers' physical contiguity: not recorded (frames hidden: run as root)"
    sel = sel.dropna(subset=["phys_contiguity"])
    parts = [f"{_threads(int(t))} median {g.phys_contiguity.median():.2f} ({g.phys_contiguity.min():.2f}-"
             f"{g.phys_contiguity.max():.2f})" for t, g in sel.groupby("threads")]
    return "read buffers' physical contiguity: " + "; ".join(parts)


def table(rows) -> None:
    """rows: (name, ours, theirs, tool[, ours as bytes over time]); the fifth, where
    given, adds the ratio of like statistics for tools that report one figure over all
    their passes."""
    agg = any(len(r) > 4 for r in rows)
    print("| figure | cxlbench median (rounds) | reference | reference median (rounds) | ratio |"
          + (" ratio, ours as bytes/time |" if agg else ""))
    print("|---|---|---|---|---|" + ("---|" if agg else ""))
    for name, a, b, tool, *rest in rows:
        if a and b:
            ma, mb = statistics.median(a), statistics.median(b)
            line = (f"| {name} | {ma:.3g} ({', '.join(f'{x:.3g}' for x in a)}) | {tool} | "
                    f"{mb:.3g} ({', '.join(f'{x:.3g}' for x in b)}) | {ma / mb:.3f} |")
            if agg:
                line += f" {statistics.median(rest[0]) / mb:.3f} |" if rest and rest[0] else " |"
            print(line)


def per_round_bytes_over_time(frame, keys: list[str]):
    """One figure per round and keys, as likwid-bench reports: each repetition's bytes
    over its passes' time (every pass moves the same bytes, so the harmonic mean of
    their rates), then the median over repetitions. cxlbench's own figure is the
    median pass, which a shared VM's slow passes move less."""
    frame = frame[np.isfinite(frame["value"].to_numpy(dtype=float)) & (frame["value"] > 0)]
    g = frame.groupby(["run_id", "case_id", "repetition", *keys], dropna=False).value
    reps = (g.count() / g.agg(lambda v: (1 / v).sum())).rename("value").reset_index()
    return reps.groupby(["run_id", *keys], dropna=False).value.median().reset_index()


# ours (kernel, nt) -> likwid-bench's kernels with the same loads, stores and bytes
LIKWID = {("write", False): ["store_avx"], ("copy", False): ["copy_avx"],
          ("triad", False): ["stream_avx", "stream"], ("write", True): ["store_mem_avx"],
          ("copy", True): ["copy_mem_avx"], ("triad", True): ["stream_mem_avx"]}
# write_penalty's line loop (op, store) beside likwid-bench's kernel of the same traffic
LINE_OPS = [("read", "regular", "load_avx"), ("write", "regular", "store_avx"),
            ("write", "nt", "store_mem_avx"), ("rmw", "regular", "update_avx")]


@functools.cache
def _old_folder(out: Path) -> None:
    """Said once per folder, not once per missing file."""
    print(f"(likwid-bench figures missing in {out}: a folder from before 2026-12-03 names its "
          "files likwid-KERNEL-TN.txt; rerun scripts/validate_kernels.sh)", file=sys.stderr)


def _likwid(out: Path, group: str, tool: str, threads: int) -> list[float]:
    path = out / f"likwid-{group}-{tool}-T{threads}.txt"
    if not path.exists():
        _old_folder(out)
    return [v / 1e3 for v in floats(path, 0)]


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n > 1 else ''}"


def kernels(out: Path) -> None:
    """Each round's cxlbench figure is the median of its repetitions (each the
    median of its iterations); likwid-bench's is its one run, run seconds after ours."""
    df = cxlbench.load(out / "results")
    bw = df[df.benchmark == "bandwidth"]
    keys = ["kernel", "nt", "threads"]
    med, agg = per_round(bw, keys), per_round_bytes_over_time(bw, keys)
    rows = []
    for (kernel, nt), tools in LIKWID.items():
        for threads in (1, 2):
            at = {"kernel": kernel, "nt": nt, "threads": threads}
            for tool in tools:
                rows.append((f"{kernel}{' nt' if nt else ''}, {_threads(threads)} (GB/s)", values(med, **at),
                             _likwid(out, kernel, tool, threads), f"likwid-bench {tool}", values(agg, **at)))
    lines = df[(df.benchmark == "write_penalty") & (df.metric == "bandwidth_GBps")]
    if not lines.empty:
        keys = ["op", "store", "threads"]
        med, agg = per_round(lines, keys), per_round_bytes_over_time(lines, keys)
        for op, store, tool in LINE_OPS:
            for threads in (1, 2):
                at = {"op": op, "store": store, "threads": threads}
                rows.append((f"lines {op}{' nt' if store == 'nt' else ''}, {_threads(threads)} (GB/s)",
                             values(med, **at), _likwid(out, "lines", tool, threads), f"likwid-bench {tool}",
                             values(agg, **at)))
    table(rows)


SIZES = {"16MiB": 16 << 20, "64MiB": 64 << 20, "256MiB": 256 << 20, "1GiB": 1 << 30}


def _size_name(nbytes: int) -> str:
    return next((k for k, v in SIZES.items() if v == nbytes), f"{nbytes >> 20}MiB")


def _span(xs) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def _frames_line(df, size: int, theirs: list[float]) -> str:
    """Both tools' physical contiguity at one 4 KiB working set: on a VM what backs
    the frames moves a large chase, so a ratio read on unlike frames says so."""
    ours = df[(df.working_set_bytes == size) & (df.page == "4k")]
    ours = ours.drop_duplicates(["run_id", "repetition"]).phys_contiguity.dropna().tolist() \
        if "phys_contiguity" in ours.columns else []
    return (f"(frames, share of pages on consecutive frames: cxlbench's buffers "
            f"{_span(ours) if ours else 'not recorded'}, multichase's arena {_span(theirs)})")


def multichase(out: Path) -> None:
    """One row per working set x page size: each round's cxlbench figure (the median
    of that pair's repetitions) beside multichase's (its mean of 5 half-second
    samples), the medians over rounds, their ratio, and the median of the per-round
    ratios (the two runs of a pair are back to back, so drift cancels more)."""
    cpus = set()
    for run in (out / "results").rglob("run.json"):
        meta = json.loads(run.read_text())
        cpus |= {c.get("info", {}).get("cpu") for c in meta.get("cases", []) if c.get("status") == "ok"}
    df = cxlbench.load(out / "results")
    df = df[(df.benchmark == "latency") & (df.metric == "latency_ns")]
    per_run = per_round(df, ["page", "working_set_bytes"])
    per_run["round"] = per_run.run_id.map(run_rounds(out)).astype(float)
    setup = (out / "setup.txt").read_text() if (out / "setup.txt").exists() else ""
    print(setup.strip())
    pinned = setup.split("pinned to CPU ")[1].split(";")[0] if "pinned to CPU " in setup else "?"
    print(f"cxlbench's latency worker ran on CPU {', '.join(str(c) for c in sorted(cpus, key=str))}; "
          f"multichase was pinned to CPU {pinned}"
          + ("" if {str(c) for c in cpus} == {pinned} else "  ** NOT THE SAME CPU **"))
    print()
    print("| working set | pages | cxlbench ns, median (rounds) | multichase ns, median (rounds) "
          "| ratio of medians | paired ratio (range) | rounds |")
    print("|---|---|---|---|---|---|---|")
    for size in sorted(per_run.working_set_bytes.unique()):
        for page in ("4k", "thp"):
            name = _size_name(int(size))
            ours = per_run[(per_run.working_set_bytes == size) & (per_run.page == page)]
            ours = dict(zip(ours["round"], ours.value))
            theirs, huge, frames = {}, [], []
            for fields in (f.split() for f in ((out / f"multichase-{name}-{page}.txt").read_text().splitlines()
                                               if (out / f"multichase-{name}-{page}.txt").exists() else [])):
                if len(fields) >= 2 and fields[1] not in ("", "nan"):
                    theirs[int(fields[0])] = float(fields[1])
                    if len(fields) > 2:
                        huge.append(int(fields[2]) * 1024 / size)
                    if len(fields) > 3 and re.fullmatch(r"[0-9.]+", fields[3]):
                        frames.append(float(fields[3]))
            rounds = sorted(set(ours) & set(theirs))
            if not rounds:
                continue
            a, b = [ours[r] for r in rounds], [theirs[r] for r in rounds]
            ratios = [x / y for x, y in zip(a, b)]
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"| {name} | {page} | {ma:.1f} ({', '.join(f'{x:.0f}' for x in a)}) | "
                  f"{mb:.1f} ({', '.join(f'{x:.0f}' for x in b)}) | **{ma / mb:.3f}** | "
                  f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) | {len(rounds)} |")
            if page == "thp" and huge and min(huge) < 0.9:
                print(f"  (multichase's THP coverage, largest seen per round: "
                      f"{', '.join(f'{h:.0%}' for h in huge)})")
            if page == "4k" and frames:
                print("  " + _frames_line(df, size, frames))
            if page == "4k" and huge and max(huge) > 0:
                print(f"  (multichase's 4k arena had huge pages: {', '.join(f'{h:.0%}' for h in huge)})")


if __name__ == "__main__":
    if sys.argv[1] == "--kernels":
        kernels(Path(sys.argv[2]))
    elif sys.argv[1] == "--multichase":
        multichase(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]))
