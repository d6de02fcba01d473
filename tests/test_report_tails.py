"""The report's latency distributions: a CDF per tier and page size from the run's
histograms, p99 beside p50 in the tier summary, and whether each tail stands above
the machine's floor."""
import re

import numpy as np
import pytest

from cxlbench.report import render_run_html
from cxlbench.report.distributions import exceedance
from cxlbench.results.store import load_run
from tests.fakes.synthetic import case_result, machine, noisy, write_run

import pandas as pd


def hist(rep, kind, lower, counts, k=8, overhead=19.0):
    return {"repetition": rep, "kind": kind, "point": "", "k": k, "overhead_ns": overhead,
            "lower_ns": lower, "width_ns": [16] * len(lower), "count": counts}


def tail_run(tmp_path, pages=("4k", "thp")):
    rng = np.random.default_rng(3)
    results = []
    for page in pages:
        params = {"working_set_bytes": 1 << 30, "page": page, "pattern": "random", "chains": 1,
                  "line_bytes": 64}
        r = case_result("latency", "ddr0", params, {
            "latency_ns": noisy(rng, 140.0, 0.01, 3), "p50_ns": noisy(rng, 130.0, 0.01, 3),
            "p99_ns": noisy(rng, 210.0, 0.01, 3), "floor_p99_9_ns": noisy(rng, 150.0, 0.01, 3)},
            sample_params=lambda rep, i: {"page_bytes": 4096, "huge_coverage": 0.0})
        r.info = {"histograms": [h for rep in range(3) for h in (
            hist(rep, "chase", [1040, 1680, 8000], [900, 99, 1]),
            hist(rep, "floor", [1040, 1200], [995, 5]))]}
        results.append(r)
    m, tiers = machine(cxl=False)
    return write_run(tmp_path / "results", results, m=m, tiers=tiers, suite="tails")


def test_the_latency_section_leads_with_a_cdf_per_tier_and_page_size(tmp_path):
    html = render_run_html(load_run(tail_run(tmp_path)))
    assert "Latency distribution · ddr0 · 4k pages · 1GiB" in html
    assert "Latency distribution · ddr0 · thp pages · 1GiB" in html
    assert html.count("L1 floor (same block length)") == 2
    assert html.index("Latency distribution") < html.index("Latency · latency")


def test_the_tier_summary_puts_p99_beside_p50(tmp_path):
    html = render_run_html(load_run(tail_run(tmp_path, pages=("4k",))))
    summary = html[html.index('id="summary"'):html.index('id="family-latency"')]
    assert summary.index("p50 (ns)") < summary.index("p99 (ns)")


def test_the_terminal_says_the_tails_are_of_blocks_and_how_long_a_block_is(tmp_path):
    """A p99 of 8-load blocks' means is not a p99 of loads: one 1 µs stall moves its
    block by 125 ns a load. The labels and a legend line say which it is."""
    from cxlbench.cli.tier_table import tier_summary
    run = load_run(tail_run(tmp_path, pages=("4k",)))
    text = tier_summary(run.samples, run.meta)
    assert "p99 of k-load blocks, 1GiB working set, 4k pages" in text
    assert "blocks of k dependent loads (k = 8 on memory" in text
    plain = case_result("bandwidth", "ddr0", {"kernel": "read", "threads": 1}, {"bandwidth_GBps": [10.0, 10.1, 9.9]})
    m, tiers = machine(cxl=False)
    other = load_run(write_run(tmp_path / "bw", [plain], m=m, tiers=tiers))
    assert "k dependent loads" not in tier_summary(other.samples, other.meta)


def test_a_run_without_histograms_has_no_cdf(tmp_path):
    path = tail_run(tmp_path)
    (path / "histograms.parquet").unlink()
    assert "Latency distribution" not in render_run_html(load_run(path))


def test_the_tail_axis_is_the_share_of_blocks_slower_per_load():
    h = pd.DataFrame(hist(0, "chase", [1040, 1680, 8000], [900, 99, 1]))
    x, y = exceedance(h)
    assert list(x) == [(1047.5 - 19) / 8, (1687.5 - 19) / 8]        # the slowest bucket: nothing above
    assert list(y) == pytest.approx([0.1, 0.001])


def test_loaded_latency_draws_its_p99_curve_beside_the_mean(tmp_path):
    rng = np.random.default_rng(4)
    results = []
    for mix in ("read", "2:1"):
        for delay, bw in ((0, 12.0), (200, 4.0)):
            results.append(case_result("loaded_latency", "ddr0", {"mix": mix, "delay": delay}, {
                "latency_ns": noisy(rng, 300.0, 0.01, 3), "bandwidth_GBps": noisy(rng, bw, 0.01, 3),
                "p99_ns": noisy(rng, 500.0, 0.01, 3)}))
    m, tiers = machine(cxl=False)
    html = render_run_html(load_run(write_run(tmp_path / "results", results, m=m, tiers=tiers)))
    assert "Loaded latency · p99 of k-load blocks vs bandwidth" in html
    assert "Loaded latency · latency vs bandwidth" in html


def test_the_cdfs_time_axis_is_labelled_in_decades_of_ns():
    import re
    from cxlbench.report.plots import Chart, Series, render
    xs, ys = [130.0, 400.0, 2000.0, 9000.0, 30000.0], [1, 0.1, 0.01, 0.001, 1e-4]
    ticks = lambda **kw: re.findall(r"<text[^>]*>([^<]*)</text>", render(
        Chart("cdf", "ns per load", "share slower", [Series("ddr0", xs, ys)], logx=True, logy=True, **kw), "t"))
    assert ticks(logx_base=10)[:3] == ["100", "1,000", "10,000"]
    assert not any("e4" in t for t in ticks(logx_base=10))     # base 2 labelled 32 µs "3.2768e4"


def _tail_against_floor_run(tmp_path, p99, floor_p99, p99_9, floor_p99_9):
    rng = np.random.default_rng(4)
    params = {"working_set_bytes": 1 << 30, "page": "4k", "pattern": "random", "chains": 1, "line_bytes": 64}
    r = case_result("latency", "ddr0", params, {
        "latency_ns": noisy(rng, 140.0, 0.01, 5), "p50_ns": noisy(rng, 130.0, 0.01, 5),
        "p99_ns": noisy(rng, p99, 0.01, 5), "floor_p99_ns": noisy(rng, floor_p99, 0.01, 5),
        "p99_9_ns": noisy(rng, p99_9, 0.01, 5), "floor_p99_9_ns": noisy(rng, floor_p99_9, 0.01, 5)})
    m, tiers = machine(cxl=False)
    return load_run(write_run(tmp_path / "results", [r], m=m, tiers=tiers, suite="tails"))


def test_a_tail_says_whether_it_stands_above_the_machines_floor(tmp_path):
    from cxlbench.analysis.headlines import figures
    run = _tail_against_floor_run(tmp_path, p99=260.0, floor_p99=180.0, p99_9=900.0, floor_p99_9=1500.0)
    by = {f.metric: f for f in figures(run.samples, run.meta)}
    assert "the memory adds to the machine's tail" in by["p99_ns"].verdict
    assert "5 of 5 repetitions above" in by["p99_ns"].verdict
    assert re.search(r"median \+(7[6-9]|8[0-4]) ns", by["p99_ns"].verdict)        # 260 − 180, each ±1%
    assert "0 of 5 repetitions above" in by["p99_9_ns"].verdict
    assert "the machine's tail (clock, interrupts, hypervisor), not the memory's" in by["p99_9_ns"].verdict
    assert by["p50_ns"].verdict == "" and by["floor_p99_9_ns"].verdict == ""   # no floor of their own
    assert by["p99_ns"].verdict in by["p99_ns"].text()                            # the terminal line
    summary = render_run_html(run)
    summary = summary[summary.index('id="summary"'):summary.index('id="family-latency"')]
    assert "the memory adds to the machine&#39;s tail" in summary and "not the memory&#39;s" in summary


def test_a_tail_above_its_floor_in_too_few_repetitions_is_not_told_apart():
    from cxlbench.analysis.headlines import against_floor
    floor = pd.Series([100.0] * 5)
    mixed = against_floor(pd.Series([130.0, 140.0, 120.0, 90.0, 135.0]), floor, "ns")
    assert mixed.startswith("4 of 5 repetitions above its L1 floor") and "not told apart" in mixed
    assert "the memory adds" in against_floor(pd.Series([101.0, 102, 103, 104, 105]), floor, "ns")
    # under the floor in most but not enough repetitions: the test says nothing either way
    spread_floor = pd.Series([700.0, 2200, 7100, 4000, 600])
    paired = against_floor(pd.Series([550.0, 3800, 5800, 3900, 4000]), spread_floor, "ns")
    assert paired.startswith("2 of 5") and "not told apart" in paired
    assert "the machine's tail" in against_floor(pd.Series([90.0, 80, 95, 99, 70]), floor, "ns")
    assert against_floor(pd.Series([130.0] * 3), pd.Series([100.0] * 3, index=[5, 6, 7]), "ns") == ""


def test_a_floor_verdict_leaves_out_ties_and_missing_figures_and_says_when_too_few_remain():
    from cxlbench.analysis.headlines import against_floor
    floor = pd.Series([100.0, 100, 100, 100, 100, float("nan")])
    four = against_floor(pd.Series([900.0, 800, 850, 700, 100, 500]), floor, "ns")
    assert four.startswith("4 of 4") and "too few repetitions" in four and "nan" not in four
    assert "the memory adds" in against_floor(pd.Series([900.0] * 5 + [500.0]), pd.Series([100.0] * 6), "ns")
