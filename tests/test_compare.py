"""Comparison across runs and machines, machine identity vs context, calibration."""
from __future__ import annotations

import numpy as np
import pytest

from cxlbench.analysis import calibrate, compare, format_comparison, profile
from cxlbench.analysis.compare import slots
from cxlbench.analysis.thresholds import load_thresholds

from fakes import synthetic as syn

SMALL = dict(working_sets=[2**k for k in range(14, 31, 4)], threads=(1, 4), loaded=False)


def machine_b(**kw):
    """Another machine whose CXL node is node 3 (cxl3), not node 2."""
    m, tiers = syn.machine(hostname="host-b", **kw)
    for t in tiers:
        if t.kind == "cxl":
            t.name, t.node = "cxl3", 3
    return m, tiers


def test_slots_by_kind_and_ordinal():
    m, tiers = machine_b()
    run = syn.make_run(syn.suite_results(np.random.default_rng(0), tiers=("ddr0", "cxl3"), **SMALL),
                       m=m, tiers=tiers)
    s = slots(run.meta)
    assert s["ddr0"] == "ddr[0]" and s["cxl3"] == "cxl[0]" and s["cpu:node0"] == "cpu[0]"


def test_cases_match_across_machines_by_tier_kind():
    rng = np.random.default_rng(1)
    a = syn.make_run(syn.suite_results(rng, **SMALL), label="A")
    m, tiers = machine_b()
    slower_cxl = lambda c, metric: 1.3 if c.tier_kind == "cxl" else 1.0    # noqa: E731
    b = syn.make_run(syn.suite_results(rng, tiers=("ddr0", "cxl3"), factor=slower_cxl, **SMALL),
                     m=m, tiers=tiers, label="B")
    cmp = compare([a, b])
    rows = cmp.rows
    assert cmp.unmatched.empty
    cxl = rows[rows["target_slot"] == "cxl[0]"]
    assert set(cxl["target_base"]) == {"cxl2"} and set(cxl["target"]) == {"cxl3"}
    lat = cxl[cxl["metric"] == "latency_ns"]
    bw = cxl[cxl["metric"] == "bandwidth_GBps"]
    assert (lat["verdict"] == "slower").all()          # ns ×1.3: slower
    assert (bw["verdict"] == "faster").all()           # GB/s ×1.3: faster, not slower
    assert rows.loc[rows["target_slot"] == "ddr[0]", "verdict"].isin(["same", "inconclusive"]).all()
    text = format_comparison(cmp)
    assert "latency · latency_ns (ns, lower is better)" in text
    assert "bandwidth · bandwidth_GBps (GB/s, higher is better)" in text
    assert "✗ slower" in text and "✓ faster" in text and "90% CI" in text
    assert "hostname" not in text            # info differences are not shown as machine differences
    assert "cxl2 ws=16KiB page=4k (cxl3)" in text


def test_a_case_one_of_three_runs_lacks_is_a_dash_in_that_runs_columns():
    """With a run in the middle lacking the CXL tier, its rows came out short and the
    table raised IndexError (or, had they not been short, put figures under another
    run's heading)."""
    rng = np.random.default_rng(2)
    a = syn.make_run(syn.suite_results(rng, **SMALL), label="A")
    m, tiers = syn.machine(cxl=False)
    b = syn.make_run(syn.suite_results(rng, tiers=("ddr0",), **SMALL), m=m, tiers=tiers, label="B")
    c = syn.make_run(syn.suite_results(rng, **SMALL), label="C")
    lines = format_comparison(compare([a, b, c])).splitlines()
    head = next(line for line in lines if line.startswith("case ") and " B " in line)
    row = next(line for line in lines if line.startswith("cxl2 ws=16KiB page=4k"))
    assert row[head.index(" B ") + 1:].lstrip().startswith("—")
    assert "%" not in row[:head.index(" C ")] and "%" in row[head.index(" C "):]     # C's own columns


def test_a_case_that_failed_part_way_is_not_compared_on_its_first_repetitions():
    """compare called it 37% slower on the two repetitions it finished, and listed it as
    not measured in the same table; the gate already counted it missing."""
    from dataclasses import replace
    rng = np.random.default_rng(2)
    a = syn.make_run(syn.suite_results(rng, **SMALL), label="A")
    results = syn.suite_results(rng, **SMALL)
    cut = [replace(r, status="failed", reason="worker died: signal 9") if r.case.benchmark == "latency" else r
           for r in results]
    cmp = compare([a, syn.make_run(cut, label="B")])
    assert "latency" not in set(cmp.rows["benchmark"]) and "bandwidth" in set(cmp.rows["benchmark"])
    assert (cmp.unmatched["benchmark"] == "latency").any() and (cmp.not_measured["status"] == "failed").any()


def test_a_change_outside_its_own_interval_says_the_repetitions_are_skewed():
    """The change shown is the ratio of medians, the interval the ratio of geometric
    means: "+4.8% [+5.0%, +9.6%] slower" stood with no word of why."""
    p = {"working_set_bytes": 2**30, "page": "4k", "pattern": "random", "chains": 1, "line_bytes": 64}

    def run(values, label):
        return syn.make_run([syn.case_result("latency", "ddr0", p, {"latency_ns": np.array(values)})], label=label)
    skewed = compare([run([102.3, 100.6, 99.1, 102.4, 102.4], "A"), run([111.4, 111.0, 107.1, 107.2, 107.0], "B")])
    (row,) = skewed.rows.to_dict("records")
    assert not row["lo"] <= row["ratio"] <= row["hi"] and "skewed repetitions" in row["note"]
    assert "skewed repetitions" in format_comparison(skewed)
    even = compare([run([100.0, 101.0, 99.0, 102.0, 98.0], "A"), run([110.0, 111.1, 108.9, 112.2, 107.8], "B")])
    assert even.rows["note"].iloc[0] == ""


def test_unmatched_cases_are_listed():
    rng = np.random.default_rng(2)
    a = syn.make_run(syn.suite_results(rng, **SMALL), label="A")
    m, tiers = syn.machine(cxl=False)
    b = syn.make_run(syn.suite_results(rng, tiers=("ddr0",), **SMALL), m=m, tiers=tiers, label="B")
    cmp = compare([a, b])
    assert len(cmp.unmatched) > 0
    assert set(cmp.unmatched["target"]) == {"cxl2"}
    assert cmp.unmatched["why"].str.contains("in A, not in B").all()
    text = format_comparison(cmp)
    assert "Unmatched" in text and "Different machines (identity)" in text and "tiers" in text


def test_path_parameters_do_not_prevent_a_match():
    rng = np.random.default_rng(3)
    mk = lambda path: [syn.case_result("storage", "nvme0", {"path": path, "queue_depth": 1},  # noqa: E731
                                       {"latency_ns": syn.noisy(rng, 40000.0, 0.02, 5)}, tier_kind="nvme")]
    cmp = compare([syn.make_run(mk("/mnt/a"), label="A"), syn.make_run(mk("/scratch/b"), label="B")])
    assert len(cmp.rows) == 1 and cmp.unmatched.empty


def test_three_runs_are_compared_with_the_first():
    rng = np.random.default_rng(4)
    runs = [syn.make_run(syn.suite_results(rng, tiers=("ddr0",), factor=lambda c, m, f=f: f, **SMALL),
                         label=name) for name, f in (("base", 1.0), ("x", 1.0), ("y", 1.25))]
    cmp = compare(runs)
    assert set(cmp.rows["run"]) == {1, 2}
    y = cmp.rows[cmp.rows["run"] == 2]
    assert y["ratio"].between(1.15, 1.35).all()
    assert cmp.counts(2)["slower"] + cmp.counts(2)["faster"] == len(y)
    text = format_comparison(cmp, limit=3)
    assert "base" in text and "x" in text and "y" in text and "more" in text


def test_identity_context_and_info():
    rng = np.random.default_rng(5)
    base = syn.make_run([], label="a")
    p = profile(base.meta)
    assert p.identity["cpu_model"].startswith("Synthetic Xeon") and p.identity["kernel"] == "6.1.0-synthetic"
    assert p.identity["tiers"] == [("cxl", 128.0), ("ddr", 64.0)]
    assert p.context["thp_enabled"] == "madvise" and p.context["governor"] == "performance"
    assert p.info["hostname"] == "synth-host"
    m, tiers = syn.machine(hostname="elsewhere", governor="powersave", ddr_bytes=int(64 * 2**30 * 0.98))
    other = syn.make_run([], m=m, tiers=tiers)
    cmp = compare([base, other])
    assert not cmp.identity_differences
    assert [d.field for d in cmp.context_differences] == ["governor"]
    assert any(d.field == "hostname" and d.kind == "info" for d in cmp.differences)
    del rng


def test_thresholds_file(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('default = "3%"\n[benchmarks]\nlatency = 0.2\n[benchmarks.training]\ntokens_per_s = 0.04\n'
                 'default = 0.07\n')
    t = load_thresholds(f)
    assert t.for_case("latency", "latency_ns") == 0.2
    assert t.for_case("training", "tokens_per_s") == 0.04 and t.for_case("training", "loss") == 0.07
    assert t.for_case("bandwidth", "bandwidth_GBps") == 0.03
    assert load_thresholds(f, "10%").for_case("bandwidth", "bandwidth_GBps") == 0.10
    assert load_thresholds(None).default == 0.05
    f.write_text("defualt = 0.1\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_thresholds(f)


def _vm_pair(factor, hypervisor="kvm"):
    rng = np.random.default_rng(11)
    m, tiers = syn.machine(hypervisor=hypervisor)
    slow = lambda c, metric: factor          # noqa: E731
    a = syn.make_run(syn.suite_results(rng, **SMALL), m=m, tiers=tiers, label="A")
    b = syn.make_run(syn.suite_results(rng, factor=slow, **SMALL), m=m, tiers=tiers, label="B")
    return a, b


def test_on_a_vm_without_measured_noise_whole_run_drift_is_assumed_and_said(tmp_path):
    a, b = _vm_pair(1.10)                      # 10% everywhere: what a VM's runs drift by
    cmp = compare([a, b])
    assert cmp.thresholds.noise == {"default": 0.05}
    assert "assumed: a virtual machine (kvm)" in format_comparison(cmp)
    lat = cmp.rows[cmp.rows["metric"] == "latency_ns"]
    assert not lat["verdict"].isin(["slower", "faster"]).any()
    big_a, big_b = _vm_pair(1.6)               # a change no drift explains is still caught
    rows = compare([big_a, big_b]).rows
    assert (rows[rows["metric"] == "latency_ns"]["verdict"] == "slower").all()
    # measured noise (a calibrated file) replaces the assumption; bare metal assumes nothing
    f = tmp_path / "t.toml"
    f.write_text("default = 0.05\n[noise]\nlatency = 0.01\n")
    assert compare([a, b], thresholds_file=f).thresholds.noise == {"latency": 0.01}
    bare_a, bare_b = _vm_pair(1.10, hypervisor=None)
    assert compare([bare_a, bare_b]).thresholds.noise == {}
    from cxlbench.analysis.gate import gate
    assert gate(a, b).thresholds.noise == {"default": 0.05}      # the gate assumes it too
    assert gate(bare_a, bare_b).thresholds.noise == {}


# ------------------------------------------------------------------ calibrate

def test_calibrate_refuses_a_run_with_no_positive_figure_instead_of_writing_thresholds_from_it():
    from cxlbench.results.store import ResultsError
    rng = np.random.default_rng(6)
    a = syn.make_run(syn.suite_results(rng, **SMALL), label="a1")
    b = syn.make_run(syn.suite_results(rng, **SMALL), label="a2")
    b.samples["value"] = 0.0
    with pytest.raises(ResultsError, match="holds no positive figure"):
        calibrate(a, b)


def test_calibrate_on_an_aa_pair():
    rng = np.random.default_rng(6)
    a = syn.make_run(syn.suite_results(rng, **SMALL), label="a1")
    b = syn.make_run(syn.suite_results(rng, **SMALL), label="a2")
    cal = calibrate(a, b)
    assert cal.false_positive_rate == 0.0
    assert cal.expected_false_positive_rate < 0.01
    assert len(cal.cases) == len(cal.comparison.rows)
    assert (cal.cases["rcv"] > 0.005).all() and (cal.cases["rcv"] < 0.05).all()   # 2% noise
    assert set(cal.benchmarks["benchmark"]) == {"latency", "bandwidth"}
    text = cal.format()
    assert "False positives: 0.0%" in text and "run-to-run noise" in text
    assert (cal.benchmarks["run_noise"] < 0.02).all()           # nothing beyond the repetitions
    import tomllib
    data = tomllib.loads(cal.thresholds_toml())
    assert data["default"] == 0.05 and set(data["noise"]) == {"latency", "bandwidth"}
    assert cal.to_dict()["false_positive_rate"] == 0.0


def test_calibrate_counts_a_whole_run_that_drifted_and_the_gate_then_holds_an_aa_pair(tmp_path):
    """A pair whose second run read every latency case 8% slower: calibrate measured the
    spread around the ratios' median, wrote latency noise 0, and the gate with that file
    failed the next such A/A pair on 26 cases."""
    from cxlbench.analysis import gate
    m, tiers = syn.machine(hypervisor="kvm")
    kw = dict(working_sets=[2**k for k in range(14, 31, 2)], loaded=False)
    drift = lambda case, metric: 1.08 if case.benchmark == "latency" else 1.0      # noqa: E731

    def pair(seed):
        return [syn.make_run(syn.suite_results(np.random.default_rng(seed + i), factor=f, **kw), m=m, tiers=tiers,
                             label=f"r{seed + i}") for i, f in enumerate((None, drift))]
    cal = calibrate(*pair(1))
    latency = cal.benchmarks.set_index("benchmark").loc["latency"]
    assert latency["run_noise"] > 0.03
    f = tmp_path / "calibrated.toml"
    f.write_text(cal.thresholds_toml())
    assert load_thresholds(f).noise_for("latency") > 0.03
    assert (gate(*pair(3), thresholds_file=f).rows["verdict"] == "slower").sum() == 0


def test_calibrate_sees_run_to_run_noise_that_repetitions_hide(tmp_path):
    """Each run gets its own offset per case (σ = 15%, page placement): repetitions
    (1% noise) don't see it, the A/A pair does. Calibrate measures it, and with the
    file it writes, gates on fresh A/A pairs stop failing."""
    from cxlbench.analysis import gate
    rng = np.random.default_rng(7)
    kw = dict(working_sets=[2**k for k in range(14, 31, 2)], threads=(1, 2, 4), loaded=False)

    def run(label):
        shift = {}
        def factor(case, metric):
            return shift.setdefault(case.case_id, float(np.exp(rng.normal(0, 0.15))))
        return syn.make_run(syn.suite_results(rng, noise=0.01, factor=factor, **kw), label=label)

    cal = calibrate(run("a1"), run("a2"))
    assert cal.false_change_rate > 0.3
    assert cal.false_change_rate > 5 * cal.expected_false_positive_rate
    noise = cal.benchmarks.set_index("benchmark")
    assert noise["run_noise"].between(0.08, 0.25).all()
    assert (noise["suggested_noise"] > noise["run_noise"]).all()
    f = tmp_path / "calibrated.toml"
    f.write_text(cal.thresholds_toml())
    assert load_thresholds(f).noise_for("latency") == pytest.approx(noise.loc["latency", "suggested_noise"],
                                                                   rel=0.1)
    before = after = 0.0
    for _ in range(3):
        a, b = run("b1"), run("b2")
        before += (gate(a, b).rows["verdict"] == "slower").mean() / 3
        after += (gate(a, b, thresholds_file=f).rows["verdict"] == "slower").mean() / 3
    assert before > 0.25 and after <= 0.05


def _latency_run(rng, center, held, label, contiguity=None, metric="latency_ns"):
    values = {metric: syn.noisy(rng, center, 0.01, 5)}
    res = syn.case_result("latency", "ddr0", {"working_set_bytes": 2**30, "page": "4k"}, values,
                          sample_params=lambda rep, i: {"cpu_held": held[rep],
                                                        "phys_contiguity": (contiguity or [None] * 5)[rep]})
    return syn.make_run([res], label=label)


def test_a_change_between_runs_whose_buffers_differ_in_contiguity_says_so_and_stands():
    rng = np.random.default_rng(8)
    quiet = [1.0] * 5
    base = _latency_run(rng, 100.0, quiet, "A", [0.95, 0.93, 0.94, 0.96, 0.94])
    alike = _latency_run(rng, 120.0, quiet, "B", [0.9, 0.92, 0.91, 0.93, 0.9])
    scattered = _latency_run(rng, 120.0, quiet, "C", [0.77, 0.8, 0.75, 0.78, 0.2])
    unknown = _latency_run(rng, 120.0, quiet, "D")
    row = compare([base, scattered]).rows.iloc[0]
    assert row["verdict"] == "slower"                      # the verdict stands: a note, not a discount
    assert "contiguity (0.94 → 0.77" in row["note"]         # medians: one scattered repetition does not set it
    assert "contiguity" in format_comparison(compare([base, scattered]))
    assert compare([base, alike]).rows.iloc[0]["note"] == ""
    # hidden frames (a run not as root) against seen ones: the difference cannot be ruled out
    assert "frames hidden" in compare([base, unknown]).rows.iloc[0]["note"]
    assert compare([unknown, _latency_run(rng, 140.0, quiet, "U")]).rows.iloc[0]["note"] == ""
    assert compare([base, _latency_run(rng, 100.0, quiet, "E", [0.5] * 5)]).rows.iloc[0]["verdict"] == "same"
    assert compare([base, _latency_run(rng, 100.0, quiet, "E", [0.5] * 5)]).rows.iloc[0]["note"] == ""
    # the L1 floor's chase: its buffer's frames do not move it, so no note however they differ
    floors = [_latency_run(rng, c, quiet, n, k, metric="floor_p99_ns")
              for c, n, k in ((100.0, "F", [0.95] * 5), (120.0, "G", [0.2] * 5))]
    row = compare(floors).rows.iloc[0]
    assert row["verdict"] == "slower" and row["note"] == ""


def test_interference_in_either_run_withholds_a_verdict():
    rng = np.random.default_rng(7)
    quiet = [1.0, 0.99, 1.0, 0.98, 1.0]
    base = _latency_run(rng, 100.0, quiet, "A")
    slower_quiet = _latency_run(rng, 130.0, quiet, "B")
    slower_busy = _latency_run(rng, 130.0, [1.0, 0.99, 0.62, 0.98, 1.0], "C")
    assert compare([base, slower_quiet]).rows["verdict"].tolist() == ["slower"]
    row = compare([base, slower_busy]).rows.iloc[0]
    assert row["verdict"] == "inconclusive"
    assert "interference" in row["note"] and "62.0%" in row["note"] and "current" in row["note"]
    text = format_comparison(compare([base, slower_busy]))
    assert "? inconclusive*" in text and "* ddr0" in text and "held their CPUs 62.0%" in text
    # the baseline's interference counts as much as the current run's
    assert compare([slower_busy, base]).rows["verdict"].tolist() == ["inconclusive"]


def test_a_repetition_counts_once_in_a_points_contiguity_however_many_metrics_it_gave():
    import pandas as pd
    from cxlbench.analysis.compare import _per_point
    # repetition 0 gave three metrics on scattered frames, repetitions 1 and 2 one each on contiguous ones
    reps = pd.DataFrame({"repetition": [0, 0, 0, 1, 2], "phys_contiguity": [0.2, 0.2, 0.2, 0.9, 0.9]})
    assert _per_point(0, ["p"] * 5, reps, "phys_contiguity", "median") == {(0, "p"): 0.9}
    assert _per_point(0, ["p"] * 5, reps.assign(phys_contiguity=None), "phys_contiguity", "median") == {}


@pytest.mark.parametrize("what, says", [
    ("machine", "not of the same machine"), ("nothing shared", "no case in common"),
    ("copy", "a copy of one run"), ("suite", "two suites")])
def test_calibrate_refuses_what_is_not_an_aa_pair(tmp_path, what, says):
    """Each of these exited 0 and wrote a thresholds file: another machine with a warning
    line, no case in common with empty sections, a copy of one run with noise 0, and two
    suites without a word."""
    import shutil
    from cxlbench.results.store import ResultsError, load_run
    rng = np.random.default_rng(4)
    a = syn.write_run(tmp_path / "a", syn.suite_results(rng, **SMALL), label="a")
    if what == "machine":
        m, tiers = syn.machine(cpu_model="AMD EPYC 9654 96-Core Processor")
        b = syn.write_run(tmp_path / "b", syn.suite_results(rng, **SMALL), m=m, tiers=tiers, label="b")
    elif what == "nothing shared":
        a = syn.write_run(tmp_path / "a2", [r for r in syn.suite_results(rng, **SMALL) if r.case.benchmark == "latency"])
        b = syn.write_run(tmp_path / "b", [r for r in syn.suite_results(rng, **SMALL) if r.case.benchmark == "bandwidth"])
    elif what == "copy":
        b = tmp_path / "copy" / a.name
        shutil.copytree(a, b)
    else:
        b = syn.write_run(tmp_path / "b", syn.suite_results(rng, **SMALL), suite="ci", label="b")
    with pytest.raises(ResultsError, match=says):
        calibrate(load_run(a), load_run(b))


def test_a_point_recorded_in_other_units_is_not_compared_nor_called_faster():
    """A current run that recorded a latency in µs against a baseline in ns read as
    -99.9%, 'faster': only the direction was checked."""
    rng = np.random.default_rng(5)
    base = syn.make_run(syn.suite_results(rng, noise=0.01), label="base")
    cur = syn.make_run(syn.suite_results(rng, noise=0.01), label="cur")
    lat = cur.samples["metric"] == "latency_ns"
    cur.samples.loc[lat, "value"] = cur.samples.loc[lat, "value"] / 1000
    cur.samples.loc[lat, "unit"] = "us"
    rows = compare([base, cur]).rows
    odd = rows[rows["metric"] == "latency_ns"]
    assert len(odd) and (odd["verdict"] == "inconclusive").all()
    assert odd["note"].str.contains(r"different units \(ns, us\): not compared").all()
    assert (rows[rows["metric"] != "latency_ns"]["verdict"] != "faster").all()
