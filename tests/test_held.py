"""A figure from a shared CPU says so where it is read (analysis.held): in the
terminal summary `cxlbench run` prints, in the report's tier table and in its
points tables, with the lowest share of the CPU its repetitions held."""
from __future__ import annotations

import numpy as np

from cxlbench.analysis.held import Held, by_point
from cxlbench.analysis.reduction import repetitions
from cxlbench.cli.tier_table import tier_summary
from cxlbench.report import render
from fakes.synthetic import case_result, make_run, write_run

KiB = 1024


def _latency(held: list[float]):
    """A latency case at one working set whose repetitions held their CPU as given."""
    values = {"latency_ns": np.array([2.1, 2.1, 2.2, 2.1, 2.0][:len(held)])}
    return case_result("latency", "ddr0", {"working_set_bytes": 16 * KiB, "page": "4k", "pattern": "random",
                                           "chains": 1, "line_bytes": 64}, values,
                       sample_params=lambda rep, i: {"cpu_held": held[rep]})


def test_a_figure_whose_cpu_was_shared_is_marked_in_the_summary_with_the_share_held():
    run = make_run([_latency([0.49, 0.51, 0.50, 0.97, 0.99])])
    text = tier_summary(run.samples, run.meta)
    line = next(l for l in text.splitlines() if " ns [" in l)
    assert "CPU shared: held 49% (3 of 5 repetitions < 90%)" in line


def test_a_clean_figure_carries_no_mark():
    run = make_run([_latency([0.97, 0.99, 0.95, 0.98, 1.0])])
    assert "CPU shared" not in tier_summary(run.samples, run.meta)


def test_a_run_that_never_recorded_cpu_held_is_not_marked():
    plain = case_result("latency", "ddr0", {"working_set_bytes": 16 * KiB, "page": "4k", "pattern": "random",
                                            "chains": 1, "line_bytes": 64}, {"latency_ns": np.ones(5)})
    run = make_run([plain])
    assert by_point(repetitions(run.samples)) == {}
    assert "CPU shared" not in tier_summary(run.samples, run.meta)


def test_the_report_marks_the_tier_table_and_the_points_table(tmp_path):
    path = write_run(tmp_path / "results", [_latency([0.5, 0.5, 0.5, 0.5, 0.5])])
    html = render([path], str(tmp_path / "r.html"))
    page = open(html).read()
    assert "⚠ CPU shared: held 50% (5 of 5 repetitions &lt; 90%)" in page      # the tier table
    assert "CPU held (least)" in page and "50% ⚠" in page                       # the points table


def test_a_clean_report_has_no_cpu_held_column(tmp_path):
    path = write_run(tmp_path / "results", [_latency([0.99] * 5)])
    page = open(render([path], str(tmp_path / "r.html"))).read()
    assert "CPU held (least)" not in page and "CPU shared" not in page


def test_the_mark_counts_only_repetitions_below_ninety_percent():
    assert Held(0.89, 1, 5).mark() == "CPU shared: held 89% (1 of 5 repetitions < 90%)"
    assert Held(0.95, 0, 5).mark() == "" and Held(0.95, 0, 5).cell() == "95%"
