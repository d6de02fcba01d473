"""Synthetic runs with known distributions, written through the real store.

The gate's simulation tests, the report's speed benchmark and the docs' examples
use these: a machine record (as topology would write it), a suite shaped like
`quick` (latency over working sets × page sizes, bandwidth over kernels ×
threads, a loaded-latency curve, a skipped and a failed case), and noise of a
chosen size. Values are per repetition (lognormal around a model curve) with
optional inner samples and a per-repetition offset (the "process effect" that
pooling inner iterations hides).
"""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

import pandas as pd

from cxlbench.results.schema import (COMPLETE, CORE_COLUMNS, FAILED, OK, SCHEMA_VERSION, SKIPPED,
                                     Case, CaseResult, Sample, sample_rows)
from cxlbench.results.store import Run, RunWriter, new_run_id
from cxlbench.topology.model import (Cache, Cpu, EdacController, Environment, HugePool, Machine,
                                     Node, Tier)

KiB, MiB, GiB = 2**10, 2**20, 2**30


def machine(hostname: str = "synth-host", cpu_model: str = "Synthetic Xeon 8480 @ 2.0GHz",
            cxl: bool = True, kernel: str = "6.1.0-synthetic", thp: str = "madvise",
            governor: str | None = "performance", hypervisor: str | None = None,
            ddr_bytes: int = 64 * GiB, cxl_bytes: int = 128 * GiB) -> tuple[Machine, list[Tier]]:
    """A one-socket machine with ddr0 (node 0) and, optionally, a CXL node 2."""
    caches = [Cache(1, "Data", 48 * KiB, 64, [0]), Cache(1, "Instruction", 32 * KiB, 64, [0]),
              Cache(2, "Unified", 2 * MiB, 64, [0]), Cache(3, "Unified", 32 * MiB, 64, list(range(8)))]
    cpu = Cpu(cpu_model, "GenuineIntel", 1, 8, 16, True, ["avx2", "avx512f"], caches)
    nodes = {0: Node(0, list(range(16)), ddr_bytes, ddr_bytes // 2, {0: 10},
                     {2 * MiB: HugePool(2 * MiB, 512, 512), GiB: HugePool(GiB, 0, 0)}, [], 0)}
    tiers = [Tier("ddr0", "ddr", node=0, capacity_bytes=ddr_bytes, free_bytes=ddr_bytes // 2,
                  evidence="node 0 has CPUs")]
    if cxl:
        nodes[0].distances[2] = 21
        nodes[2] = Node(2, [], cxl_bytes, cxl_bytes - GiB, {0: 21, 2: 10}, {}, [], 1)
        tiers.append(Tier("cxl2", "cxl", node=2, capacity_bytes=cxl_bytes, free_bytes=cxl_bytes - GiB,
                          evidence="CXL region0 onlined as node 2"))
    env = Environment(thp_enabled=thp, thp_defrag="madvise", numa_balancing=0, demotion_enabled=False,
                      governor=governor, cpu_mhz=2000.0, smt_control="on", prefetcher_readable=False,
                      hypervisor=hypervisor, dmi_product="Synthetic Server", kernel=kernel)
    m = Machine(hostname, cpu, nodes, env, edac=[EdacController("mc0", "SECDED", 0, 0)],
                memory_tiers={0: [0], 1: [2]} if cxl else {0: [0]})
    return m, tiers


def every_family() -> dict[str, dict[str, Any]]:
    """Each registered family's self-description, as a real run records the ones it ran."""
    from cxlbench.benchmarks import FAMILIES, family
    from cxlbench.benchmarks.base import describe
    return {name: describe(family(name)) for name in FAMILIES}


def meta_for(m: Machine, tiers: list[Tier], label: str | None = None, suite: str = "quick",
             **extra: Any) -> dict[str, Any]:
    """run.json fields (before RunWriter adds its own) for a machine."""
    meta = {
        "label": label, "machine_name": m.hostname, "hostname": m.hostname,
        "command": ["cxlbench", "run", "--suite", suite] + (["--label", label] if label else []),
        "suite": {"name": suite, "repetitions": 5},
        "versions": {"cxlbench": "0.1.0", "python": "3.11.2", "numpy": np.__version__,
                     "torch": "2.13.0", "compiler": "gcc 12.2.0", "kernel": m.environment.kernel},
        "machine": asdict(m), "tiers": [asdict(t) for t in tiers],
        "environment": asdict(m.environment), "warnings": [],
        "families": every_family(),
    }
    meta.update(extra)
    return meta


# ------------------------------------------------------------------ model curves

def latency_model(ws: float, kind: str = "ddr", page: int = 4096) -> float:
    """ns per dependent load over a working set: L1, L2, L3, then memory (+TLB misses)."""
    mem = {"ddr": 110.0, "cxl": 260.0, "hbm": 600.0, "nvme": 40000.0}.get(kind, 150.0)
    levels = [(48 * KiB, 1.2), (2 * MiB, 4.5), (32 * MiB, 18.0)]
    lat = mem
    for size, ns in reversed(levels):
        w = 1 / (1 + math.exp((math.log2(ws) - math.log2(size)) * 3))   # smooth step
        lat = ns * w + lat * (1 - w)
    if page == 4096 and ws > 8 * MiB:
        lat *= 1 + 0.3 * min(1.0, math.log2(ws / (8 * MiB)) / 7)       # TLB misses
    return lat


def bandwidth_model(threads: int, kernel: str = "read", kind: str = "ddr") -> float:
    peak = {"ddr": 90.0, "cxl": 28.0, "hbm": 3800.0}.get(kind, 20.0)
    per_thread = {"ddr": 14.0, "cxl": 9.0, "hbm": 900.0}.get(kind, 5.0)
    factor = {"read": 1.0, "write": 0.62, "copy": 0.75, "triad": 0.8}.get(kernel, 0.7)
    return factor * peak * (1 - math.exp(-threads * per_thread / peak))


# ------------------------------------------------------------------ case results

def noisy(rng: np.random.Generator, center: float, noise: float, repetitions: int,
          inner: int = 1, process_noise: float = 0.0) -> np.ndarray:
    """Values of shape (repetitions, inner): lognormal around `center`; each
    repetition also gets its own offset of size `process_noise` (shared by its inner
    samples, as one process's placement is)."""
    offset = rng.normal(0.0, process_noise, (repetitions, 1)) if process_noise else 0.0
    return center * np.exp(offset + rng.normal(0.0, noise, (repetitions, inner)))


def case_result(benchmark: str, target: str, params: dict, values: dict[str, np.ndarray],
                tier_kind: str | None = None, initiator: str = "cpu:node0",
                sample_params: Callable[[int, int], dict] | None = None, seconds: float = 1.0,
                status: str = OK, reason: str = "") -> CaseResult:
    """A CaseResult from arrays of shape (repetitions,) or (repetitions, inner) per metric;
    `sample_params(rep, i)` gives what a sample found (page size obtained, its iteration)."""
    kind = tier_kind or "".join(ch for ch in target if ch.isalpha())
    case = Case(benchmark, initiator, target, kind, dict(params))
    samples = []
    for metric, arr in values.items():
        arr = np.atleast_2d(np.asarray(arr, dtype=float).T).T if np.ndim(arr) == 1 else np.asarray(arr)
        for rep in range(arr.shape[0]):
            samples.extend(Sample(metric, float(v), rep, sample_params(rep, i) if sample_params else {})
                           for i, v in enumerate(arr[rep]))
    return CaseResult(case, status, reason, samples, seconds)


def suite_results(rng: np.random.Generator, *, noise: float = 0.02, repetitions: int = 5,
                  inner: int = 1, process_noise: float = 0.0, tiers: Iterable[str] = ("ddr0", "cxl2"),
                  factor: Callable[[Case, str], float] | None = None,
                  working_sets: Iterable[int] | None = None, threads: Iterable[int] = (1, 2, 4, 8),
                  kernels: Iterable[str] = ("read", "write", "copy", "triad"),
                  pages: Iterable[str] = ("4k", "thp"), loaded: bool = True,
                  extras: bool = True) -> list[CaseResult]:
    """A `quick`-shaped suite, with the parameters the real benchmarks record:
    latency asks for a page policy (4k/thp) and each sample records the page size
    found; bandwidth keeps every timed iteration of a repetition (`iteration`).
    `factor(case, metric)` multiplies the model value (inject a regression with it)."""
    ws_list = list(working_sets or [2**k for k in range(13, 31, 1)])
    out: list[CaseResult] = []

    def vals(case_like: Case, metric: str, center: float) -> np.ndarray:
        f = factor(case_like, metric) if factor else 1.0
        return noisy(rng, center * f, noise, repetitions, inner, process_noise)

    for t in tiers:
        kind = "".join(ch for ch in t if ch.isalpha())
        for page in pages:
            found = 4096 if page == "4k" else 2 * MiB
            for ws in ws_list:
                p = {"working_set_bytes": ws, "page": page, "pattern": "random", "chains": 1,
                     "line_bytes": 64}
                c = Case("latency", "cpu:node0", t, kind, p)
                out.append(case_result(
                    "latency", t, p, {"latency_ns": vals(c, "latency_ns", latency_model(ws, kind, found))},
                    kind, sample_params=lambda rep, i, f=found: {
                        "page_bytes": f, "huge_coverage": 0.0 if f == 4096 else 0.98, "steps": 1 << 20}))
        for kernel in kernels:
            for th in threads:
                p = {"page": "4k", "kernel": kernel, "nt": False, "threads": th, "array_bytes": 1 * GiB,
                     "iterations": inner}
                c = Case("bandwidth", "cpu:node0", t, kind, p)
                out.append(case_result(
                    "bandwidth", t, p, {"bandwidth_GBps": vals(c, "bandwidth_GBps",
                                                               bandwidth_model(th, kernel, kind))},
                    kind, sample_params=lambda rep, i: {"page_bytes": 4096, "huge_coverage": 0.0,
                                                        "iteration": i}))
        if loaded:
            for delay in (None, 0, 50, 200, 1000, 5000, 20000):      # None: the idle point
                p = {"delay": delay or 0, "load_threads": 0 if delay is None else 8, "mix": "read", "page": "4k"}
                c = Case("loaded_latency", "cpu:node0", t, kind, p)
                load = 0.0 if delay is None else 1.0 / (1.0 + delay / 400.0)
                bw = bandwidth_model(8, "read", kind) * load
                lat = latency_model(GiB, kind) * (1 + 2.5 * load ** 3)
                out.append(case_result("loaded_latency", t, p, {
                    "latency_ns": vals(c, "latency_ns", lat),
                    "bandwidth_GBps": vals(c, "bandwidth_GBps", bw)}, kind))
    if extras:
        out.append(case_result("latency", "ddr0", {"working_set_bytes": 4 * GiB, "page": "1g",
                                                   "pattern": "random"}, {}, status=SKIPPED,
                               reason="no 1 GiB hugetlb pages reserved on node 0"))
        out.append(case_result("bandwidth", "hbm0", {"kernel": "read", "threads": 1}, {},
                               status=SKIPPED, reason="no GPU"))
        out.append(case_result("page_size", "ddr0", {"page": "2m"}, {}, status=FAILED,
                               reason="worker died: signal 9 (out of memory?)"))
    return out


def make_run(results: Iterable[CaseResult], *, m: Machine | None = None,
             tiers: list[Tier] | None = None, label: str | None = None, status: str = COMPLETE,
             run_id: str | None = None, **meta_extra: Any) -> Run:
    """The same run as `write_run` would store, built in memory (no files): the
    rows come from the store's own `sample_rows` and the case records have the
    fields RunWriter.add writes. For simulations that need thousands of runs."""
    if m is None:
        m, tiers = machine()
    results = list(results)
    run_id = run_id or new_run_id(label)
    meta = {"schema_version": SCHEMA_VERSION, **meta_for(m, tiers or [], label=label, **meta_extra),
            "run_id": run_id, "status": status, "started": "2026-01-01T00:00:00+00:00",
            "ended": "2026-01-01T00:05:00+00:00", "cases": []}
    rows: list[dict[str, Any]] = []
    for r in results:
        case_rows = sample_rows(run_id, r, meta["families"][r.case.benchmark]["metrics"])
        rows.extend(case_rows)
        c = r.case
        meta["cases"].append({"case_id": c.case_id, "benchmark": c.benchmark, "initiator": c.initiator,
                              "target": c.target, "tier_kind": c.tier_kind, "params": c.params,
                              "status": r.status, "reason": r.reason, "seconds": r.seconds,
                              "samples": len(case_rows), "info": r.info})
    frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=CORE_COLUMNS)
    core = [c for c in CORE_COLUMNS if c in frame.columns]
    frame = frame[core + sorted(c for c in frame.columns if c not in core)]
    return Run(Path(f"<memory>/{run_id}"), meta, frame)


def write_run(out_dir: str | Path, results: Iterable[CaseResult], *, m: Machine | None = None,
              tiers: list[Tier] | None = None, label: str | None = None, status: str = COMPLETE,
              **meta_extra: Any) -> Path:
    """Store results as a run under out_dir (results/<machine>/<run_id>) and return its path."""
    if m is None:
        m, tiers = machine()
    writer = RunWriter(out_dir, m.hostname, meta_for(m, tiers or [], label=label, **meta_extra))
    for r in results:
        writer.add(r)
    return writer.finish(status)
