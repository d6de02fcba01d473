#!/usr/bin/env python3
"""cxlbench's storage figures against fio on the same file, interleaved.

    .venv/bin/python scripts/validate_storage.py DIR [--rounds 7] [--size 1GiB] [--runtime 1]

One named test file (cxlbench's prefilled scratch file, removed at exit) serves
both tools. Each round measures every configuration once with each tool, in a
fresh process each (cxlbench: the storage family's own measure code, one
timed run after its warm-up of a quarter of the runtime; fio: O_DIRECT, the
same block size, queue depth and engine — psync at qd 1, libaio above — on
the same CPU, time_based for the same runtime after a ramp of the same
quarter). Who goes first alternates between rounds and between neighbouring
configurations, so drift on the machine hits both alike; the table compares the medians over rounds. cxlbench's
latency runs from when the I/O's slot was free to be refilled (just before the
submission at QD1) to the reaped completion, which is fio's total latency (lat_ns, asked for with --lat_percentiles=1), not its clat.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cxlbench.benchmarks import storage                        # noqa: E402
from cxlbench.results.schema import Case                      # noqa: E402
from cxlbench.storage import ScratchFile, inspect_directory    # noqa: E402
from cxlbench.storage.interrupts import completion_irqs, issuing_cpu  # noqa: E402
from cxlbench.units import parse_size                         # noqa: E402

# (rw, block, qd): the QD1 latency point, the IOPS curve's ends, sequential bandwidth
CONFIGS = [
    ("randread", 4096, 1), ("randread", 4096, 8), ("randread", 4096, 32),
    ("read", 128 << 10, 1), ("read", 1 << 20, 1), ("read", 1 << 20, 8), ("read", 4 << 20, 1),
    ("write", 128 << 10, 1), ("write", 1 << 20, 1), ("write", 1 << 20, 8), ("write", 4 << 20, 1),
]
REPS = 1                # one timed run per process, as fio does one


def engine(qd: int) -> str:
    return "psync" if qd == 1 else "libaio"


@dataclass
class OpenFile:
    """The named test file, opened again by a measuring process (it does not own it)."""
    fd: int
    size: int
    seed: int
    path: str


def ours(path: str, size: int, seed: int, rw: str, block: int, qd: int, runtime: float,
         cpu: int) -> dict:
    """One cxlbench measurement in a fresh process, as the runner's workers are: a
    process's I/O buffer lands on whatever pages it gets, as fio's does."""
    cmd = [sys.executable, __file__, "--measure", path, str(size), str(seed), rw, str(block),
           str(qd), str(runtime), "--cpu", str(cpu)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def measure(path: str, size: int, seed: int, rw: str, block: int, qd: int, runtime: float) -> dict:
    params = {"rw": rw, "block_bytes": block, "qd": qd, "engine": engine(qd), "io": "direct",
              "buffer_page": "4k", "file_bytes": size, "host_node": 0, "runtime_s": runtime}
    case = Case("storage", "cpu", "nvme0", "nvme", params, REPS, 1)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    try:
        samples = storage.measure_io(case, OpenFile(fd, size, seed, path), {}, {}, verify=False)
    finally:
        os.close(fd)

    def med(metric, pct=None):
        return statistics.median(s.value for s in samples if s.metric == metric
                                 and s.params.get("percentile") == pct)
    return {"iops": med("iops"), "GBps": med("bandwidth_GBps"),
            "p50_us": med("latency_ns", 50.0) / 1e3, "p99_us": med("latency_ns", 99.0) / 1e3,
            "p99.9_us": med("latency_ns", 99.9) / 1e3}


def fio(path: str, size: int, rw: str, block: int, qd: int, runtime: float, cpu: int) -> dict:
    cmd = ["fio", "--name=v", f"--filename={path}", f"--size={size}", f"--rw={rw}",
           f"--bs={block}", f"--iodepth={qd}", f"--ioengine={engine(qd)}", "--direct=1",
           f"--runtime={runtime}", "--time_based", f"--ramp_time={runtime / 4}", f"--cpus_allowed={cpu}",
           "--lat_percentiles=1", "--percentile_list=50:99:99.9", "--output-format=json"]
    if "write" in rw:
        # fio rewrites bytes of every write buffer before each write by default (to defeat
        # dedupe) and times that as part of the I/O; cxlbench writes its buffers unchanged.
        # On this VM that costs fio a third of its 4 MiB write bandwidth: compare like with like.
        cmd.append("--scramble_buffers=0")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    d = job["write" if "write" in rw else "read"]
    pct = d["lat_ns"]["percentile"]
    return {"iops": d["iops"], "GBps": d["bw_bytes"] / 1e9,
            "p50_us": pct["50.000000"] / 1e3, "p99_us": pct["99.000000"] / 1e3,
            "p99.9_us": pct["99.900000"] / 1e3, "mean_us": d["lat_ns"]["mean"] / 1e3,
            "cmd": " ".join(cmd)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", nargs="?")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--runtime", type=float, default=1.0, help="seconds per run, both tools")
    ap.add_argument("--cpu", type=int, help="the CPU both tools issue from (default: the one the "
                    "storage family chooses, which takes the disk's completion interrupts)")
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--only", action="append", metavar="RW/BLOCK/QD",
                    help="just these configurations, e.g. write/4194304/1 (repeatable)")
    ap.add_argument("--measure", nargs=7, metavar=("PATH", "SIZE", "SEED", "RW", "BLOCK", "QD",
                                                   "RUNTIME"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        os.sched_setaffinity(0, [args.cpu])
        path, size, seed, rw, block, qd, runtime = args.measure
        print(json.dumps(measure(path, int(size), int(seed), rw, int(block), int(qd), float(runtime))))
        return 0
    if not args.directory:
        ap.error("the directory to test is required")
    d = inspect_directory(args.directory)
    d.io_mode(allow_buffered=False)
    why = "as asked"
    if args.cpu is None:
        args.cpu, why = issuing_cpu(sorted(os.sched_getaffinity(0)), completion_irqs(d.device))
    os.sched_setaffinity(0, [args.cpu])
    print(f"# {d.path}: {d.fs_type} on {d.device} ({d.model or 'no model'}), nvme={d.is_nvme}")
    print(f"# both tools issue from CPU {args.cpu}: {why}")
    configs = [c for c in CONFIGS if not args.only or "/".join(map(str, c)) in args.only]
    runs: dict = {c: {"cxlbench": [], "fio": []} for c in configs}
    with ScratchFile.create(d.path, parse_size(args.size), direct=True, keep_name=True) as f:
        for r in range(args.rounds):
            for i, c in enumerate(configs):
                tools = [("cxlbench", lambda: ours(f.path, f.size, f.seed, *c, args.runtime, args.cpu)),
                         ("fio", lambda: fio(f.path, f.size, *c, args.runtime, args.cpu))]
                # Who goes first alternates between rounds and between neighbouring
                # configurations, so neither tool always follows the same workload.
                for name, run in tools[::-1] if (r + i) % 2 else tools:
                    runs[c][name].append(run())
            print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"medians of {args.rounds} interleaved runs of each tool, {args.runtime} s each; "
          f"paired: the median of the rounds' cxlbench/fio ratios\n")
    print("| rw | block | qd | engine | metric | cxlbench | fio | ratio of medians | paired |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (rw, block, qd), both in runs.items():
        if rw != "randread":
            metrics = ["GBps"]
        else:
            metrics = ["iops", "p50_us", "p99_us", "p99.9_us"] if qd == 1 else ["iops", "p50_us"]
        for m in metrics:
            a = statistics.median(x[m] for x in both["cxlbench"])
            b = statistics.median(x[m] for x in both["fio"])
            paired = statistics.median(x[m] / y[m] for x, y in zip(both["cxlbench"], both["fio"]))
            size = f"{block >> 10} KiB" if block < 1 << 20 else f"{block >> 20} MiB"
            print(f"| {rw} | {size} | {qd} | {engine(qd)} | {m} | {a:.4g} | {b:.4g} | "
                  f"{a / b:.3f} | {paired:.3f} |")
    print(f"\nfio command (last): {runs[configs[-1]]['fio'][-1]['cmd']}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({f"{rw}/{block}/{qd}": v for (rw, block, qd), v in runs.items()}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
