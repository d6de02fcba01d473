"""A store as a lab's would be, for the published site's tests: two configurations
(cxl-a and cxl-b, two machines each, as a fleet's runs land), one machine with a
history of runs a few hours apart whose latency steps up part-way, and the fleet's
record beside the runs. Every run is synthetic (fakes.synthetic), written through
the real store."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from cxlbench.fleet.record import FleetRecord, Job, save
from tests.fakes.synthetic import machine, suite_results, write_run

START = pd.Timestamp("2026-11-01T00:00:00+00:00")
HISTORY = 10             # runs of the machine with a history
STEP_FROM = 5            # its latency is 15% higher from this run on


def add_run(store: Path, conf: str, host: str, when: pd.Timestamp, *, seed: int, slow: float = 1.0,
            cxl: bool = True, label: str | None = None, job: str | None = None) -> Path:
    """One small `ci`-shaped run of `host` under store/<conf>/<host>/, started at `when`
    (by the Slurm job `job`, as a fleet's node records it)."""
    rng = np.random.default_rng(seed)
    m, tiers = machine(hostname=host, cxl=cxl)
    factor = 1.0 if conf == "cxl-a" else 1.12     # cxl-b is the slower configuration

    def f(case, metric):
        scale = factor * slow
        return scale if metric == "latency_ns" else 1 / scale
    results = suite_results(rng, noise=0.01, repetitions=5, tiers=("ddr0", "cxl2") if cxl else ("ddr0",),
                            working_sets=[64 << 10, 256 << 20], pages=("4k",), kernels=("read",),
                            threads=(1, 4), loaded=False, extras=True, factor=f)
    path = write_run(store / conf, results, m=m, tiers=tiers, suite="ci", label=label,
                     configuration={"name": conf, "source": "label"},
                     scheduler={"SLURM_JOB_ID": job, "SLURMD_NODENAME": host} if job else {})
    meta = json.loads((path / "run.json").read_text())
    meta["started"] = when.isoformat()
    meta["ended"] = (when + pd.Timedelta(minutes=1)).isoformat()
    (path / "run.json").write_text(json.dumps(meta))
    return path


def lab_store(store: Path) -> Path:
    for i in range(HISTORY):
        add_run(store, "cxl-a", "a1", START + pd.Timedelta(hours=6 * i), seed=i,
                slow=1.15 if i >= STEP_FROM else 1.0, label=f"nightly-{i}")
    add_run(store, "cxl-a", "a2", START + pd.Timedelta(hours=30), seed=100, job="11")
    for n, host in enumerate(("b1", "b2")):
        add_run(store, "cxl-b", host, START + pd.Timedelta(hours=30, minutes=n), seed=200 + n, job=f"{12 + n}")
    save(FleetRecord("f1", "slurm", str(store), "ci", submitted="2026-11-02T06:00:00+00:00", jobs=[
        Job("a2", "cxl-a", "11", "COMPLETED", exit_code="0:0", started="t"),
        Job("b1", "cxl-b", "12", "COMPLETED", exit_code="0:0", started="t"),
        Job("b2", "cxl-b", "13", "COMPLETED", exit_code="0:0", started="t")]))
    return store
