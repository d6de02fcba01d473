"""pytest-benchmark export: the format that `pytest-benchmark compare` reads."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cxlbench.export import export_pytest_benchmark, stats

from fakes import synthetic as syn

SMALL = dict(tiers=("ddr0",), working_sets=[2**14, 2**24, 2**30], threads=(1, 2), kernels=("read",),
             pages=("4k",))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(0)
    run = syn.write_run(root / "results", syn.suite_results(rng, inner=3, **SMALL), label="a")
    out = export_pytest_benchmark(run, root / "0001_a.json")
    return root, run, out


def test_file_shape(exported):
    _, _, out = exported
    data = json.loads(out.read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(data)
    b = data["benchmarks"]
    assert len(b) == 3 + 2 + 12                       # latency points, bandwidth, loaded (6 × 2 metrics)
    first = b[0]
    assert {"group", "name", "fullname", "params", "param", "extra_info", "options", "stats"} <= set(first)
    assert first["stats"]["rounds"] == 5 and first["stats"]["iterations"] == 3
    assert first["extra_info"]["metric"] == "latency_ns" and first["extra_info"]["unit"] == "ns"


def test_units_keep_the_direction(exported):
    _, _, out = exported
    data = json.loads(out.read_text())
    for b in data["benchmarks"]:
        info, s = b["extra_info"], b["stats"]
        if info["metric"] == "latency_ns":
            assert s["median"] == pytest.approx(info["median"] * 1e-9)
            assert info["exported_as"] == "seconds"
        elif info["metric"] == "bandwidth_GBps":
            assert s["median"] == pytest.approx(1 / info["median"], rel=1e-9)   # seconds per GB
            assert s["ops"] == pytest.approx(1 / s["mean"])


def test_stats_match_pytest_benchmark():
    from pytest_benchmark.stats import Stats
    for data in ([3.0], [1.0, 2.0], [5.0, 1.0, 4.0, 2.0, 3.0], list(np.random.default_rng(1).random(11)),
                 list(np.random.default_rng(2).random(20))):
        ref = Stats()
        for v in data:
            ref.update(v)
        ours = stats(data)
        for field in Stats.fields:
            assert ours[field] == pytest.approx(getattr(ref, field)), field


def test_pytest_benchmark_compare_reads_it(exported):
    root, run, out = exported
    rng = np.random.default_rng(1)
    other = syn.write_run(root / "results", syn.suite_results(rng, **SMALL), label="b")
    out2 = export_pytest_benchmark(other, root / "0002_b.json")
    proc = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(out), str(out2),
                           "--group-by=group", "--columns=min,median,max,rounds"],
                          capture_output=True, text=True, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out_text = proc.stdout
    assert "latency[cpu:node0→ddr0" in out_text and "0001_a)" in out_text and "0002_b)" in out_text, out_text[:3000]
