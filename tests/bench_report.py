"""Speed benchmarks (pytest-benchmark), not tests: run them with

    .venv/bin/python -m pytest tests/bench_report.py --benchmark-only

A run of 1,000,000 samples (two tiers; latency, bandwidth and loaded-latency
sweeps; 20 repetitions of 400 inner samples per point) is written once through
the real store. The report of it must render in under 30 s and 1 GiB of memory on
a 2-core machine: end to end in a fresh process (import, load, aggregate, plot,
write), with its peak RSS read from the kernel.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cxlbench import report
from cxlbench.results.store import load_run

from fakes import synthetic as syn

N_SAMPLES = 1_000_000
LIMIT_S = 30.0
LIMIT_RSS = 2**30


@pytest.fixture(scope="module")
def big_run(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    results = syn.suite_results(rng, repetitions=20, inner=400)
    n = sum(len(r.samples) for r in results)
    assert n >= N_SAMPLES
    return syn.write_run(tmp_path_factory.mktemp("big"), results, label="big")


def test_load_1m_samples(benchmark, big_run):
    run = benchmark.pedantic(load_run, args=(big_run,), rounds=3, iterations=1)
    assert len(run.samples) >= N_SAMPLES


def test_render_1m_samples(benchmark, big_run, tmp_path):
    out = tmp_path / "big.html"
    benchmark.pedantic(report.render, args=([big_run], out), rounds=2, iterations=1)
    benchmark.extra_info["html_bytes"] = out.stat().st_size
    assert benchmark.stats.stats.max < LIMIT_S
    assert out.stat().st_size < 4 * 2**20


def _render_in_fresh_process(run: Path, out: Path) -> tuple[float, int]:
    # VmHWM is this process's own peak; ru_maxrss would include the parent's pages
    # that a fork copied before exec.
    code = ("import re, sys, time; t = time.perf_counter(); from cxlbench import report; "
            "report.render([sys.argv[1]], sys.argv[2]); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1); "
            "print(time.perf_counter() - t, hwm)")
    proc = subprocess.run([sys.executable, "-c", code, str(run), str(out)], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).parent.parent)
    seconds, rss_kib = proc.stdout.split()
    return float(seconds), int(rss_kib) * 1024


def test_render_1m_samples_fresh_process_time_and_memory(benchmark, big_run, tmp_path):
    """What `cxlbench report RUN` costs: time and peak memory of a process that only renders."""
    results = []
    benchmark.pedantic(lambda: results.append(_render_in_fresh_process(big_run, tmp_path / "r.html")),
                       rounds=1, iterations=1)
    seconds, rss = results[-1]
    benchmark.extra_info.update(render_s=round(seconds, 2), peak_rss_MiB=round(rss / 2**20))
    print(f"\n1M-sample report: {seconds:.1f} s, peak RSS {rss / 2**20:.0f} MiB, "
          f"{(tmp_path / 'r.html').stat().st_size / 2**10:.0f} KiB")
    assert seconds < LIMIT_S
    assert rss < LIMIT_RSS
