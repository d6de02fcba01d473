"""The regression gate: simulations on synthetic runs with known distributions,
exit codes for unusable inputs, --confirm, thresholds files, and the outputs."""
from __future__ import annotations

import json
import math
from dataclasses import replace
import xml.etree.ElementTree as ET

import numpy as np

from cxlbench.analysis.gate import gate
from cxlbench.analysis.stats import SLOWER, compare_values
from cxlbench.results.schema import FAILED, SKIPPED

from fakes import synthetic as syn

REPS = 5          # the suite's default repetition count


def sim_results(rng, n_cases, *, noise=0.02, worse=0.0, reps=REPS, inner=1, process_noise=0.0,
                benchmarks=("latency", "bandwidth")):
    """n_cases per benchmark: latency (ns, lower is better) and bandwidth (GB/s,
    higher is better). `worse` is the regression: 0.10 makes latency 10% higher
    and bandwidth 10% lower (negative: an improvement)."""
    out = []
    for bench in benchmarks:
        metric, center = ("latency_ns", 120.0) if bench == "latency" else ("bandwidth_GBps", 25.0)
        f = 1 + worse if bench == "latency" else 1 - worse
        for i in range(n_cases):
            vals = syn.noisy(rng, center * f * (1 + i / n_cases), noise, reps, inner, process_noise)
            out.append(syn.case_result(bench, "ddr0", {"working_set_bytes": 2**20 * (i + 1)},
                                       {metric: vals}))
    return out


def verdict_rates(result):
    rows = result.comparison.rows
    return {b: (g["verdict"] == SLOWER).mean() for b, g in rows.groupby("benchmark")}


# ------------------------------------------------------------------ simulations

def test_injected_regression_caught_in_95_percent_of_trials():
    """10% worse at 2% noise with 5 repetitions: each case is one trial, 4000 per
    direction. The t interval's power here is 95.6% in theory (docs/gating.md), so
    the rate is measured to ±0.3% (one standard error)."""
    rng = np.random.default_rng(20240501)
    base = syn.make_run(sim_results(rng, 4000), label="base")
    cur = syn.make_run(sim_results(rng, 4000, worse=0.10), label="cur")
    result = gate(base, cur)
    rates = verdict_rates(result)
    assert result.exit_code == 1
    assert rates["latency"] >= 0.95, rates           # ns grew: slower
    assert rates["bandwidth"] >= 0.95, rates         # GB/s fell: slower
    assert (result.comparison.rows["verdict"] == "faster").sum() == 0


def test_improvement_is_faster_not_slower_for_ns_and_gbps():
    rng = np.random.default_rng(7)
    base = syn.make_run(sim_results(rng, 200), label="base")
    cur = syn.make_run(sim_results(rng, 200, worse=-0.20), label="cur")   # ns fell, GB/s rose
    result = gate(base, cur)
    rows = result.comparison.rows
    assert result.exit_code == 0
    for bench in ("latency", "bandwidth"):
        share = (rows.loc[rows["benchmark"] == bench, "verdict"] == "faster").mean()
        assert share >= 0.95, (bench, share)
    assert (rows["verdict"] == SLOWER).sum() == 0


def test_aa_cases_flagged_in_at_most_5_percent():
    rng = np.random.default_rng(11)
    base = syn.make_run(sim_results(rng, 1000), label="a")
    cur = syn.make_run(sim_results(rng, 1000), label="b")
    rows = gate(base, cur).comparison.rows
    assert (rows["verdict"] == SLOWER).mean() <= 0.05
    assert rows["verdict"].isin(["same", "inconclusive"]).mean() >= 0.95
    assert (rows["verdict"] == "same").mean() >= 0.8      # 2% noise is well inside ±5%


def test_aa_whole_gate_fails_in_at_most_5_percent_of_trials():
    """Whole gates on a 20-case suite, 60 A/A trials (0 of 60 bounds the rate under 5% at 95%)."""
    rng = np.random.default_rng(3)
    fails = 0
    trials = 60
    for _ in range(trials):
        base = syn.make_run(sim_results(rng, 10), label="a")
        cur = syn.make_run(sim_results(rng, 10), label="b")
        fails += gate(base, cur).exit_code == 1
    assert fails / trials <= 0.05


def test_aa_with_process_effects_per_repetition_not_pooled():
    """Each repetition (a process) has its own offset shared by its 20 inner samples.
    Pooling inner samples would call identical code different; per-repetition
    statistics keep the A/A false-positive rate under 5%."""
    rng = np.random.default_rng(5)
    kw = dict(noise=0.005, inner=20, process_noise=0.04)
    base = syn.make_run(sim_results(rng, 300, **kw), label="a")
    cur = syn.make_run(sim_results(rng, 300, **kw), label="b")
    result = gate(base, cur, threshold=0.02)
    rows = result.comparison.rows
    assert set(rows["base_n"]) == {REPS}                 # one value per repetition, not 100
    assert rows["verdict"].isin([SLOWER, "faster"]).mean() <= 0.05
    # The same data pooled (every inner sample as if independent) is called
    # slower or faster far more often.
    pooled = 0
    for i in range(300):
        a = syn.noisy(rng, 100.0, **kw, repetitions=REPS).ravel()
        b = syn.noisy(rng, 100.0, **kw, repetitions=REPS).ravel()
        pooled += compare_values(a, b, "lower", 0.02).verdict in (SLOWER, "faster")
    assert pooled / 300 > 0.15       # ~25% in theory


def test_stored_runs_give_the_same_verdicts_as_in_memory(tmp_path):
    """The gate reads runs written by the real store exactly as the simulations' in-memory runs."""
    rng = np.random.default_rng(1)
    res_a, res_b = sim_results(rng, 20), sim_results(rng, 20, worse=0.2)
    pa = syn.write_run(tmp_path, res_a, label="a")
    pb = syn.write_run(tmp_path, res_b, label="b")
    on_disk = gate(pa, pb)
    in_memory = gate(syn.make_run(res_a, label="a"), syn.make_run(res_b, label="b"))
    assert on_disk.exit_code == in_memory.exit_code == 1
    assert list(on_disk.comparison.rows["verdict"]) == list(in_memory.comparison.rows["verdict"])
    assert np.allclose(on_disk.comparison.rows["ratio"], in_memory.comparison.rows["ratio"])


# ------------------------------------------------------------------ unusable inputs: exit 2

def test_missing_case_exits_2_with_a_clear_message():
    rng = np.random.default_rng(2)
    res = sim_results(rng, 5)
    base = syn.make_run(res, label="base")
    cur_results = sim_results(rng, 5)
    dropped = cur_results.pop(2)
    cur = syn.make_run(cur_results, label="cur")
    result = gate(base, cur)
    assert result.exit_code == 2
    msg = " ".join(result.errors)
    assert "missing from the current run" in msg and dropped.case.case_id in msg
    assert "--allow-missing" in msg
    assert gate(base, cur, allow_missing=True).exit_code == 0


def test_skipped_case_counts_as_missing_and_says_why():
    rng = np.random.default_rng(2)
    base = syn.make_run(sim_results(rng, 3), label="base")
    cur_results = sim_results(rng, 3)
    c = cur_results[0].case
    cur_results[0] = syn.case_result(c.benchmark, c.target, c.params, {}, status=SKIPPED,
                                     reason="no hugetlb pages reserved")
    result = gate(base, cur_results and syn.make_run(cur_results, label="cur"))
    assert result.exit_code == 2
    assert "skipped: no hugetlb pages reserved" in result.missing["why"].iloc[0]
    assert "no hugetlb pages reserved" in result.markdown()


def test_a_baseline_that_measured_nothing_is_named_as_the_side_that_failed():
    """It read '5 baseline cases are missing from the current run': the wrong side."""
    rng = np.random.default_rng(2)
    failed = [replace(r, status=FAILED, reason="worker killed by SIGKILL") for r in sim_results(rng, 3)]
    result = gate(syn.make_run(failed, label="base"), syn.make_run(sim_results(rng, 3), label="cur"))
    [error] = result.errors[:1]
    assert result.exit_code == 2 and error.startswith("6 cases failed in the baseline (")
    assert "; worker killed by SIGKILL): gate against a baseline that measured them" in error
    assert "missing from the current run" not in error


def test_a_case_that_failed_part_way_is_missing_not_judged_on_its_first_repetitions():
    """With the workers' interpreter gone mid-run every case failed after two good
    repetitions, and the gate passed the run on those."""
    rng = np.random.default_rng(2)
    base = syn.make_run(sim_results(rng, 3), label="base")
    cur_results = [r if i == 4 else replace(r, status=FAILED, reason="worker exited with code 255 without a result")
                   for i, r in enumerate(sim_results(rng, 3, worse=0.5))]        # slower, samples kept
    result = gate(base, syn.make_run(cur_results, label="cur"))
    assert result.exit_code == 2 and "5 cases missing from the current run (" in " ".join(result.errors)
    assert set(result.missing["why"]) == {"failed: worker exited with code 255 without a result"}
    assert list(result.rows["case_id"]) == [cur_results[4].case.case_id]      # the one measured whole
    assert gate(base, syn.make_run(cur_results, label="cur"), allow_missing=True).exit_code == 1


def test_allow_missing_does_not_cover_a_case_that_timed_out():
    """A case that ran past its time limit (ten times its estimate at least) slowed
    beyond measure, or hangs: --allow-missing, meant for cases a machine cannot run,
    passed it."""
    rng = np.random.default_rng(2)
    base = syn.make_run(sim_results(rng, 3), label="base")
    cur_results = sim_results(rng, 3)
    cur_results[1] = replace(cur_results[1], status=FAILED, reason="timed out after 600 s", samples=[])
    skipped = sim_results(rng, 3)
    skipped[1] = replace(skipped[1], status=SKIPPED, reason="no hugetlb pages reserved", samples=[])
    assert gate(base, syn.make_run(skipped, label="cur"), allow_missing=True).exit_code == 0
    result = gate(base, syn.make_run(cur_results, label="cur"), allow_missing=True)
    assert result.exit_code == 2 and len(result.errors) == 1
    assert "1 case of the current run timed out" in result.errors[0] and cur_results[1].case.case_id in result.errors[0]


def test_a_timeout_in_a_later_process_or_after_a_failed_baseline_is_still_a_timeout():
    """The runner prefixes a later process's reason ("process 2 of 5: timed out ..."), and
    compare leaves out a case failed in both runs: either way --allow-missing let the
    timeout through, and the second passed unmentioned even without it."""
    rng = np.random.default_rng(2)
    base_results = sim_results(rng, 3)
    base = syn.make_run(base_results, label="base")
    later = sim_results(rng, 3)
    later[1] = replace(later[1], status=FAILED, reason="process 2 of 5: timed out after 600 s")
    assert gate(base, syn.make_run(later, label="cur"), allow_missing=True).exit_code == 2
    failed_base = syn.make_run([replace(r, status=FAILED, reason="worker died: signal 9") if i == 1 else r
                                for i, r in enumerate(base_results)], label="base")
    again = sim_results(rng, 3)
    again[1] = replace(again[1], status=FAILED, reason="worker died: signal 9")
    both = gate(failed_base, syn.make_run(again, label="cur"))
    assert both.exit_code == 0 and any("failed in both runs (worker died: signal 9)" in w for w in both.warnings)
    again[1] = replace(again[1], reason="timed out after 600 s")
    assert gate(failed_base, syn.make_run(again, label="cur")).exit_code == 2


def test_a_missing_cases_reason_is_found_when_the_other_machine_names_its_tier_otherwise():
    from tests.test_compare import machine_b
    rng = np.random.default_rng(3)
    kw = dict(tiers=("ddr0", "cxl2"), working_sets=[2**20, 2**30], threads=(1,), kernels=("read",),
              pages=("4k",), loaded=False, extras=False)
    base = syn.make_run(syn.suite_results(rng, **kw), label="base")
    m, tiers = machine_b()
    cur_results = syn.suite_results(rng, **{**kw, "tiers": ("ddr0", "cxl3")})
    i = next(i for i, r in enumerate(cur_results) if r.case.target == "cxl3")
    cur_results[i] = replace(cur_results[i], status=SKIPPED, reason="the CXL node is offline", samples=[])
    result = gate(base, syn.make_run(cur_results, m=m, tiers=tiers, label="cur"), allow_missing=True,
                  ignore_identity=["numa_nodes", "tiers"])
    assert list(result.missing["why"]) == ["skipped: the CXL node is offline"], result.errors


def test_a_baseline_case_that_failed_part_way_is_no_reference_and_new_cases_stay_new():
    rng = np.random.default_rng(2)
    base = syn.make_run([replace(r, status=FAILED, reason="timed out after 600 s") if i == 0 else r
                         for i, r in enumerate(sim_results(rng, 3))], label="base")
    cur_results = sim_results(rng, 4)                     # a fourth working set: new in the current run
    result = gate(base, syn.make_run(cur_results, label="cur"), allow_missing=True)
    assert list(result.missing["why"]) == ["failed in the baseline: timed out after 600 s"]
    assert cur_results[0].case.case_id not in set(result.rows["case_id"])
    # the new cases are the current run's fourth working sets, whatever else is missing
    assert sorted(result.new["point"].str.split("|").str[0]) == sorted(
        r.case.case_id for r in (cur_results[3], cur_results[7]))


def test_machine_identity_mismatch_exits_2():
    rng = np.random.default_rng(4)
    res = sim_results(rng, 3)
    base = syn.make_run(res, label="base")
    m, tiers = syn.machine(cpu_model="AMD EPYC 9654 96-Core Processor")
    cur = syn.make_run(res, m=m, tiers=tiers, label="cur")
    result = gate(base, cur)
    assert result.exit_code == 2
    msg = " ".join(result.errors)
    assert "identity" in msg and "cpu_model" in msg and "AMD EPYC 9654" in msg
    assert gate(base, cur, ignore_identity=["cpu_model"]).exit_code == 0


def test_kernel_and_memory_layout_are_identity_thp_is_context():
    rng = np.random.default_rng(4)
    res = sim_results(rng, 3)
    base = syn.make_run(res, label="base")
    m, tiers = syn.machine(kernel="6.8.0-other")
    assert gate(base, syn.make_run(res, m=m, tiers=tiers)).exit_code == 2
    m, tiers = syn.machine(ddr_bytes=32 * 2**30)
    assert gate(base, syn.make_run(res, m=m, tiers=tiers)).exit_code == 2
    m, tiers = syn.machine(ddr_bytes=int(64 * 2**30 * 0.99))     # a boot's reservations: same
    assert gate(base, syn.make_run(res, m=m, tiers=tiers)).exit_code == 0
    m, tiers = syn.machine(thp="always", governor="powersave", hostname="another-host")
    result = gate(base, syn.make_run(res, m=m, tiers=tiers))
    assert result.exit_code == 0
    assert any("thp_enabled" in w for w in result.warnings)
    assert "thp\\_enabled" in result.markdown()


def test_unreadable_run_exits_2(tmp_path):
    rng = np.random.default_rng(4)
    base = syn.write_run(tmp_path, sim_results(rng, 2), label="base")
    result = gate(base, tmp_path / "nope")
    assert result.exit_code == 2
    assert "current" in result.errors[0] and "nope" in result.errors[0]
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "run.json").write_text("{not json")
    assert gate(tmp_path / "junk", base).exit_code == 2
    assert json.loads(gate(base, tmp_path / "nope").to_json())["exit_code"] == 2


def test_bad_thresholds_file_exits_2(tmp_path):
    rng = np.random.default_rng(4)
    run = syn.make_run(sim_results(rng, 2))
    bad = tmp_path / "t.toml"
    bad.write_text("default = [1")
    assert gate(run, run, thresholds_file=bad).exit_code == 2
    bad.write_text("default = 3")
    result = gate(run, run, thresholds_file=bad)
    assert result.exit_code == 2 and "above 0 and below 100%" in result.errors[0]


# ------------------------------------------------------------------ thresholds, confirm

def test_thresholds_file_per_benchmark(tmp_path):
    rng = np.random.default_rng(9)
    base = syn.make_run(sim_results(rng, 30), label="base")
    cur = syn.make_run(sim_results(rng, 30, worse=0.10), label="cur")
    f = tmp_path / "thresholds.toml"
    f.write_text('default = "5%"\n[benchmarks]\nlatency = 0.25\n')
    result = gate(base, cur, thresholds_file=f)
    rows = result.comparison.rows
    lat = rows[rows["benchmark"] == "latency"]
    assert set(lat["threshold"]) == {0.25} and (lat["verdict"] != SLOWER).all()
    assert (rows.loc[rows["benchmark"] == "bandwidth", "verdict"] == SLOWER).mean() > 0.9
    assert result.exit_code == 1
    # An explicit threshold replaces the file's default, not its per-benchmark entries.
    result = gate(base, cur, threshold="15%", thresholds_file=f)
    assert result.exit_code == 0


def test_a_misspelt_name_in_a_thresholds_file_is_refused_not_silently_ignored(tmp_path):
    """'latncy' would have left every latency case at the default 5% without a word. A
    family the runs do not hold (storage) is no error: one file serves every suite."""
    rng = np.random.default_rng(9)
    base = syn.make_run(sim_results(rng, 30), label="base")
    cur = syn.make_run(sim_results(rng, 30), label="cur")
    f = tmp_path / "t.toml"
    for text, says in (("[benchmarks]\nlatncy = 0.2\n", "no benchmark is named 'latncy'"),
                       ("[noise]\nbandwith = 0.1\n", "no benchmark is named 'bandwith'"),
                       ("[benchmarks.latency]\nlatncy_ns = 0.2\n", "has no metric 'latncy_ns'")):
        f.write_text(text)
        result = gate(base, cur, thresholds_file=f)
        assert result.exit_code == 2 and says in result.errors[0], text
    f.write_text("[benchmarks]\nstorage = 0.2\nlatency = 0.2\n")
    assert gate(base, cur, thresholds_file=f).exit_code != 2


def test_a_noise_written_as_true_is_refused_not_read_as_a_hundred_percent(tmp_path):
    import pytest
    from cxlbench.analysis.thresholds import ThresholdError, load_thresholds
    f = tmp_path / "t.toml"
    f.write_text("[noise]\nlatency = true\n")
    with pytest.raises(ThresholdError, match="noise.latency: True is not a run-to-run noise"):
        load_thresholds(f)


def test_example_thresholds_file_loads():
    from cxlbench.analysis.thresholds import EXAMPLE_FILE, load_thresholds
    t = load_thresholds(EXAMPLE_FILE)
    assert t.for_case("latency", "latency_ns") > t.default
    assert t.noise_for("latency") > 0 and t.noise_for("storage") == 0


def test_run_noise_widens_intervals_into_inconclusive(tmp_path):
    """A known run-to-run noise turns would-be false verdicts into inconclusive ones."""
    rng = np.random.default_rng(13)
    base = syn.make_run(sim_results(rng, 50), label="a")
    cur = syn.make_run(sim_results(rng, 50, worse=0.10), label="b")
    f = tmp_path / "noise.toml"
    f.write_text("[noise]\nlatency = 0.10\n")
    rows = gate(base, cur, thresholds_file=f).comparison.rows
    lat, bw = rows[rows["benchmark"] == "latency"], rows[rows["benchmark"] == "bandwidth"]
    assert (lat["verdict"] == "inconclusive").all() and (lat["mde"] > 0.25).all()
    assert (bw["verdict"] == SLOWER).mean() > 0.9             # no noise declared for bandwidth


def test_confirm_reruns_only_flagged_cases_and_fails_only_if_they_regress_again():
    rng = np.random.default_rng(12)
    base_res = sim_results(rng, 5)
    base = syn.make_run(base_res, label="base")
    bad = lambda c, m: 1.3 if c.params["working_set_bytes"] == 2**20 else 1.0     # noqa: E731
    cur = syn.make_run([syn.case_result(r.case.benchmark, r.case.target, r.case.params,
                                        {s.metric: [x.value * (1.3 if r.case.params["working_set_bytes"] == 2**20
                                                               and s.metric == "latency_ns" else 1.0)
                                                    for x in r.samples if x.metric == s.metric]
                                         for s in r.samples[:1]})
                        for r in sim_results(rng, 5)], label="cur")
    asked = []

    def rerun_clean(case_ids):
        asked.append(case_ids)
        keep = [r for r in sim_results(rng, 5) if r.case.case_id in case_ids]
        return syn.make_run(keep, label="again")

    first = gate(base, cur)
    assert first.exit_code == 1
    flagged = sorted(set(first.regressions["case_id"]))
    result = gate(base, cur, confirm=rerun_clean)
    assert asked == [flagged]
    assert result.exit_code == 0 and result.confirm["ran"] and not result.confirm["confirmed"]
    assert "not confirmed on re-run" in result.markdown()

    def rerun_bad(case_ids):
        keep = [r for r in sim_results(rng, 5, worse=0.3) if r.case.case_id in case_ids]
        return syn.make_run(keep, label="again")

    result = gate(base, cur, confirm=rerun_bad)
    assert result.exit_code == 1 and result.confirm["confirmed"]

    def rerun_broken(case_ids):
        raise RuntimeError("runner crashed")

    result = gate(base, cur, confirm=rerun_broken)
    assert result.exit_code == 1 and any("runner crashed" in w for w in result.warnings)
    del bad


# ------------------------------------------------------------------ outputs

def test_outputs_markdown_json_junit():
    rng = np.random.default_rng(21)
    base = syn.make_run(sim_results(rng, 10), label="base")
    cur = syn.make_run(sim_results(rng, 10, worse=0.25), label="<b>cur</b>|x")
    result = gate(base, cur)
    assert result.exit_code == 1
    md = result.markdown()
    assert md.startswith("## ❌ cxlbench gate: regression")
    assert "<b>" not in md.replace("`<b>cur</b>|x`", "")    # only inside a code span
    assert "| latency |" in md and "+25" in md and "-25" in md
    data = json.loads(result.to_json())
    assert data["exit_code"] == 1 and data["status"] == "fail"
    assert data["counts"]["slower"] == len(data["regressions"]) == 20
    assert all(r["unit"] in ("ns", "GB/s") for r in data["regressions"])
    root = ET.fromstring(result.junit_xml())
    assert root.tag == "testsuites" and root.get("failures") == "20" and root.get("tests") == "20"
    assert len(root.findall(".//failure")) == 20
    ok = gate(base, base)
    assert ok.exit_code == 0 and ok.markdown().startswith("## ✅")
    assert ET.fromstring(ok.junit_xml()).get("failures") == "0"
    assert "nothing" not in ok.summary()


def test_a_pair_given_the_wrong_way_round_or_not_a_pair_says_so():
    """Exit 0 in silence for a run gated against itself, a baseline newer than the run
    it judges, or runs of two suites."""
    rng = np.random.default_rng(21)
    base = syn.make_run(sim_results(rng, 3), label="base")
    assert any("are the same run" in w for w in gate(base, base).warnings)
    later = syn.make_run(sim_results(rng, 3), label="later")
    later.meta["started"] = "2026-02-01T00:00:00+00:00"
    assert any("the baseline started after the current run" in w for w in gate(later, base).warnings)
    other = syn.make_run(sim_results(rng, 3), label="other")
    other.meta["suite"] = {"name": "nightly"}
    assert any("different suites" in w for w in gate(base, other).warnings)
    fewer = syn.make_run(sim_results(rng, 2), label="fewer")        # a case missing: exit 2, with the hint
    fewer.meta["suite"] = {"name": "nightly"}
    refused = gate(base, fewer)
    assert refused.exit_code == 2 and "different suites" in refused.summary()
    assert not gate(base, syn.make_run(sim_results(rng, 3), label="cur")).warnings


def test_a_misspelt_identity_field_to_ignore_is_refused_naming_the_fields():
    rng = np.random.default_rng(4)
    res = sim_results(rng, 3)
    m, tiers = syn.machine(kernel="6.8.0-other")
    result = gate(syn.make_run(res, label="base"), syn.make_run(res, m=m, tiers=tiers), ignore_identity=("kernal",))
    assert result.exit_code == 2 and result.errors[0].startswith("--ignore-identity kernal: not an identity field")
    assert "kernel" in result.errors[0]


def test_inconclusive_carries_minimum_detectable_effect():
    rng = np.random.default_rng(30)
    base = syn.make_run(sim_results(rng, 50, noise=0.15), label="a")
    cur = syn.make_run(sim_results(rng, 50, noise=0.15), label="b")
    rows = gate(base, cur).comparison.rows
    inc = rows[rows["verdict"] == "inconclusive"]
    assert len(inc) > 0.5 * len(rows)
    assert (inc["mde"] > 0.10).all() and np.isfinite(inc["mde"]).all()
    data = json.loads(gate(base, cur).to_json())
    assert all(c["mde"] is not None for c in data["cases"])
    assert not math.isnan(rows["mde"].iloc[0])


def test_a_pass_that_could_not_see_the_threshold_says_undecided_not_no_regression(tmp_path):
    """Noisy A/A runs: nothing slower, but the intervals are wider than 5%: the summary,
    the job page and the JSON say undecided and what would decide it; --exit-undecided
    turns it into exit 3 for jobs that want that."""
    rng = np.random.default_rng(31)             # a draw where no case lands slower by chance
    base = syn.make_run(sim_results(rng, 50, noise=0.15), label="a")
    cur = syn.make_run(sim_results(rng, 50, noise=0.15), label="b")
    result = gate(base, cur)
    assert result.status == "pass" and result.undecided and result.exit_code == 0
    assert result.summary().startswith("cxlbench gate: UNDECIDED, no case slower")
    assert "could not have detected a 5.0% change" in result.summary() and "--history" in result.summary()
    md = result.markdown()
    assert md.startswith("## ❔ cxlbench gate: undecided") and "no regression" not in md.splitlines()[0]
    data = json.loads(result.to_json())
    assert data["decided"] is False and "cxlbench ab" in data["undecided"]
    result.exit_undecided = True
    assert result.exit_code == 3
    calm = syn.make_run(sim_results(rng, 50, noise=0.002), label="c")
    quiet = gate(calm, calm)                    # every case decided: an ordinary pass
    quiet.exit_undecided = True
    assert not quiet.undecided and quiet.exit_code == 0 and quiet.markdown().startswith("## ✅")


def test_a_confirmed_regression_carries_the_reruns_note_not_the_first_runs():
    rng = np.random.default_rng(13)

    def run(center, contiguity, label):
        res = syn.case_result("latency", "ddr0", {"working_set_bytes": 2**30, "page": "4k"},
                              {"latency_ns": syn.noisy(rng, center, 0.01, 5)},
                              sample_params=lambda rep, i: {"phys_contiguity": contiguity})
        return syn.make_run([res], label=label)

    base, cur = run(100.0, 0.94, "base"), run(130.0, 0.84, "cur")
    assert "contiguity (0.94 → 0.84" in gate(base, cur).markdown()       # 0.10 exactly is "0.10 or more"
    scattered_again = gate(base, cur, confirm=lambda ids: run(130.0, 0.5, "again"))
    assert scattered_again.exit_code == 1
    line = next(x for x in scattered_again.markdown().splitlines() if "confirmed on re-run" in x)
    assert "confirmed on re-run; the runs' buffers differ in physical contiguity (0.94 → 0.50" in line
    alike_again = gate(base, cur, confirm=lambda ids: run(130.0, 0.93, "again"))
    line = next(x for x in alike_again.markdown().splitlines() if "confirmed on re-run" in x)
    assert "contiguity" not in line                  # the re-run's buffers were like the baseline's
    assert "physical contiguity (0.94 → 0.84" in gate(base, cur).junit_xml()


def test_a_bandwidth_that_fell_to_zero_is_slower_however_noisy_the_baseline():
    """No interval divides by 0, but a rate that read 0 is the largest regression there
    is: slower, even beside an unstable baseline or a held CPU; a time of 0 is no
    speed-up and stays undecided."""
    from cxlbench.analysis.stats import (INCONCLUSIVE, discount_instability, discount_interference, judge,
                                         ratio_ci)
    base, zero = [19.8, 24.0, 28.2, 21.0, 26.0], [0.0] * 5
    lost = judge(ratio_ci(base, zero), "higher", 0.05)
    assert lost.verdict == SLOWER
    assert discount_instability(lost, base, zero).verdict == SLOWER
    assert discount_interference(lost, 0.5, 0.5).verdict == SLOWER
    assert judge(ratio_ci(base, zero), "lower", 0.05).verdict == INCONCLUSIVE


def test_cases_that_differ_only_by_a_path_are_listed_not_a_traceback():
    """Two storage-like cases on one tier that differ only by their path share a key;
    compare lists the second as unmatched, without a key, and the gate's lookup by key
    raised AttributeError on it."""
    rng = np.random.default_rng(5)

    def run(label):
        return syn.make_run([syn.case_result("latency", "ddr0", {"working_set_bytes": 2**20, "path": where},
                                             {"latency_ns": syn.noisy(rng, 100.0, 0.01, 5, 1, 0.0)})
                             for where in ("/mnt/a", "/mnt/b")], label=label)
    result = gate(run("base"), run("cur"))
    assert result.exit_code == 0 and len(result.rows) == 1
