"""Drift sentinels: every run with a host memory family carries its own drift trace,
visited between cases; the trace is drawn and summarised; the sentinels never
become cases of a comparison; and judging relative to them is an opt-in that
removes a drift the case shares and adds noise the case does not."""
import json
from pathlib import Path

import numpy as np
import pytest

from cxlbench.analysis import compare, drift, gate
from cxlbench.analysis.drift_evidence import evidence
from cxlbench.benchmarks import sentinel
from cxlbench.benchmarks.spec import of
from cxlbench.cli.main import main
from cxlbench.cli.tier_table import tier_summary
from cxlbench.report import render_run_html
from cxlbench.results.store import ResultsError, load_run
from cxlbench.runner.run import RunConfig, build_env, run
from tests.fakes import synthetic

FIXTURES = Path(__file__).parent / "fixtures"
SMALL = 'dram_working_set = "1MiB"\ntriad_array = "1MiB"\nsamples = 2\n'


def suite(tmp_path, top: str, modes=("ok", "ok")) -> str:
    path = tmp_path / "s.toml"
    path.write_text(f'min_sample_s = 0.01\nrepetitions = 2\nprocesses = 2\n{top}\n'
                    f'[[benchmark]]\nname = "fakes.family"\nmodes = {json.dumps(list(modes))}\n')
    return str(path)


# ---- the family ---------------------------------------------------------------------------

def test_three_probes_on_the_first_ddr_tier_sized_from_the_caches():
    env = build_env(str(FIXTURES / "two_socket_cxl"), [])
    planned = sentinel.plan(of(sentinel), env)
    assert [p.case.params["probe"] for p in planned] == ["l1_chase", "dram_chase", "triad"]
    assert {(p.case.initiator, p.case.target) for p in planned} == {("cpu:node0", "ddr0")}
    dram, triad = planned[1].case.params, planned[2].case.params
    assert dram["working_set_bytes"] >= 4 * sum(c.size_bytes for c in env.machine.cpu.caches
                                                if c.kind in ("Data", "Unified"))
    assert 3 * triad["array_bytes"] >= dram["working_set_bytes"] // 2 and triad["threads"] == 1


def test_sentinels_that_would_hold_too_much_memory_are_planned_skipped_with_the_reason():
    env = build_env(str(FIXTURES / "two_socket_cxl"), [])
    planned = sentinel.plan(of(sentinel, dram_working_set="64TiB"), env)
    assert planned and all("hold" in p.skip and "free memory" in p.skip for p in planned)


def test_a_visit_keeps_every_sample_with_its_time(tmp_path):
    env = build_env("/", [])
    spec = of(sentinel, dram_working_set="1MiB", triad_array="1MiB", samples=2, min_sample_s=0.01,
              repetitions=2)
    cases = [p.case for p in sentinel.plan(spec, env)]
    from dataclasses import replace
    samples = sentinel.measure(cases[1], replace(env, spec=spec), {})
    assert [s.repetition for s in samples] == [0, 0, 1, 1]          # 2 visits x 2 samples
    assert all(s.metric == "latency_ns" and s.value > 0 for s in samples)
    times = [s.params["t_s"] for s in samples]
    assert times == sorted(times) and times[0] < times[-1]


# ---- the runner -----------------------------------------------------------------------------

def test_a_suite_whose_families_declare_no_sentinel_gets_none_and_says_why(tmp_path):
    outcome = run(RunConfig(suite(tmp_path, ""), out=str(tmp_path / "r")))
    stored = load_run(outcome.path)
    assert outcome.sentinels == [] and "sentinel" not in set(stored.samples.benchmark)
    assert "declares" in stored.meta["sentinels"]["off"]


def test_visits_come_at_the_start_between_processes_and_at_the_end(tmp_path):
    outcome = run(RunConfig(suite(tmp_path, f"[sentinels]\ninterval_s = 0\n{SMALL}"), out=str(tmp_path / "r")))
    stored = load_run(outcome.path)
    assert [r.status for r in outcome.results] == ["ok", "ok"]          # the suite's cases only
    assert [r.status for r in outcome.sentinels] == ["ok"] * 3
    s = stored.samples
    sent, cases = s[s.benchmark == "sentinel"], s[s.benchmark != "sentinel"]
    visits = stored.meta["sentinels"]["visits"]
    assert visits == 1 + 4 + 1                                          # start, before each process, end
    assert sorted(sent.repetition.unique()) == list(range(visits))
    first = sent.groupby("repetition").t_s.min()
    assert first.is_monotonic_increasing
    assert cases.t_s.between(first.iloc[0], first.iloc[-1]).all()       # every case between visits
    assert "drift (6 visits" in tier_summary(s, stored.meta)


def test_sentinels_false_turns_them_off_for_any_suite(tmp_path):
    outcome = run(RunConfig(suite(tmp_path, "sentinels = false"), out=str(tmp_path / "r")))
    assert load_run(outcome.path).meta["sentinels"] == {"off": "the suite turns them off (sentinels = false)"}


def test_a_probe_that_cannot_be_built_leaves_its_cases_skipped_and_the_run_goes_on(tmp_path):
    outcome = run(RunConfig(suite(tmp_path, '[sentinels]\ndram_working_set = "64TiB"\n'),
                            out=str(tmp_path / "r")))
    stored = load_run(outcome.path)
    assert outcome.status == "complete" and [r.status for r in outcome.results] == ["ok", "ok"]
    assert {r.status for r in outcome.sentinels} == {"skipped"}
    assert "drift: no sentinels (the sentinels would hold" in tier_summary(stored.samples, stored.meta)


def test_a_probe_killed_by_sigkill_says_out_of_memory_as_a_case_s_worker_does():
    """The OOM killer's signal: an ordinary case's worker got the hint, the probe only
    its exit code (-9)."""
    import os
    import signal
    import time
    from cxlbench.runner.sentinels import _CTX, Watch
    watch = Watch(None, None, None, 0.0)
    watch.conn, child = _CTX.Pipe()
    watch.proc = _CTX.Process(target=time.sleep, args=(60,), daemon=True)
    watch.proc.start()
    child.close()
    os.kill(watch.proc.pid, signal.SIGKILL)
    status, reason = watch._receive(30)
    watch._stop()
    assert status == "failed"
    assert reason == ("the probe process killed by SIGKILL (out of memory? the kernel's OOM killer "
                      "sends SIGKILL)")


@pytest.mark.parametrize("top, says", [('sentinels = "yes"', "expected true, false or a table"),
                                        ("[sentinels]\nintervall_s = 5", "'intervall_s'")])
def test_a_sentinel_setting_it_cannot_honour_exits_2_in_one_line(tmp_path, capsys, top, says):
    code = main(["run", "--suite", suite(tmp_path, top), "--out", str(tmp_path / "r"), "--no-report"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


# ---- the trace, relative values, and comparisons (synthetic runs) -------------------------------

def synthetic_run(tmp_path, label, machine_speed, case_noise=0.0, sentinel_noise=0.0, seed=0, visits=5,
                  change=1.0):
    """A DRAM chase case measured 5 times through the run and a DRAM chase sentinel
    visited `visits` times; `machine_speed(t)` multiplies both (the common drift)."""
    rng = np.random.default_rng(seed)
    span = 120.0
    t_case = np.linspace(10, span - 10, 5)
    t_visit = np.linspace(0, span, visits)
    x = 200 * change * np.array([machine_speed(t) for t in t_case]) * np.exp(rng.normal(0, case_noise, 5))
    s = 180 * np.array([machine_speed(t) for t in t_visit]) * np.exp(rng.normal(0, sentinel_noise, visits))
    case = synthetic.case_result("latency", "ddr0", {"working_set_bytes": 256 << 20, "page": "4k",
                                                     "pattern": "random", "chains": 1, "line_bytes": 64},
                                 {"latency_ns": x}, sample_params=lambda rep, i: {"t_s": float(t_case[rep])})
    probe = synthetic.case_result("sentinel", "ddr0", {"probe": "dram_chase", "working_set_bytes": 512 << 20,
                                                       "page": "4k"},
                                  {"latency_ns": s}, sample_params=lambda rep, i: {"t_s": float(t_visit[rep])})
    return synthetic.write_run(tmp_path / "r", [probe, case], label=label)


def test_the_trace_is_each_visit_relative_to_the_probes_run_median(tmp_path):
    path = synthetic_run(tmp_path, "a", lambda t: 1.0 + (0.2 if t > 60 else 0.0))
    r = load_run(path)
    t = drift.trace(r.samples, r.meta)
    assert list(t.visit) == [0, 1, 2, 3, 4] and list(t.t_s) == [0, 30, 60, 90, 120]
    assert np.allclose(t.relative, [1, 1, 1, 1.2, 1.2])
    assert drift.drift_line(r.samples, r.meta) == \
        "drift (5 visits over 2.0 min, each ÷ its run median): DRAM chase +0.0…+20.0%"


def test_normalising_removes_a_drift_the_case_shares_with_its_sentinel(tmp_path):
    path = synthetic_run(tmp_path, "a", lambda t: 1.0 + t / 120)       # the machine slows steadily
    r = load_run(path)
    raw = drift.cases_only(r.samples, r.meta)
    rel = drift.normalize(r.samples, r.meta)
    assert raw.value.max() / raw.value.min() > 1.5
    assert np.allclose(rel.value, rel.value.iloc[0]) and set(rel.sentinel) == {"dram_chase"}


def test_the_sentinels_are_never_cases_of_a_comparison_or_the_gate(tmp_path):
    a = synthetic_run(tmp_path, "a", lambda t: 1.0)
    b = synthetic_run(tmp_path, "b", lambda t: 1.0)
    cmp = compare([a, b])
    assert set(cmp.rows.benchmark) == {"latency"} and "sentinel" not in set(cmp.points.benchmark)
    assert "sentinel" not in json.dumps(gate(a, b).to_dict()["cases"])


def test_a_whole_machine_slower_for_one_run_is_a_regression_raw_and_no_change_relative(tmp_path):
    a = synthetic_run(tmp_path, "a", lambda t: 1.0, 0.01, 0.01, seed=1)
    b = synthetic_run(tmp_path, "b", lambda t: 1.3, 0.01, 0.01, seed=2)
    assert set(gate(a, b, threshold="5%", thresholds_file=None).rows.verdict) == {"slower"}
    judged = gate(a, b, threshold="5%", normalize="sentinel")
    assert judged.exit_code == 0 and set(judged.rows.verdict) == {"same"}
    assert "relative to the drift sentinels" in judged.markdown()
    text = compare([a, b], normalize="sentinel")
    assert text.sentinels[1][0][0] == "DRAM chase" and text.sentinels[1][0][1] == pytest.approx(1.3, rel=0.05)


def test_compare_normalized_writes_the_same_verdicts_to_its_page_and_says_how(tmp_path, capsys):
    """The terminal said "same" relative to the sentinels while the page written beside
    it said +29% slower, raw, with nothing on it saying which."""
    import re
    from cxlbench.cli.main import main
    a = synthetic_run(tmp_path, "a", lambda t: 1.0, 0.01, 0.01, seed=1)
    b = synthetic_run(tmp_path, "b", lambda t: 1.3, 0.01, 0.01, seed=2)
    page = tmp_path / "n.html"
    assert main(["compare", str(a), str(b), "--normalize", "sentinel", "--threshold", "5%", "-o", str(page)]) == 0
    html = page.read_text()
    assert "judged relative to the drift sentinels" in html
    cells = r'<td><span class="verdict (\w+)">[^<]*(?:same|slower|faster|inconclusive)'   # the verdicts' column
    assert set(re.findall(cells, html)) == {"same"}
    raw = tmp_path / "raw.html"
    assert main(["compare", str(a), str(b), "--threshold", "5%", "-o", str(raw)]) == 0
    assert set(re.findall(cells, raw.read_text())) == {"slower"}
    assert "judged relative" not in raw.read_text()


def test_a_real_regression_is_still_called_relative_to_the_sentinels(tmp_path):
    a = synthetic_run(tmp_path, "a", lambda t: 1.0, 0.01, 0.01, seed=1)
    b = synthetic_run(tmp_path, "b", lambda t: 1.0, 0.01, 0.01, seed=2, change=1.3)
    assert set(gate(a, b, threshold="5%", normalize="sentinel").rows.verdict) == {"slower"}


def test_normalising_a_run_without_sentinels_is_refused_in_one_line(tmp_path, capsys):
    a = synthetic_run(tmp_path, "a", lambda t: 1.0)
    rng = np.random.default_rng(3)
    bare = synthetic.write_run(tmp_path / "r", synthetic.suite_results(rng, tiers=("ddr0",), extras=False))
    with pytest.raises(ResultsError, match="no drift sentinels"):
        compare([a, bare], normalize="sentinel")
    code = main(["gate", "--baseline", str(a), "--current", str(bare), "--normalize", "sentinel"])
    assert code == 2 and "no drift sentinels" in capsys.readouterr().err


def test_evidence_adopts_the_ratio_only_where_the_shared_drift_dominates(tmp_path):
    drifting = [synthetic_run(tmp_path, f"d{i}", lambda t, k=i: 1 + 0.15 * k, 0.01, 0.01, seed=i)
                for i in range(5)]
    [e] = evidence(drifting)
    assert e.quieter and e.corr > e.needed and e.ratio_between < e.raw_between / 3
    still = [synthetic_run(tmp_path, f"s{i}", lambda t: 1.0, 0.02, 0.10, seed=10 + i) for i in range(5)]
    [e] = evidence(still)
    assert not e.quieter and e.ratio_between > e.raw_between


def test_the_report_draws_the_drift_trace_and_prints_the_drift_line(tmp_path):
    path = synthetic_run(tmp_path, "a", lambda t: 1.0 + (0.2 if t > 60 else 0.0))
    html = render_run_html(path)
    section = html[html.index('<section id="family-sentinel"'):]
    assert "<h2>Drift sentinels</h2>" in section and "<svg" in section
    assert "time since the run started (s)" in section and "DRAM chase +0.0…+20.0%" in section
    assert "Each probe over the run, relative to its median" in section


def test_normalising_by_named_probes_leaves_the_other_cases_raw(tmp_path):
    a = synthetic_run(tmp_path, "a", lambda t: 1.0, 0.01, 0.01, seed=1)
    b = synthetic_run(tmp_path, "b", lambda t: 1.3, 0.01, 0.01, seed=2)
    assert set(compare([a, b], threshold="5%", normalize="triad").rows.verdict) == {"slower"}
    assert set(compare([a, b], threshold="5%", normalize="dram_chase").rows.verdict) == {"same"}
    with pytest.raises(ResultsError, match="probes by name"):
        compare([a, b], normalize="l3_chase")


def test_processes_that_cannot_be_started_fail_their_cases_with_the_reason_and_the_run_ends(tmp_path, monkeypatch):
    """At `ulimit -n 10` the probe's start raised, the run waited a minute for a probe
    that never started and ended in a traceback; a worker's start was reported as a
    failure to write the run."""
    import errno
    from cxlbench.runner import sentinels, worker

    class NoRoom:
        def __init__(self, real):
            self.real = real

        def Pipe(self, *args, **kwargs):
            return self.real.Pipe(*args, **kwargs)

        def Process(self, *args, **kwargs):
            proc = self.real.Process(*args, **kwargs)
            proc.start = lambda: (_ for _ in ()).throw(OSError(errno.EMFILE, "Too many open files"))
            return proc
    for module in (worker, sentinels):
        monkeypatch.setattr(module, "_CTX", NoRoom(module._CTX))
    outcome = run(RunConfig(suite(tmp_path, f"[sentinels]\ninterval_s = 0\n{SMALL}"), out=str(tmp_path / "r")))
    assert outcome.status == "complete"
    for r in outcome.results + outcome.sentinels:
        assert r.status == "failed" and "could not be started (Too many open files)" in r.reason, r.reason
    assert "ulimit -n" in outcome.results[0].reason
    assert load_run(outcome.path).meta["sentinels"]["visits"] == 0
