"""Adaptive repetitions: a case gets more processes, pass after pass, until its
medians are as precise as asked, its cap is reached or the time budget ends; every
case records the precision it reached and why it stopped."""
import math

import pytest

from cxlbench.analysis.reduction import case_precision
from cxlbench.cli.tier_table import precision_lines
from cxlbench.results.schema import Case, CaseResult, Sample
from cxlbench.results.store import load_run
from cxlbench.runner.run import RunConfig, run


def result(values):
    return CaseResult(Case("x", "cpu:node0", "ddr0", "ddr"), "ok",
                      samples=[Sample("latency_ns", v, r) for r, v in enumerate(values)])


def test_precision_is_the_medians_interval_half_width_relative_to_it():
    assert case_precision(result([100.0, 104.0, 96.0, 102.0, 98.0])) == pytest.approx(0.04)
    assert math.isnan(case_precision(result([100.0])))                  # one trial says nothing


def suite(tmp_path, table: str, top: str = "") -> str:
    path = tmp_path / "s.toml"
    path.write_text(f'repetitions = 4\nprocesses = 4\n{top}\n[[benchmark]]\nname = "fakes.family"\n'
                    f'modes = ["converge", "ok"]\nlevel = 100.0\n{table}\n')
    return str(path)


def go(tmp_path, table="", top="", **config):
    tmp_path.mkdir(exist_ok=True)
    outcome = run(RunConfig(suite(tmp_path, table, top), out=str(tmp_path / "r"),
                            precision_of=case_precision, **config))
    cases = {c["params"]["mode"]: c for c in load_run(outcome.path).meta["cases"]}
    return cases, load_run(outcome.path)


def test_a_case_gets_processes_until_it_reaches_the_precision_asked(tmp_path):
    cases, stored = go(tmp_path, precision=0.10)
    converge = cases["converge"]["info"]["precision"]
    assert converge["stop"] == "reached" and converge["achieved"] <= 0.10
    assert converge["repetitions"] > 4                                  # more than planned
    assert stored.samples[stored.samples["mode"] == "converge"].repetition.nunique() == converge["repetitions"]
    ok = cases["ok"]["info"]["precision"]
    assert ok["repetitions"] > 4 or ok["achieved"] <= 0.10


def test_a_case_stops_at_its_cap_and_says_so(tmp_path):
    cases, _ = go(tmp_path, table="precision = 0.0001\nmax_repetitions = 6")
    p = cases["converge"]["info"]["precision"]
    assert p["repetitions"] == 6 and p["stop"] == "the cap of 6 repetitions" and p["achieved"] > 0.0001


def test_the_time_budget_ends_the_extra_passes(tmp_path):
    """Each extra process sleeps 1 s, so the 12 the cap allows (12 s) can never fit the
    6 s budget, while the 8 planned processes (no sleep; 0.13 s each here when idle, 0.4 s
    with the 2 CPUs 3x oversubscribed) fit it with room: at 2 s the planned pass itself
    ran out on a loaded machine and the case stopped part-way through them instead."""
    cases, _ = go(tmp_path, table="precision = 0.0001\npause_s = 1.0", top="time_budget_s = 6.0")
    p = cases["converge"]["info"]["precision"]
    assert p["stop"] == "the time budget" and p["repetitions"] < 16


def test_without_a_target_every_case_still_records_its_precision(tmp_path):
    cases, stored = go(tmp_path)
    assert all(c["info"]["precision"]["repetitions"] == 4 and "target" not in c["info"]["precision"]
               for c in cases.values())
    lines = precision_lines(stored.meta)
    assert len(lines) == 1 and lines[0].startswith("precision of the medians (95% interval): median ±")


def test_the_summary_says_how_many_cases_reached_the_target(tmp_path):
    _, stored = go(tmp_path, table="precision = 0.0001\nmax_repetitions = 5")
    assert precision_lines(stored.meta)[1] == \
        "target ±0.01%: 1 of 2 cases reached it; 1 stopped at the cap of 5 repetitions"
    _, stored = go(tmp_path / "easy", table="precision = 0.5")
    assert precision_lines(stored.meta)[1] == "target ±50%: 2 of 2 cases reached it"


def test_an_extra_process_that_dies_ends_the_extra_passes_not_the_planned_measurement(tmp_path):
    """The planned repetitions were all measured when a process asked for precision
    died: the case was failed, its figure gone and the gate counted it missing."""
    path = tmp_path / "s.toml"
    path.write_text('repetitions = 4\nprocesses = 4\n[[benchmark]]\nname = "fakes.family"\n'
                    'modes = ["extra_dies"]\nlevel = 100.0\nprecision = 0.0001\n')
    stored = load_run(run(RunConfig(str(path), out=str(tmp_path / "r"), precision_of=case_precision)).path)
    [case] = stored.meta["cases"]
    assert case["status"] == "ok" and sorted(stored.samples["repetition"]) == [0, 1, 2, 3]
    assert case["info"]["precision"]["stop"] == "a process that failed (its warning says why)"
    assert case["info"]["precision"]["repetitions"] == 4
    assert "process 5 of 5 failed" in case["info"]["repetitions_measured"]
    assert any("worker" in w and "process 5" in w for w in case["info"]["warnings"])
    assert [p["status"] for p in case["info"]["processes"]] == ["ok"] * 4 + ["failed"]


def test_a_process_that_keeps_nothing_still_uses_up_its_repetitions(tmp_path):
    """Loaded latency drops every point of a repetition on a busy machine: the next
    process must not reuse its numbers, nor the case ask for processes forever."""
    path = tmp_path / "s.toml"
    path.write_text('repetitions = 4\nprocesses = 4\n[[benchmark]]\nname = "fakes.family"\n'
                    'modes = ["first4"]\nlevel = 100.0\nprecision = 0.0001\nmax_repetitions = 9\n')
    outcome = run(RunConfig(str(path), out=str(tmp_path / "r"), precision_of=case_precision))
    [case] = load_run(outcome.path).meta["cases"]
    assert case["info"]["precision"]["stop"] == "the cap of 9 repetitions"
    assert case["info"]["precision"]["repetitions"] == 4                 # kept; 9 were run
    assert [p["repetitions"] for p in case["info"]["processes"]][4:] == [[4, 4], [5, 5], [6, 6], [7, 7], [8, 8]]


def planned_case(estimate_s: float, target: float = 0.05):
    from types import SimpleNamespace as NS
    return NS(spec=NS(precision=target, max_repetitions=20), one_process=False, skip=None,
              case=Case("x", "cpu:node0", "ddr0", "ddr", repetitions=5), processes=1, estimate_s=estimate_s)


def extra_passes(planned, precisions, budget_s):
    """The cases adaptive() gives processes to, in order, with each case's precision
    held as given and every process taking its estimate off the budget."""
    from cxlbench.runner import processes
    results = {i: result([100.0] * 5) for i in range(len(planned))}
    held = {id(r): precisions[i] for i, r in results.items()}
    extra, spent, served = processes.Extra({}, {}), [0.0], []
    progress = type("P", (), {"add": lambda self, s: None})()
    for piece, estimate in processes.adaptive(planned, results, lambda r: held[id(r)],
                                              lambda: budget_s - spent[0], progress, extra):
        served.append(piece.index)
        spent[0] += estimate
    return served, extra.stopped


def test_the_last_extra_processes_go_to_the_cases_nearest_their_target():
    served, stopped = extra_passes([planned_case(1.0) for _ in range(3)], [0.50, 0.06, 0.20], 2.5)
    assert served == [1, 2] and stopped == "the time budget"           # 1.2 s each: room for two


def test_a_case_too_long_for_the_time_left_gives_way_to_a_shorter_one():
    served, stopped = extra_passes([planned_case(50.0), planned_case(1.0)], [0.06, 0.30], 2.5)
    assert served == [1, 1] and stopped == "the time budget"


def test_the_far_tail_is_not_what_a_cases_precision_speaks_of():
    from cxlbench.benchmarks.tails import FAR_TAIL
    mean = [100.0, 104.0, 96.0, 102.0, 98.0]
    max_ns = [900.0, 9000.0, 1500.0, 30000.0, 2000.0]        # one interrupt in one process
    r = CaseResult(Case("x", "cpu:node0", "ddr0", "ddr"), "ok",
                   samples=[Sample("latency_ns", v, i) for i, v in enumerate(mean)] +
                           [Sample("max_ns", v, i) for i, v in enumerate(max_ns)] +
                           [Sample("p50_ns", v - 3, i) for i, v in enumerate(mean)])
    assert case_precision(r) > 1.0                                   # judged, the max decides
    assert case_precision(r, skip=FAR_TAIL) == pytest.approx(0.04, rel=0.1)   # the mean and p50 do
    assert "p50_ns" not in FAR_TAIL and {"p99_ns", "max_ns", "floor_p99_9_ns"} <= FAR_TAIL


def test_a_worst_precision_past_half_says_why_it_can_be_so_loose():
    """make bench printed "worst ±298%" (a 12 MiB chase at the L3's edge) with no word."""
    def meta(worst):
        return {"cases": [{"case_id": "a", "info": {"precision": {"achieved": 0.02}}},
                          {"case_id": "b", "info": {"precision": {"achieved": worst}}}]}
    assert "repetitions that disagree" in precision_lines(meta(2.98))[0]
    assert "disagree" not in precision_lines(meta(0.2))[0]
