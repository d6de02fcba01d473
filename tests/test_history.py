"""A machine's history: change points, the trend report, and the gate against history."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cxlbench.analysis import history as hist
from cxlbench.analysis.changepoints import change_points
from cxlbench.analysis.history_gate import FAIL, PASS, SHORT, SUSPECT, Rule, bh_adjust, judge
from cxlbench.cli.history_view import verdict_text
from cxlbench.cli.main import main
from cxlbench.results.store import load_run
from tests.fakes.synthetic import machine, suite_results, write_run

START = pd.Timestamp("2026-11-01T00:00:00+00:00")


def _series(rng, n=15, sigma=0.01, step_at=None, step=0.10):
    x = np.exp(rng.normal(0, sigma, n)) * 100.0
    if step_at is not None:
        x[step_at:] *= 1 + step
    return x


# ------------------------------------------------------------------ change points

def test_one_step_is_found_at_the_run_where_it_happened_with_its_size():
    x = _series(np.random.default_rng(3), step_at=12)
    (cp,) = change_points(x)
    assert cp.index == 12
    assert abs(cp.magnitude - 0.10) < 0.03 and cp.pvalue <= 0.01


def test_a_flat_series_has_no_change_point():
    rng = np.random.default_rng(4)
    assert sum(len(change_points(_series(rng, n=30, sigma=0.03))) for _ in range(20)) <= 1


def test_a_step_below_the_minimum_magnitude_is_not_a_change_point():
    x = _series(np.random.default_rng(5), sigma=0.002, step_at=8, step=0.03)
    assert change_points(x, min_magnitude=0.05) == []
    assert [c.index for c in change_points(x, min_magnitude=0.02)] == [8]


def test_two_steps_are_both_found_and_each_holds_between_its_neighbours():
    x = _series(np.random.default_rng(6), n=30, sigma=0.01, step_at=10, step=0.15)
    x[20:] *= 0.8
    assert [c.index for c in change_points(x)] == [10, 20]


@pytest.mark.parametrize("before, away, after", [(12, 6, 6), (10, 10, 9), (40, 10, 40)])
def test_a_level_that_left_and_came_back_is_two_change_points(before, away, after):
    """A regression fixed: split once, each side mixes both levels and no single split
    held, so the history showed no change at all."""
    x = _series(np.random.default_rng(8), n=before + away + after)
    x[before:before + away] *= 1.2
    cps = change_points(x)
    assert [c.index for c in cps] == [before, before + away]
    assert cps[0].magnitude > 0.15 and cps[1].magnitude < -0.12


def test_change_points_are_the_same_every_time():
    x = _series(np.random.default_rng(7), sigma=0.04, step_at=9, step=0.08)
    assert change_points(x) == change_points(x)


def test_benjamini_hochberg_adjusts_as_published():
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    q = bh_adjust(p)
    assert np.allclose(q[:4], [0.02, 0.04, 0.04, 0.02]) and np.isnan(q[4])


# ------------------------------------------------------------------ histories on disk

def _runs(tmp_path: Path, n: int, *, slow_from: int | None = None, factor: float = 1.10,
          kernel_from: int | None = None, suite: str = "ci", gap_min: float = 15, seed: int = 0,
          drift: float = 0.01, out: Path | None = None) -> list[Path]:
    """n runs of a two-case suite, `gap_min` apart; latency `factor` times higher
    (bandwidth lower) from run `slow_from` on."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        shared = float(np.exp(rng.normal(0, drift)))          # the whole run drifts
        slow = factor if slow_from is not None and i >= slow_from else 1.0

        def f(case, metric, shared=shared, slow=slow):
            return shared * (slow if metric == "latency_ns" else 1 / slow)
        kernel = "6.2.0-new" if kernel_from is not None and i >= kernel_from else "6.1.0-synthetic"
        m, tiers = machine(kernel=kernel, cxl=False)
        results = suite_results(rng, noise=0.01, tiers=("ddr0",), working_sets=[256 << 20],
                                pages=("4k",), kernels=("read",), threads=(1,), loaded=False,
                                extras=False, factor=f)
        p = write_run(out or tmp_path / "results", results, m=m, tiers=tiers, suite=suite, label=f"r{i}")
        meta = json.loads((p / "run.json").read_text())
        meta["started"] = (START + pd.Timedelta(minutes=gap_min * i)).isoformat()
        (p / "run.json").write_text(json.dumps(meta))
        paths.append(p)
    return paths


def test_history_is_in_time_order_and_counts_a_run_once(tmp_path):
    paths = _runs(tmp_path, 4)
    copy = tmp_path / "copy" / "synth-host"
    copy.mkdir(parents=True)
    import shutil
    shutil.copytree(paths[2], copy / paths[2].name)
    h = hist.history([tmp_path / "results", tmp_path / "copy"])
    assert h.runs["run_label"].tolist() == ["r0", "r1", "r2", "r3"]
    assert len(h.rows) == 4 * 2 and set(h.rows["position"]) == {0, 1, 2, 3}


def test_runs_of_two_suites_are_refused_by_name_unless_one_is_chosen(tmp_path):
    _runs(tmp_path, 2, suite="ci")
    _runs(tmp_path, 1, suite="quick", seed=1)
    with pytest.raises(hist.HistoryError, match="several machines or suites") as e:
        hist.history(tmp_path / "results")
    assert "synth-host/ci [" in str(e.value) and "] (2 runs)" in str(e.value) and "synth-host/quick [" in str(e.value)
    assert len(hist.history(tmp_path / "results", suite="quick").runs) == 1


def test_memory_that_moved_a_little_between_boots_is_the_same_machine(tmp_path):
    _runs(tmp_path, 2)
    m, tiers = machine(cxl=False, ddr_bytes=63 * 2**30)        # a balloon took 1 GiB
    p = write_run(tmp_path / "results", suite_results(np.random.default_rng(1), tiers=("ddr0",),
                  working_sets=[256 << 20], pages=("4k",), kernels=("read",), threads=(1,), loaded=False,
                  extras=False), m=m, tiers=tiers, suite="ci")
    assert len(hist.history(tmp_path / "results").runs) == 3
    m, tiers = machine(cxl=False, cpu_model="Another CPU")
    write_run(tmp_path / "results", [], m=m, tiers=tiers, suite="ci")
    with pytest.raises(hist.HistoryError, match="several machines"):
        hist.history(tmp_path / "results")
    assert p.exists()


def test_a_kernel_upgrade_is_marked_where_it_happened(tmp_path):
    _runs(tmp_path, 5, kernel_from=3)
    h = hist.history(tmp_path / "results")
    (change,) = h.changes
    assert (change.position, change.field, change.after) == (3, "kernel", "6.2.0-new")


def test_the_step_in_a_history_is_found_on_its_headlines(tmp_path):
    _runs(tmp_path, 15, slow_from=12)
    h = hist.history(tmp_path / "results")
    found = hist.point_changes(h, headlines_only=True)
    assert {c.label for c in found} == {"ddr0 latency, 256MiB working set, 4k pages",
                                         "ddr0 peak read bandwidth (1 thread)"}
    assert all(c.change.index == 12 and abs(abs(c.change.magnitude) - 0.095) < 0.03 for c in found)


# ------------------------------------------------------------------ the gate against history

def _judge(paths, current, confirm=(), **rule):
    h = hist.history(paths[0].parents[1])
    return judge(h, load_run(paths[current]), [load_run(paths[i]) for i in confirm], Rule(**rule))


def test_a_run_like_its_history_passes(tmp_path):
    paths = _runs(tmp_path, 14)
    v = _judge(paths, 13)
    assert v.status == PASS and len(v.reference) == 13
    assert (v.rows["verdict"] == "pass").all()


def test_a_slower_run_is_suspect_until_spaced_confirmations_fail_it(tmp_path):
    paths = _runs(tmp_path, 16, slow_from=13)
    v = _judge(paths, 13)
    assert v.status == SUSPECT and v.exit_code == 3
    assert set(v.rows["verdict"]) == {"suspect"}
    assert any("take 2 more runs" in n for n in v.notes)
    v = _judge(paths, 13, confirm=(14, 15))
    assert v.status == FAIL and v.exit_code == 1 and set(v.rows["verdict"]) == {"slower"}
    assert v.rows["change"].abs().between(0.07, 0.13).all()


def test_a_suspect_that_the_confirmations_do_not_repeat_passes(tmp_path):
    paths = _runs(tmp_path, 16, slow_from=13)
    fine = _runs(tmp_path / "other", 2, seed=9, out=tmp_path / "results2")
    h = hist.history(paths[0].parents[1])
    confirms = []
    for i, p in enumerate(fine):                       # later, back to normal
        meta = json.loads((p / "run.json").read_text())
        meta["started"] = (START + pd.Timedelta(minutes=15 * (20 + i))).isoformat()
        (p / "run.json").write_text(json.dumps(meta))
        confirms.append(load_run(p))
    v = judge(h, load_run(paths[13]), confirms)
    assert v.status == PASS and set(v.rows["verdict"]) == {"not confirmed"}


def test_back_to_back_confirmations_are_refused(tmp_path):
    paths = _runs(tmp_path, 16, slow_from=13, gap_min=2)
    v = _judge(paths, 13, confirm=(14, 15))
    assert v.exit_code == 2 and "must be >= 10 min apart" in v.errors[0]


def test_under_ten_runs_of_history_is_inconclusive_and_says_so(tmp_path):
    paths = _runs(tmp_path, 9, slow_from=8, factor=1.5)
    v = _judge(paths, 8)
    assert v.status == SHORT and v.exit_code == 0
    assert "8 runs of history since the first run, 10 needed" in v.notes[0]


def test_a_step_nobody_accepted_is_still_judged_from_before_it_and_accepting_it_starts_the_window(tmp_path):
    """12 slow runs already fill half the window: their spread had hidden the step, so
    a regression passed the gate from its third night on, never accepted."""
    paths = _runs(tmp_path, 26, slow_from=13)
    v = _judge(paths, 25)
    assert v.status == SUSPECT
    step = load_run(paths[13]).run_id
    assert list(v.rows["stepped"]) == [step, step]
    assert "against 25 runs of history (2 points against the 13 before their steps)" in verdict_text(v)
    assert [n for n in v.notes if "stepped" in n] == [
        f"2 points stepped the bad way since the latest accepted change, at {step} (2, by 9-10% the bad way): "
        f"each is judged against the runs before its step. If a change is intended: cxlbench history RESULTS "
        f"--accept RUN --reason '...'"]
    hist.accept(paths[13], "new DIMMs")
    v = _judge(paths, 25)
    assert v.status == PASS and v.reference[0] == load_run(paths[13]).run_id
    v = _judge(paths, 20)
    assert v.status == SHORT                           # 7 runs since the accepted one


@pytest.mark.parametrize("levels, status", [
    (((1.0, 12), (0.85, 12), (1.0, 1)), PASS),      # an improvement nobody accepted holds no later run to it
    (((1.0, 12), (1.2, 6), (1.0, 6)), PASS),        # a regression fixed: passes, nothing to say
])
def test_the_reference_is_the_last_level_no_worse_than_those_before_it(tmp_path, levels, status):
    paths = []
    for i, (factor, n) in enumerate(levels):
        paths += _runs(tmp_path, n, factor=factor, slow_from=0, seed=i, out=tmp_path / "results")
    for i, p in enumerate(paths):               # one sequence in time, whatever call wrote it
        meta = json.loads((p / "run.json").read_text())
        meta["started"] = (START + pd.Timedelta(minutes=15 * i)).isoformat()
        (p / "run.json").write_text(json.dumps(meta))
    v = _judge(paths, len(paths) - 1)
    assert v.status == status and not any(v.rows["stepped"])


def test_accepting_needs_a_reason(tmp_path):
    paths = _runs(tmp_path, 1)
    with pytest.raises(hist.HistoryError, match="needs a reason"):
        hist.accept(paths[0], " ")


def test_a_marker_is_added_on_its_own_line_after_one_written_by_hand_without_a_newline(tmp_path):
    """Appended to a last line without its newline, the two markers shared a line and
    every later history and gate exited 2 on it."""
    paths = _runs(tmp_path, 2)
    first = load_run(paths[0]).run_id
    (paths[0].parent / hist.MARKERS).write_text(json.dumps(
        {"run_id": first, "suite": "ci", "accepted_at": "x", "reason": "by hand", "by": "me"}))
    hist.accept(paths[1], "bios")
    assert [m.reason for m in hist.read_markers([str(paths[0].parent)])] == ["by hand", "bios"]


@pytest.mark.parametrize("field, value", [("run_id", ["a"]), ("reason", None), ("suite", 5)])
def test_a_marker_whose_fields_are_not_text_is_one_line_naming_them(tmp_path, field, value):
    paths = _runs(tmp_path, 1)
    marker = {"run_id": load_run(paths[0]).run_id, "suite": "ci", "accepted_at": "x", "reason": "r", "by": "me"}
    (paths[0].parent / hist.MARKERS).write_text(json.dumps({**marker, field: value}) + "\n")
    with pytest.raises(hist.HistoryError, match=f"line 1: not a marker \\({field} not text\\)"):
        hist.history(tmp_path / "results")


def test_a_run_whose_run_json_is_a_folder_is_left_out_like_any_damaged_run(tmp_path):
    """It stopped history, publish and gate --history with exit 2 for every run."""
    paths = _runs(tmp_path, 3)
    (paths[1] / "run.json").unlink()
    (paths[1] / "run.json").mkdir()
    runs, left = hist.read_runs([tmp_path / "results"])
    assert len(runs) == 2 and len(left) == 1 and left[0].startswith(f"{paths[1]}: ")


def test_accepting_a_run_from_outside_the_history_is_refused(tmp_path, capsys):
    """It wrote the marker beside the other run, even another machine's, and said the
    gate's history starts there."""
    _runs(tmp_path, 2, suite="ci")
    [other] = _runs(tmp_path, 1, suite="quick", out=tmp_path / "elsewhere")
    assert main(["history", str(tmp_path / "results"), "--accept", str(other), "--reason", "x"]) == 2
    assert "is not a run of the history in" in capsys.readouterr().err
    assert not (other.parent / hist.MARKERS).exists()


# ------------------------------------------------------------------ the commands

def test_history_command_prints_the_trend_and_writes_a_self_contained_report(tmp_path, capsys):
    _runs(tmp_path, 15, slow_from=12)
    out = tmp_path / "trend.html"
    assert main(["history", str(tmp_path / "results"), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "history of synth-host/ci: 15 runs" in text and "run 13: +" in text and "run 13: -" in text
    html = out.read_text()
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org", "")
    assert "src=" not in html and "run 13: +" in html


def test_gate_against_history_writes_its_rule_and_verdicts_as_json(tmp_path, capsys):
    paths = _runs(tmp_path, 16, slow_from=13)
    out = tmp_path / "gate.json"
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13]),
               "--confirm", "later", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 1 and "REGRESSION" in text and "Benjamini-Hochberg" in text
    verdict = json.loads(out.read_text())
    assert verdict["status"] == FAIL and len(verdict["confirmations"]) == 2
    assert {p["verdict"] for p in verdict["points"]} == {"slower"}


def test_gate_against_history_names_the_runs_it_left_out(tmp_path, capsys):
    paths = _runs(tmp_path, 14)
    (paths[3] / "run.json").write_text("{damaged")
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13])])
    text = capsys.readouterr().out
    assert rc == 0 and "left out: 1 run(s)" in text and "damaged (not JSON)" in text


def test_a_current_run_that_read_zero_is_refused_not_passed(tmp_path, capsys):
    """A run none of whose figures is a positive number is damaged (exit 2, one line), not
    passed for lack of a p-value; a run with no number at all is refused the same way."""
    paths = _runs(tmp_path, 14)
    samples = paths[13] / "samples.parquet"
    frame = pd.read_parquet(samples)
    for value, says in ((0.0, "is a positive figure"), (math.nan, "holds no figure to gate")):
        frame.assign(value=value).to_parquet(samples)
        rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13])])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and says in err


def test_a_bandwidth_that_fell_to_zero_is_suspect_and_a_time_of_zero_is_not_gated(tmp_path):
    """Real runs hold zeros (a step's transfer with nothing offloaded, loaded latency's idle
    bandwidth): the run is judged point by point. A rate that read 0 where its history
    is positive lost everything (−100%, suspect until confirmed); a time that reads 0 has
    no ratio and is left ungated."""
    paths = _runs(tmp_path, 14)
    samples = paths[13] / "samples.parquet"
    frame = pd.read_parquet(samples)
    frame.loc[frame["better"] == "higher", "value"] = 0.0
    frame.to_parquet(samples)
    v = _judge(paths, 13)
    rows = v.rows.set_index("metric")
    higher = rows[rows["better"] == "higher"]
    assert not higher.empty and (higher["change"] == -1.0).all() and (higher["verdict"] == "suspect").all()
    assert v.status == SUSPECT


def test_a_run_of_a_suite_the_store_has_never_seen_is_inconclusive_not_a_crash(tmp_path, capsys):
    _runs(tmp_path, 3)
    other = _runs(tmp_path, 1, suite="nightly", out=tmp_path / "elsewhere")[0]
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(other)])
    out = capsys.readouterr().out
    assert rc == 0 and "inconclusive: 0 runs of history for" in out and "/nightly" in out
    # ... and says what the history does hold: a job pointed at another one passed every night in silence
    assert "holds runs of synth-host/ci only, and not the run judged" in out


def test_gate_against_history_names_a_run_that_is_not_there(tmp_path, capsys):
    _runs(tmp_path, 2)
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", "nope"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "nope: neither a run directory nor a run of" in err


def test_accept_command_writes_a_marker_beside_the_runs(tmp_path, capsys):
    paths = _runs(tmp_path, 3)
    assert main(["history", str(tmp_path / "results"), "--accept", "latest", "--reason", "BIOS 2.1"]) == 0
    marker = json.loads((paths[0].parent / hist.MARKERS).read_text())
    assert marker["run_id"] == load_run(paths[2]).run_id and marker["reason"] == "BIOS 2.1"
    assert main(["history", str(tmp_path / "results")]) == 0
    assert "accepted: " in capsys.readouterr().out


def test_the_python_api_gives_one_row_per_run_and_figure_with_the_environment(tmp_path):
    import cxlbench
    _runs(tmp_path, 3, kernel_from=2)
    frame = cxlbench.history(tmp_path / "results")
    assert len(frame) == 3 * 2 and frame["position"].is_monotonic_increasing
    assert frame.groupby("position")["kernel"].first().tolist() == ["6.1.0-synthetic"] * 2 + ["6.2.0-new"]
    assert {"median", "lo", "hi", "precision", "label", "run_label", "started"} <= set(frame.columns)


def test_the_detectable_change_grows_with_the_history_noise_and_never_undercuts_the_threshold():
    from cxlbench.analysis.history_gate import detectable
    rule = Rule()
    assert detectable(0.001, 20, 8, rule) == rule.threshold
    quiet, noisy = detectable(0.03, 20, 8, rule), detectable(0.12, 20, 8, rule)
    assert 0.08 < quiet < 0.12 and 0.35 < noisy < 0.5
    assert detectable(0.03, 20, 1, rule) < quiet       # fewer points: a lighter correction


# ------------------------------------------------------------------ relative to the drift sentinels

def _drifting_runs(tmp_path: Path, n: int, change_from: int, change: float = 1.10) -> list[Path]:
    """Runs whose whole machine drifts 15% from run to run (the case and its DRAM-chase
    sentinel alike); the case alone `change` times slower from run `change_from` on."""
    from tests.fakes import synthetic
    rng = np.random.default_rng(11)
    paths = []
    for i in range(n):
        speed = float(np.exp(rng.normal(0, 0.15)))
        slow = change if i >= change_from else 1.0
        t_case, t_visit = np.linspace(10, 50, 5), np.linspace(0, 60, 3)
        case = synthetic.case_result(
            "latency", "ddr0", {"working_set_bytes": 256 << 20, "page": "4k", "pattern": "random",
                                "chains": 1, "line_bytes": 64},
            {"latency_ns": 200 * speed * slow * np.exp(rng.normal(0, 0.005, 5))},
            sample_params=lambda rep, i, t=t_case: {"t_s": float(t[rep])})
        probe = synthetic.case_result(
            "sentinel", "ddr0", {"probe": "dram_chase", "working_set_bytes": 512 << 20, "page": "4k"},
            {"latency_ns": 180 * speed * np.exp(rng.normal(0, 0.005, 3))},
            sample_params=lambda rep, i, t=t_visit: {"t_s": float(t[rep])})
        p = write_run(tmp_path / "results", [probe, case], suite="ci", label=f"r{i}")
        meta = json.loads((p / "run.json").read_text())
        meta["started"] = (START + pd.Timedelta(minutes=15 * i)).isoformat()
        (p / "run.json").write_text(json.dumps(meta))
        paths.append(p)
    return paths


def test_relative_to_its_sentinel_a_drifting_machine_still_shows_a_10_percent_regression(tmp_path):
    paths = _drifting_runs(tmp_path, 16, change_from=13)
    raw = hist.history(tmp_path / "results")
    rel = hist.history(tmp_path / "results", normalize="dram_chase")
    case = next(p for p in rel.rows["point"].unique() if p.startswith("latency/"))
    assert hist.spread(raw.series(case)["median"][:13]) > 0.10          # the machine's drift
    assert hist.spread(rel.series(case)["median"][:13]) < 0.02          # cancelled relative to it
    assert set(rel.series(case)["relative_to"]) == {"dram_chase"}
    current, later = load_run(paths[13]), [load_run(p) for p in paths[14:]]
    assert judge(raw, current, later).status == PASS                    # lost in the drift
    v = judge(rel, current, later)
    assert v.status == FAIL and v.normalize == "dram_chase"
    slower = v.rows[v.rows["verdict"] == "slower"]
    assert slower["point"].tolist() == [case] and abs(slower["change"].iloc[0] - 0.10) < 0.02
    (cp,) = [c for c in hist.point_changes(rel) if c.point == case]
    assert cp.change.index == 13


def test_a_probe_name_the_sentinels_do_not_have_is_one_line(tmp_path, capsys):
    _drifting_runs(tmp_path, 2, change_from=5)
    assert main(["history", str(tmp_path / "results"), "--normalize", "dram"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "normalize 'dram'" in err


def test_a_point_keeps_one_name_when_the_headline_picks_another_point_in_some_runs(tmp_path):
    rng = np.random.default_rng(1)
    for i in range(4):           # two threads are faster in every run but the first
        def f(case, metric, i=i):
            return (1.5 if i else 0.5) if case.params.get("threads") == 2 else 1.0
        m, tiers = machine(cxl=False)
        results = suite_results(rng, noise=0.01, tiers=("ddr0",), working_sets=[256 << 20], pages=("4k",),
                                kernels=("read",), threads=(1, 2), loaded=False, extras=False, factor=f)
        p = write_run(tmp_path / "results", results, m=m, tiers=tiers, suite="ci", label=f"r{i}")
        meta = json.loads((p / "run.json").read_text())
        meta["started"] = (START + pd.Timedelta(minutes=15 * i)).isoformat()
        (p / "run.json").write_text(json.dumps(meta))
    rows = hist.history(tmp_path / "results").rows
    names = rows.groupby("point")["label"].nunique()
    assert (names == 1).all()
    assert "ddr0 peak read bandwidth (2 threads)" in set(rows["label"])


# ------------------------------------------------------------------ tail metrics

def _one_case_runs(tmp_path: Path, n: int, seed: int, metrics, contiguity=lambda i: None) -> list[Path]:
    """n runs 15 min apart of one latency case (1 GiB, 4 KiB pages): run i's samples
    are metrics(rng, i), its buffers contiguity(i) contiguous (not recorded: None)."""
    from tests.fakes.synthetic import case_result
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        found = {"page_bytes": 4096, "huge_coverage": 0.0}
        if contiguity(i) is not None:
            found["phys_contiguity"] = contiguity(i)
        params = {"working_set_bytes": 1 << 30, "page": "4k", "pattern": "random", "chains": 1,
                  "line_bytes": 64}
        result = case_result("latency", "ddr0", params, metrics(rng, i),
                             sample_params=lambda rep, j, found=found: found)
        m, tiers = machine(cxl=False)
        p = write_run(tmp_path / "results", [result], m=m, tiers=tiers, suite="ci", label=f"r{i}")
        meta = json.loads((p / "run.json").read_text())
        meta["started"] = (START + pd.Timedelta(minutes=15 * i)).isoformat()
        (p / "run.json").write_text(json.dumps(meta))
        paths.append(p)
    return paths


def _tail_runs(tmp_path: Path, n: int, *, doctored_from: int | None = None) -> list[Path]:
    """n runs whose one latency case has a mean and a p99 (as the latency family
    stores them); from run `doctored_from` on, p99 is 20% higher and the mean is not."""
    from tests.fakes.synthetic import noisy

    def metrics(rng, i):
        worse = 1.2 if doctored_from is not None and i >= doctored_from else 1.0
        return {"latency_ns": noisy(rng, 140.0, 0.01, 5), "p99_ns": noisy(rng, 210.0 * worse, 0.01, 5)}
    return _one_case_runs(tmp_path, n, 7, metrics)


def test_gate_fails_a_history_whose_p99_grew_a_fifth_while_the_mean_held(tmp_path, capsys):
    paths = _tail_runs(tmp_path, 16, doctored_from=13)
    out = tmp_path / "gate.json"
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13]),
               "--confirm", "later", "--json", str(out)])
    assert rc == 1 and "REGRESSION" in capsys.readouterr().out
    points = json.loads(out.read_text())["points"]
    slower = {p["point"].rsplit(":", 1)[-1] for p in points if p["verdict"] == "slower"}
    assert slower == {"p99_ns"}


def test_gate_passes_a_run_whose_tail_is_like_its_history(tmp_path, capsys):
    paths = _tail_runs(tmp_path, 16)
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13]),
               "--confirm", "later"])
    assert rc == 0, capsys.readouterr().out


# ------------------------------------------------------------------ physical contiguity

def _contiguity_runs(tmp_path: Path, n: int, slow_from: int, contiguity_from: dict[int, float]) -> list[Path]:
    """n runs of one latency case, 10% slower from run `slow_from`; each run's buffers
    0.94 contiguous unless `contiguity_from` says otherwise from that run on."""
    from tests.fakes.synthetic import noisy

    def contiguity(i):
        return next((v for start, v in sorted(contiguity_from.items(), reverse=True) if i >= start), 0.94)
    return _one_case_runs(tmp_path, n, 11, lambda rng, i: {
        "latency_ns": noisy(rng, 140.0 * (1.1 if i >= slow_from else 1.0), 0.01, 5)}, contiguity)


def test_a_suspect_run_whose_buffers_sat_on_scattered_frames_says_so(tmp_path, capsys):
    paths = _contiguity_runs(tmp_path, 14, slow_from=13, contiguity_from={13: 0.77})
    v = _judge(paths, 13)
    (row,) = v.rows.to_dict("records")
    assert row["verdict"] == "suspect" and row["contiguity_history"] == 0.94 and row["contiguity"] == 0.77
    assert "0.94 → 0.77 of pages on consecutive frames" in row["note"]
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13])])
    assert rc == 3 and "note: " in capsys.readouterr().out


def test_a_suspect_run_on_frames_like_its_history_carries_no_note(tmp_path):
    paths = _contiguity_runs(tmp_path, 14, slow_from=13, contiguity_from={13: 0.86})
    (row,) = _judge(paths, 13).rows.to_dict("records")
    assert row["verdict"] == "suspect" and row["note"] == ""


def test_a_passing_run_carries_no_contiguity_note_whatever_its_frames(tmp_path):
    paths = _contiguity_runs(tmp_path, 14, slow_from=99, contiguity_from={13: 0.5})
    (row,) = _judge(paths, 13).rows.to_dict("records")
    assert row["verdict"] == "pass" and row["contiguity"] == 0.5 and row["note"] == ""


def test_an_l1_chase_keeps_no_contiguity_since_frames_cannot_move_it(tmp_path):
    from tests.fakes.synthetic import case_result
    def found(rep, i):
        return {"page_bytes": 4096, "huge_coverage": 0.0, "phys_contiguity": 0.3}
    l1 = case_result("sentinel", "ddr0", {"probe": "l1_chase", "working_set_bytes": 16 << 10, "page": "4k"},
                     {"latency_ns": [1.1, 1.1, 1.2]}, sample_params=found)
    dram = case_result("sentinel", "ddr0", {"probe": "dram_chase", "working_set_bytes": 512 << 20, "page": "4k"},
                       {"latency_ns": [180.0, 181.0, 179.0]}, sample_params=found)
    rows = hist.run_rows(load_run(write_run(tmp_path / "results", [l1, dram], suite="ci")))
    by_probe = {p.split("probe=")[1].split(",")[0]: c for p, c in zip(rows["case_id"], rows["contiguity"])}
    assert math.isnan(by_probe["l1_chase"]) and by_probe["dram_chase"] == 0.3


def test_a_run_faster_than_its_history_is_called_faster_and_passes(tmp_path):
    from tests.fakes.synthetic import noisy
    paths = _one_case_runs(tmp_path, 14, 3, lambda rng, i: {
        "latency_ns": noisy(rng, 140.0 * (0.9 if i >= 13 else 1.0), 0.01, 5)})
    v = _judge(paths, 13)
    assert v.status == PASS and v.exit_code == 0 and list(v.rows["verdict"]) == ["faster"]
    from cxlbench.cli.history_view import verdict_text
    line = next(x for x in verdict_text(v).splitlines() if x.startswith("ddr0"))
    assert line.split()[-4:-2] == ["<0.001", "<0.001"]     # p and q of the test that called it


def test_an_inconclusive_history_still_gives_every_point_its_note_field(tmp_path):
    v = _judge(_runs(tmp_path, 9, slow_from=8, factor=1.5), 8)
    assert v.status == SHORT and (v.rows["note"] == "").all()


@pytest.mark.parametrize("spoil", ["partial", "damaged"])
def test_gate_against_history_refuses_when_the_newest_run_is_not_complete(tmp_path, capsys, spoil):
    """Without --current the gate judges the newest run: where that one is partial (a
    run cut short) or damaged, judging the complete run before it would pass a CI job
    on older figures."""
    import shutil
    paths = _runs(tmp_path, 12)
    newest = paths[-1].parent / "29991231T000000Z-cut-0000"
    shutil.copytree(paths[-1], newest)
    meta = json.loads((newest / "run.json").read_text())
    if spoil == "partial":
        (newest / "run.json").write_text(json.dumps({**meta, "status": "partial", "run_id": newest.name}))
    else:
        (newest / "run.json").write_text("{damaged")
    rc = main(["gate", "--history", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert rc == 2 and "the newest run cannot be judged" in err and str(newest) in err
    assert "--current" in err and len(err.strip().splitlines()) == 1
    assert main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[-1])]) == 0


# ------------------------------------------------------------------ points the current run lacks

def _spoil_case(run_dir: Path, benchmark: str, status: str, reason: str, keep_samples: bool,
                factor: float = 1.0) -> None:
    """Mark the run's `benchmark` case skipped or failed, as the runner records one;
    a failed case keeps its samples (scaled by `factor`), a skipped one has none."""
    meta = json.loads((run_dir / "run.json").read_text())
    (case,) = [c for c in meta["cases"] if c["benchmark"] == benchmark]
    case.update(status=status, reason=reason)
    (run_dir / "run.json").write_text(json.dumps(meta))
    frame = pd.read_parquet(run_dir / "samples.parquet")
    mine = frame["case_id"] == case["case_id"]
    frame = frame.assign(value=frame["value"].where(~mine, frame["value"] * factor)) if keep_samples \
        else frame[~mine]
    frame.to_parquet(run_dir / "samples.parquet")


def test_a_case_that_stopped_running_is_missing_and_exits_2_unless_allowed(tmp_path, capsys):
    """The gate judged only the points the current run had: a case skipped in it (a
    CXL node gone offline, a hugetlb pool emptied) passed the CI job unseen."""
    paths = _runs(tmp_path, 14)
    _spoil_case(paths[13], "latency", "skipped", "no hugetlb pages reserved", keep_samples=False)
    out = tmp_path / "gate.json"
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13]), "--json", str(out)])
    text = capsys.readouterr().err                  # unusable inputs, exit 2, go to stderr
    assert rc == 2 and "POINTS MISSING" in text and "1 point of the history is missing" in text
    assert "skipped: no hugetlb pages reserved" in text and "--allow-missing" in text
    points = {p["verdict"]: p for p in json.loads(out.read_text())["points"]}
    assert set(points) == {"pass", "missing"} and points["missing"]["current"] is None
    assert points["missing"]["n_history"] == 13 and points["missing"]["baseline"] > 0
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13]), "--allow-missing"])
    assert rc == 0 and "not judged (--allow-missing)" in capsys.readouterr().out


def test_a_case_that_failed_part_way_is_missing_not_judged_on_its_first_repetitions(tmp_path, capsys):
    paths = _runs(tmp_path, 14)
    _spoil_case(paths[13], "latency", "failed", "worker exited with code 255 without a result",
                keep_samples=True, factor=1.5)               # its finished repetitions, much slower
    v = judge(hist.history(tmp_path / "results"), load_run(paths[13]), [], Rule())
    by_verdict = dict(zip(v.rows["verdict"], v.rows["note"]))
    assert v.exit_code == 2 and set(by_verdict) == {"pass", "missing"}
    assert by_verdict["missing"] == "failed: worker exited with code 255 without a result"
    junit = tmp_path / "gate.xml"
    main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13]), "--junit", str(junit)])
    assert 'errors="1"' in junit.read_text() and "missing: failed: worker exited" in junit.read_text()
    assert "its step at" not in junit.read_text()         # a missing point stepped nowhere (it read 'at nan')


def test_a_case_that_failed_part_way_in_the_history_gives_it_no_point(tmp_path):
    """Its first repetitions would have widened the history's run-to-run spread."""
    paths = _runs(tmp_path, 14)
    _spoil_case(paths[4], "latency", "failed", "timed out after 600 s", keep_samples=True, factor=3.0)
    h = hist.history(tmp_path / "results")
    lat = h.rows[h.rows["benchmark"] == "latency"]
    assert sorted(lat["position"]) == [p for p in range(14) if p != 4]
    assert len(h.rows[h.rows["benchmark"] != "latency"]) == 14


def test_a_case_that_stays_gone_is_missing_run_after_run_until_the_change_is_accepted(tmp_path, capsys):
    """Expected were the points of the newest reference run only: a case gone for two
    nightlies failed the first and passed the second, unmentioned."""
    paths = _runs(tmp_path, 15)
    for p in paths[13:]:
        _spoil_case(p, "latency", "skipped", "no CXL node", keep_samples=False)
    assert _judge(paths, 14).exit_code == 2 and _judge(paths, 13).exit_code == 2
    main(["history", str(tmp_path / "results"), "--accept", str(paths[13]), "--reason", "CXL card removed"])
    capsys.readouterr()
    assert "missing" not in set(_judge(paths, 14).rows.get("verdict", pd.Series(dtype=str)))


def test_a_point_only_a_few_runs_of_the_window_had_is_not_asked_for(tmp_path):
    paths = _runs(tmp_path, 14)
    for p in paths[4:]:
        _spoil_case(p, "latency", "skipped", "no CXL node", keep_samples=False)
    v = _judge(paths, 13)
    assert v.status == PASS and set(v.rows["verdict"]) == {"pass"}


def test_a_missing_point_in_a_short_history_is_said_not_a_traceback(tmp_path, capsys):
    """Under 10 runs no point has a verdict: the missing row's NaN neighbours broke the table."""
    paths = _runs(tmp_path, 6)
    _spoil_case(paths[5], "latency", "skipped", "no hugetlb pages reserved", keep_samples=False)
    out = tmp_path / "g.json"
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[5]), "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "skipped: no hugetlb pages reserved" in err and "Traceback" not in err
    assert err.splitlines()[0].endswith("against 5 runs of history — 1 missing")      # no count of unjudged ones
    assert {p["verdict"] for p in json.loads(out.read_text())["points"]} == {"—", "missing"}


def test_a_point_its_case_ran_without_says_so(tmp_path):
    paths = _runs(tmp_path, 14)
    frame = pd.read_parquet(paths[13] / "samples.parquet")
    frame[frame["benchmark"] != "latency"].to_parquet(paths[13] / "samples.parquet")
    v = _judge(paths, 13)
    assert v.exit_code == 2 and v.rows.set_index("verdict").loc["missing", "note"] == "its case ran, without this point"


def test_allow_missing_does_not_cover_a_point_whose_case_timed_out(tmp_path, capsys):
    paths = _runs(tmp_path, 14)
    _spoil_case(paths[13], "latency", "failed", "timed out after 600 s", keep_samples=False)
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[13]), "--allow-missing"])
    err = capsys.readouterr().err
    assert rc == 2 and "1 case of the current run timed out (ddr0 latency" in err


def test_a_step_is_numbered_by_its_run_in_the_whole_history_when_a_run_lacks_the_point(tmp_path):
    """The change point's index counts only the runs that have the point: with run 3
    lacking it, the site and `history` put the step at run 12, the run before it."""
    paths = _runs(tmp_path, 15, slow_from=12)
    _spoil_case(paths[2], "latency", "skipped", "no hugetlb pages reserved", keep_samples=False)
    h = hist.history(tmp_path / "results")
    (lat,) = [c for c in hist.point_changes(h, headlines_only=True) if "latency" in c.label]
    assert (lat.change.index, lat.position, lat.run_id) == (11, 12, load_run(paths[12]).run_id)
    (trend,) = [t for t in hist.trends(h, [lat]) if t.point == lat.point]
    assert trend.steps.startswith("run 13: +")


def test_a_timeout_with_no_history_to_miss_is_an_error_in_every_output(tmp_path, capsys):
    """With 3 runs no point is expected yet: exit 2 came with a JUnit file of no error
    and a headline of "POINTS MISSING" where nothing was missing."""
    paths = _runs(tmp_path, 3)
    _spoil_case(paths[2], "latency", "failed", "timed out after 600 s", keep_samples=False)
    junit = tmp_path / "g.xml"
    rc = main(["gate", "--history", str(tmp_path / "results"), "--current", str(paths[2]), "--junit", str(junit)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("cxlbench gate: inputs unusable — 1 case of the current run timed out")
    assert 'errors="1"' in junit.read_text() and "timed out" in junit.read_text()
