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
    # latency points, bandwidth, loaded: 7 latencies and 6 bandwidths (the idle point's 0 GB/s has no time a GB)
    assert len(b) == 3 + 2 + 7 + 6
    assert len(data["machine_info"]["cxlbench"]["left_out"]) == 1
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


def _with_found_values(rng, label, root):
    """A run whose samples carry values found while measuring, different every run
    (cpu_held, t_s, steps), as real runs' samples do."""
    results = syn.suite_results(rng, **SMALL)
    for r in results:
        for s in r.samples:
            s.params = {**s.params, "cpu_held": float(rng.uniform(0.9, 1.0)), "t_s": float(rng.uniform(0.1, 4)),
                        "steps": int(rng.integers(1e6, 1e8))}
    return syn.write_run(root / "results", results, label=label)


def test_a_points_name_is_what_the_case_asked_never_what_was_found(tmp_path):
    """Two runs of one suite: every exported point has the same name in both, and
    pytest-benchmark compare lists each name once per run."""
    rng = np.random.default_rng(5)
    a, b = (_with_found_values(rng, label, tmp_path) for label in ("a", "b"))
    out_a, out_b = export_pytest_benchmark(a, tmp_path / "0001_a.json"), export_pytest_benchmark(b, tmp_path / "0002_b.json")
    names_a = [x["name"] for x in json.loads(out_a.read_text())["benchmarks"]]
    names_b = [x["name"] for x in json.loads(out_b.read_text())["benchmarks"]]
    assert len(set(names_a)) == len(names_a) and sorted(names_a) == sorted(names_b)
    assert not any(word in n for n in names_a for word in ("cpu_held", "t_s=", "steps="))
    proc = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(out_a), str(out_b),
                           "--columns=median"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in names_a:
        rows = [line for line in proc.stdout.splitlines() if line.startswith(name + " (")]
        assert len(rows) == 2 and any("0001_a)" in r for r in rows) and any("0002_b)" in r for r in rows), name


def test_github_action_benchmark_files_carry_unit_and_direction(tmp_path):
    from cxlbench.export import github_action_benchmark_list
    from cxlbench.results.store import load_run
    run = load_run(_with_found_values(np.random.default_rng(6), "a", tmp_path))
    bigger = github_action_benchmark_list(run, "customBiggerIsBetter")
    smaller = github_action_benchmark_list(run, "customSmallerIsBetter")
    assert bigger and smaller
    assert {x["unit"] for x in bigger} == {"GB/s"} and "ns" in {x["unit"] for x in smaller}
    for x in bigger + smaller:
        assert set(x) == {"name", "unit", "value", "range", "extra"} and x["value"] > 0
        assert "repetitions" in x["extra"]
    assert not {x["name"] for x in bigger} & {x["name"] for x in smaller}
    assert not any("load_threads=0" in x["name"] for x in bigger)    # the idle point's 0 GB/s is no rate
    assert any("load_threads=0" in x["name"] for x in smaller)       # ... its latency is a figure


def test_export_refuses_an_unknown_format_in_one_line(tmp_path, capsys):
    from cxlbench.cli.main import main
    run = _with_found_values(np.random.default_rng(7), "a", tmp_path)
    assert main(["export", str(run), "--format", "csv", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "customBiggerIsBetter" in err
    assert main(["export", str(run), "--format", "customSmallerIsBetter", "-o", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())[0]["unit"]


def test_export_to_dash_writes_the_json_alone_to_stdout_and_no_file(tmp_path, capsys, monkeypatch):
    from cxlbench.cli.main import main
    run = _with_found_values(np.random.default_rng(8), "a", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run), "--format", "customBiggerIsBetter", "-o", "-"]) == 0
    out = capsys.readouterr().out
    points = json.loads(out)  # nothing but the JSON: a pipe into jq reads it whole
    assert points and {p["unit"] for p in points} == {"GB/s"}
    assert not (tmp_path / "-").exists()


def test_a_bandwidth_of_zero_has_no_time_per_byte_and_is_left_out_saying_so(tmp_path, capsys):
    """pytest-benchmark holds seconds: a higher-is-better figure goes in as 1/value, and
    0 GB/s (loaded latency's idle point reads it) has none. The point is left out, the
    file says which and stderr says so; the rest is exported (it had been a traceback)."""
    import pandas as pd
    from cxlbench.cli.main import main
    run = syn.write_run(tmp_path / "results", syn.suite_results(np.random.default_rng(3), **SMALL), label="z")
    samples = run / "samples.parquet"
    frame = pd.read_parquet(samples)
    zeroed = frame["metric"] == "bandwidth_GBps"
    frame.loc[zeroed, "value"] = 0.0
    frame.to_parquet(samples)
    assert main(["export", str(run), "-o", str(tmp_path / "x.json")]) == 0
    err = capsys.readouterr().err
    data = json.loads((tmp_path / "x.json").read_text())
    assert data["benchmarks"] and all(b["extra_info"]["metric"] != "bandwidth_GBps" for b in data["benchmarks"])
    assert data["machine_info"]["cxlbench"]["left_out"] and "no time per unit" in err


def test_a_run_with_no_number_has_nothing_to_export_and_says_so(tmp_path, capsys):
    import pandas as pd
    from cxlbench.cli.main import main
    run = syn.write_run(tmp_path / "results", syn.suite_results(np.random.default_rng(4), **SMALL), label="n")
    samples = run / "samples.parquet"
    pd.read_parquet(samples).assign(value=float("nan")).to_parquet(samples)
    assert main(["export", str(run), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "nothing to export" in err and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("fmt", ["pytest-benchmark", "customBiggerIsBetter"])
def test_a_run_that_measured_no_case_says_how_its_cases_ended_not_that_a_sample_is_not_positive(
        tmp_path, capsys, fmt):
    import pandas as pd
    from cxlbench.cli.main import main
    run = syn.write_run(tmp_path / "results", syn.suite_results(np.random.default_rng(4), **SMALL), label="k")
    meta = json.loads((run / "run.json").read_text())
    for c in meta["cases"]:
        c.update(status="failed", reason="worker killed by SIGKILL (out of memory?)")
    (run / "run.json").write_text(json.dumps(meta))
    frame = pd.read_parquet(run / "samples.parquet")
    frame.iloc[:0].to_parquet(run / "samples.parquet")
    assert main(["export", str(run), "--format", fmt, "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"measured no case whole ({len(meta['cases'])} failed; worker killed by SIGKILL "
                        f"(out of memory?)): nothing to export")


def test_every_time_goes_in_as_seconds_whatever_its_metric_is_called(tmp_path):
    """p50_ns, p99_ns and max_ns went out as raw ns in a file of seconds: pytest-benchmark
    compare showed a p99 of 350 ns as 350 s."""
    p = {"working_set_bytes": 2**30, "page": "4k", "pattern": "random", "chains": 1, "line_bytes": 64}
    spread = np.array([1.0, 1.01, 0.99, 1.02, 0.98])
    run = syn.write_run(tmp_path / "results", [syn.case_result("latency", "ddr0", p, {
        "latency_ns": 110.0 * spread, "p50_ns": 108.0 * spread, "p99_ns": 350.0 * spread,
        "max_ns": 20000.0 * spread})], label="tails")
    data = json.loads(export_pytest_benchmark(run, tmp_path / "t.json").read_text())
    by_metric = {b["extra_info"]["metric"]: b for b in data["benchmarks"]}
    assert set(by_metric) == {"latency_ns", "p50_ns", "p99_ns", "max_ns"}
    for metric, b in by_metric.items():
        assert b["extra_info"]["exported_as"] == "seconds", metric
        assert b["stats"]["median"] == pytest.approx(b["extra_info"]["median"] * 1e-9), metric


def test_a_case_that_failed_part_way_and_the_drift_sentinels_are_not_exported(tmp_path):
    """compare, gate and the headlines leave both out: an export held a failed case's
    first repetitions as its figure and the sentinels' visits as benchmarks."""
    from dataclasses import replace
    from cxlbench.export import github_action_benchmark_list, points_of
    from cxlbench.results.store import load_run
    from tests.test_sentinels import synthetic_run
    sentinelled = load_run(synthetic_run(tmp_path, "s", lambda t: 1.0, 0.01, 0.01, seed=1))
    assert {p["benchmark"] for p in points_of(sentinelled)} == {"latency"}
    assert set(sentinelled.samples["benchmark"]) - {"latency"}            # the visits are in the run
    results = syn.suite_results(np.random.default_rng(3), **SMALL)
    cut = syn.make_run([replace(r, status="failed", reason="worker exited with code 255")
                        if r.case.benchmark == "latency" else r for r in results])
    exported = github_action_benchmark_list(cut, "customSmallerIsBetter")
    assert exported and not any(x["name"].startswith("latency[") for x in exported)


def test_a_direction_the_run_has_no_figure_for_is_one_line_and_exit_2(tmp_path, capsys):
    """github-action-benchmark fails its step on an empty list; the export wrote [] and
    exited 0."""
    from cxlbench.cli.main import main
    lat = syn.write_run(tmp_path / "results", syn.suite_results(
        np.random.default_rng(9), tiers=("ddr0",), working_sets=[2**20], threads=(1,), kernels=("read",),
        pages=("4k",), loaded=False, extras=False), label="l")
    import pandas as pd
    frame = pd.read_parquet(lat / "samples.parquet")
    frame[frame["better"] == "lower"].to_parquet(lat / "samples.parquet")
    assert main(["export", str(lat), "--format", "customBiggerIsBetter", "-o", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no higher-is-better figure" in err and "customSmallerIsBetter" in err
    assert not (tmp_path / "b.json").exists()
    assert main(["export", str(lat), "--format", "customSmallerIsBetter", "-o", str(tmp_path / "s.json")]) == 0


def test_a_point_of_a_run_that_did_not_complete_says_so_in_its_extra(tmp_path):
    from cxlbench.export import github_action_benchmark_list
    from cxlbench.results.store import load_run
    from cxlbench.results.schema import PARTIAL
    results = syn.suite_results(np.random.default_rng(5), **SMALL)
    cut = load_run(syn.write_run(tmp_path / "a", results, status=PARTIAL, label="cut"))
    whole = load_run(syn.write_run(tmp_path / "b", results, label="whole"))
    assert all(x["extra"].endswith("(partial)") for x in github_action_benchmark_list(cut, "customBiggerIsBetter"))
    assert not any("partial" in x["extra"] for x in github_action_benchmark_list(whole, "customBiggerIsBetter"))


def test_export_to_a_closed_stdout_is_refused_not_written_into_nothing(tmp_path):
    """`export -o - >&-` (a CI step whose stdout was closed) wrote the points into
    /dev/null and exited 0: the export, the whole point of the command, was lost."""
    import os
    from pathlib import Path
    run = _with_found_values(np.random.default_rng(8), "a", tmp_path)
    cli = f"{sys.executable} -m cxlbench.cli.main export {run} -o -"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    closed = subprocess.run(["sh", "-c", f"{cli} >&-"], capture_output=True, text=True, env=env, timeout=120)
    assert closed.returncode == 2 and "standard output, which is closed" in closed.stderr
    assert len(closed.stderr.strip().splitlines()) == 1, closed.stderr
    quiet = subprocess.run(["sh", "-c", f"{cli} > /dev/null"], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 0 and "closed" not in quiet.stderr       # the user's own /dev/null is a choice
