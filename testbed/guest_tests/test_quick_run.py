"""A tiny `quick` run (testbed/guest/testbed-suite.toml): every CPU initiator x every
host tier gives latency and bandwidth samples, stored, and loadable with cxlbench.load."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import RESULTS, run_cli

SUITE = Path(__file__).resolve().parents[1] / "guest" / "testbed-suite.toml"
METRICS = {"latency": "latency_ns", "bandwidth": "bandwidth_GBps"}


@pytest.fixture(scope="module")
def quick_run(config):
    out = RESULTS / "runs"
    # --no-report: the HTML report needs jinja2 and matplotlib, which the guest image
    # leaves out (the report layer is tested on the host; here the store is the point)
    done = run_cli("run", "--suite", str(SUITE), "--out", str(out), "--label", f"testbed-{config}",
                   "--no-report", timeout=900)
    (RESULTS / "quick-run.log").write_text(done.stdout + done.stderr)
    from cxlbench.results.store import ResultsError, find_runs
    try:
        runs = find_runs(out)
    except ResultsError:
        runs = []
    return done, runs


def test_quick_run_completes(quick_run):
    done, runs = quick_run
    assert done.returncode == 0, f"cxlbench run exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert len(runs) == 1


def test_every_initiator_target_pair_has_latency_and_bandwidth(quick_run, machine, tiers):
    import cxlbench
    from cxlbench.results.store import load_run
    from cxlbench.topology import initiators
    _, runs = quick_run
    assert runs, "no run stored"
    run = load_run(runs[0])
    assert run.status == "complete"
    cases = run.cases()
    assert not (cases.status != "ok").any(), cases[cases.status != "ok"][["case_id", "status", "reason"]]
    df = cxlbench.load(runs[0])
    cpus = [i.name for i in initiators(machine) if i.kind == "cpu"]
    host = [t for t in tiers if t.startswith(("ddr", "cxl"))]
    missing = []
    for benchmark, metric in METRICS.items():
        for initiator in cpus:
            for target in host:
                rows = df[(df.benchmark == benchmark) & (df.metric == metric)
                          & (df.initiator == initiator) & (df.target == target)]
                if len(rows) < 2 or not all(math.isfinite(v) and v > 0 for v in rows.value):
                    missing.append(f"{benchmark} {initiator} -> {target}: {list(rows.value)}")
    assert not missing, "\n".join(missing)
    assert set(df[df.target.str.startswith("cxl")].tier_kind) <= {"cxl"}


def test_every_host_tier_shows_its_latency_distribution(quick_run, tiers):
    """The chase's distribution end to end on the guest's CXL node (TCG: the code
    path, not the figures): tail metrics in the samples, histograms in the side table."""
    import cxlbench
    _, runs = quick_run
    assert runs, "no run stored"
    df = cxlbench.load(runs[0])
    hists = cxlbench.histograms(runs[0])
    tails = ["p50_ns", "p90_ns", "p99_ns", "p99_9_ns", "p99_99_ns", "max_ns", "floor_p99_9_ns"]
    for target in [t for t in tiers if t.startswith(("ddr", "cxl"))]:
        lat = df[(df.benchmark == "latency") & (df.target == target)]
        assert set(tails) <= set(lat.metric), f"{target}: {sorted(set(lat.metric))}"
        mine = hists[(hists.benchmark == "latency") & (hists.target == target)]
        assert set(mine.kind) == {"chase", "floor"} and mine["count"].sum() > 0, target
