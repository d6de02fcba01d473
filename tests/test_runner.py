"""The runner: a worker's crash is one failed case, the run goes on; an interrupted run
loads as partial; bad input is one line and a non-zero exit."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cxlbench

from tests.signals import default_dispositions

from cxlbench.results.store import find_runs, load_run
from cxlbench.runner.run import RunConfig, run

TESTS = Path(__file__).parent


def suite_file(tmp_path, modes, table=None, **extra):
    lines = [f'{k} = {json.dumps(v)}' for k, v in extra.items()]
    lines += ["[[benchmark]]", 'name = "fakes.family"', f"modes = {json.dumps(modes)}"]
    lines += [f'{k} = {json.dumps(v)}' for k, v in (table or {}).items()]
    path = tmp_path / "s.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def statuses(outcome):
    return [(r.case.params["mode"], r.status) for r in outcome.results]


def test_a_run_in_which_every_case_failed_exits_non_zero_with_the_reason(tmp_path, capsys):
    """A run that measured nothing (every worker refused to start under a low file
    limit, every pin refused in a cpuset) had ended 'run complete', exit 0: a CI job
    passed on it."""
    from cxlbench.cli.main import main
    out = tmp_path / "r"
    code = main(["run", "--suite", suite_file(tmp_path, ["raise", "raise", "skip"], repetitions=1),
                 "--out", str(out), "--no-report"])
    said = capsys.readouterr()
    err = said.err.strip().splitlines()
    assert code == 1 and err[-1].startswith("cxlbench: error: the run measured no case: 2 failed, 1 skipped; ")
    assert "run complete, nothing measured: " in said.out
    assert "the kernel refused" in err[-1]
    assert load_run(next(out.glob("*/*"))).status == "complete"        # what was recorded stays
    ok = main(["run", "--suite", suite_file(tmp_path, ["raise", "ok"], repetitions=1), "--out", str(out),
               "--no-report"])
    assert ok == 0                                                     # one case measured: the run stands


def test_crashes_errors_and_skips_cost_one_case_each(tmp_path):
    modes = ["ok", "crash", "segfault", "raise", "skip", "ok"]
    outcome = run(RunConfig(suite_file(tmp_path, modes, repetitions=3), out=str(tmp_path / "r")))
    assert statuses(outcome) == [("ok", "ok"), ("crash", "failed"), ("segfault", "failed"),
                                 ("raise", "failed"), ("skip", "skipped"), ("ok", "ok")]
    reasons = {r.case.params["mode"]: r.reason for r in outcome.results}
    assert "SIGKILL" in reasons["crash"] and "out of memory" in reasons["crash"]
    assert "SIGSEGV" in reasons["segfault"]
    assert "RuntimeError: the kernel refused" in reasons["raise"]
    assert reasons["skip"] == "needs a CXL node"
    stored = load_run(outcome.path)
    assert stored.status == "complete"
    assert len(stored.samples) == 6                 # two ok cases × 3 repetitions
    assert list(stored.cases().status) == [s for _, s in statuses(outcome)]


def test_hung_case_times_out_and_run_continues(tmp_path):
    # The timeout holds the ok case's worker too: 5 s leaves a loaded machine's
    # interpreter start (0.13 s idle, 0.6 s with the CPUs 3x oversubscribed) ample room.
    outcome = run(RunConfig(suite_file(tmp_path, ["hang", "ok"], case_timeout_s=5),
                            out=str(tmp_path / "r")))
    assert statuses(outcome) == [("hang", "failed"), ("ok", "ok")]
    assert "timed out" in outcome.results[0].reason


def test_time_budget_skips_what_does_not_fit(tmp_path):
    outcome = run(RunConfig(suite_file(tmp_path, ["ok", "ok"]), out=str(tmp_path / "r"),
                            time_budget_s=0.05))
    assert [r.status for r in outcome.results] == ["skipped", "skipped"]
    assert "time budget" in outcome.results[0].reason


def _cli(*args, cwd, stderr_to=subprocess.PIPE, **kw):
    """`cxlbench ARGS` in a process of its own, run in `cwd` (a tmp_path: the report it
    renders by default goes to ./reports) with this tree's cxlbench and the test fakes."""
    path = os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.Popen([sys.executable, "-m", "cxlbench.cli.main", *args], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=stderr_to, text=True,
                            preexec_fn=default_dispositions, **kw)


def _wait_for_cases(out, n, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(Path(out).glob("*/*/run.json"))
        if runs and len(json.loads(runs[0].read_text())["cases"]) >= n:
            return
        time.sleep(0.1)
    raise AssertionError("the run never recorded its first case")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_interrupted_run_keeps_what_finished_and_loads_as_partial(tmp_path, sig):
    out = tmp_path / "r"
    proc = _cli("run", "--suite", suite_file(tmp_path, ["ok", "hang", "ok"], repetitions=3),
                "--out", str(out), cwd=tmp_path)
    _wait_for_cases(out, 1)
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0
    [path] = find_runs(out)
    stored = load_run(path)
    assert stored.status == "partial"
    assert len(stored.samples) == 3 and set(stored.samples.case_id) == {stored.cases().case_id[0]}
    if sig != signal.SIGKILL:            # a scheduler's SIGTERM, a closed terminal's SIGHUP: as Ctrl-C
        assert "Traceback" not in err and "interrupted: keeping the cases that finished" in err
        assert stored.meta.get("interrupted") is True and proc.returncode == 128 + sig


def test_a_second_ctrl_c_while_the_first_is_handled_does_not_break_off_the_runs_closing(tmp_path):
    """An impatient second Ctrl-C had landed in the closing (the worker's end, the
    samples' merge) and left run.json 'running', its samples unmerged."""
    out = tmp_path / "r"
    proc = _cli("run", "--suite", suite_file(tmp_path, ["ok", "hang", "ok"], repetitions=3),
                "--out", str(out), "--no-report", cwd=tmp_path)
    _wait_for_cases(out, 1)
    time.sleep(0.3)
    for _ in range(4):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
    _, err = proc.communicate(timeout=30)
    [path] = find_runs(out)
    stored = load_run(path)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert stored.status == "partial" and (Path(path) / "samples.parquet").exists()


def test_a_run_whose_log_reader_leaves_measures_to_the_end(tmp_path):
    """`cxlbench run ... 2>&1 | head -2` in a CI job: the progress has nowhere to go
    once head exits, and the run goes on measuring to its end, complete."""
    out = tmp_path / "r"
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as gone:
        proc = _cli("run", "--suite", suite_file(tmp_path, ["ok", "ok"], repetitions=2), "--out", str(out),
                    "--no-report", cwd=tmp_path, stderr_to=gone)
        proc.communicate(timeout=120)
    [path] = find_runs(out)
    assert proc.returncode == 0 and load_run(path).status == "complete"


@pytest.mark.parametrize("args, message", [
    (["run", "--suite", "no-such-suite"], "unknown suite 'no-such-suite'"),
    (["run", "--tier", "tape=node:0"], "tape"),
    (["run", "--tier", "cxl=node:99"], "99"),
    (["run", "--out", "/etc/hostname"], "not a results directory"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    proc = _cli(*args, cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and message in err


def test_a_count_no_machine_could_finish_is_a_typo_refused_before_anything_runs(tmp_path):
    """repetitions = 10^14 had reached the worker's wait and overflowed the OS clock."""
    (tmp_path / "s.toml").write_text('name = "s"\nrepetitions = 99999999999999\n[[benchmark]]\n'
                                     'name = "latency"\ntiers = ["ddr"]\nworking_set = ["16KiB"]\n')
    proc = _cli("run", "--suite", "s.toml", "--out", "r", cwd=tmp_path)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "repetitions = 99999999999999: must be ≤ 1,000,000" in err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------ processes

def test_processes_share_repetitions_evenly_and_never_run_empty():
    from cxlbench.runner.processes import shares
    assert shares(5, 5) == [1, 1, 1, 1, 1]
    assert shares(5, 2) == [3, 2]
    assert shares(2, 5) == [1, 1]
    assert shares(5, 1) == [5]


def test_passes_run_every_case_once_before_any_case_twice():
    from cxlbench.runner.processes import slices
    order = slices([(4, 2), (0, 3), (3, 3)])         # case 1 is skipped: one slice
    assert [(s.index, s.process, s.first, s.count) for s in order] == [
        (0, 0, 0, 2), (1, 0, 0, 0), (2, 0, 0, 1), (0, 1, 2, 2), (2, 1, 1, 1), (2, 2, 2, 1)]


def test_repetitions_spread_over_processes_are_numbered_across_them(tmp_path):
    outcome = run(RunConfig(suite_file(tmp_path, ["stamp", "stamp"], repetitions=5, processes=3),
                            out=str(tmp_path / "r")))
    stored = load_run(outcome.path)
    assert stored.status == "complete"
    for i, grp in stored.samples.groupby("i"):
        assert sorted(grp["repetition"]) == [0, 1, 2, 3, 4]
        assert grp["pid"].nunique() == 3                 # a fresh worker per process
        assert sorted(grp["seed"]) == [1, 2, 3, 4, 5]   # and a fresh permutation per repetition
    cases = stored.meta["cases"]
    assert [c["samples"] for c in cases] == [5, 5]
    assert [p["repetitions"] for p in cases[0]["info"]["processes"]] == [[0, 1], [2, 3], [4, 4]]
    # what a process leaves beside its samples (histograms, per-repetition records) is numbered alike
    h = cxlbench.histograms(outcome.path)
    assert sorted(h[h.i == 0].repetition) == [0, 1, 2, 3, 4]
    info = cases[0]["info"]
    records = info["distribution"] + [d for p in info["processes"][1:] for d in p["info"]["distribution"]]
    assert sorted((d["repetition"], d["seed"]) for d in records) == [(g, g + 1) for g in range(5)]
    assert "histograms" not in info and not any("histograms" in p.get("info", {}) for p in info["processes"])
    # interleaved: case 1's first process ran before case 0's second
    s = stored.samples
    first_of_1 = s[(s.i == 1) & (s.repetition == 0)].t_ns.iloc[0]
    second_of_0 = s[(s.i == 0) & (s.repetition == 2)].t_ns.iloc[0]
    assert first_of_1 < second_of_0


def test_a_process_that_dies_fails_its_case_and_keeps_what_the_others_measured(tmp_path):
    outcome = run(RunConfig(suite_file(tmp_path, ["second_crashes", "ok"], repetitions=4, processes=2,
                                       table={"scratch": str(tmp_path)}), out=str(tmp_path / "r")))
    assert statuses(outcome) == [("second_crashes", "failed"), ("ok", "ok")]
    assert outcome.results[0].reason.startswith("process 2 of 2: worker killed by SIGKILL")
    stored = load_run(outcome.path)
    kept = stored.samples[stored.samples["mode"] == "second_crashes"]
    assert sorted(kept["repetition"]) == [0, 1]
    assert stored.meta["cases"][0]["status"] == "failed"



def test_a_checkout_without_the_c_core_is_one_clear_line(tmp_path, monkeypatch):
    import types
    from cxlbench.runner.suite import SuiteError
    empty = types.ModuleType("cxlbench._native")      # what the source folder imports as, unbuilt
    empty.__file__ = None
    monkeypatch.setitem(sys.modules, "cxlbench._native", empty)
    with pytest.raises(SuiteError, match="C core .* is not built: run `make setup`"):
        run(RunConfig(suite_file(tmp_path, ["ok"]), out=str(tmp_path / "r")))
    assert not (tmp_path / "r").exists()                 # nothing half-written


def test_a_budget_spent_between_processes_keeps_what_was_measured_as_ok(tmp_path, monkeypatch):
    """Each process 'takes' one second of a fake clock: the budget (2.5 s) covers the
    first pass and one more process, then cuts the cases short; what they measured
    stands, as ok, with how much of it there is."""
    import types
    from cxlbench.results.schema import OK, CaseResult, Sample
    from cxlbench.runner import run as run_mod
    clock = {"t": 0.0}

    def fake_case(case, ref, env, timeout, installation=None):
        clock["t"] += 1.0
        return CaseResult(case, OK, samples=[Sample("latency_ns", 1.0, r) for r in range(case.repetitions)])
    monkeypatch.setattr(run_mod, "run_case", fake_case)
    monkeypatch.setattr(run_mod, "time", types.SimpleNamespace(monotonic=lambda: clock["t"]))
    outcome = run(RunConfig(suite_file(tmp_path, ["ok", "ok"], repetitions=4, processes=4,
                                       time_budget_s=2.5), out=str(tmp_path / "r")))
    cases = load_run(outcome.path).meta["cases"]
    assert [c["status"] for c in cases] == ["ok", "ok"] and [c["samples"] for c in cases] == [2, 1]
    measured = [c["info"]["repetitions_measured"] for c in cases]
    assert [m.split(": ~")[0] for m in measured] == ["2 of 4: time budget of 2.5 s",
                                                      "1 of 4: time budget of 2.5 s"]
    assert all(m.endswith("s estimated, 0 s left") for m in measured)
    assert [p["status"] for p in cases[0]["info"]["processes"]] == ["ok", "ok", "skipped"]
    # the cut is a warning worded alike for every case, so the terminal counts it once
    assert [c["info"]["warnings"] for c in cases] == [
        [f"only {n} of 4 repetitions measured: the time budget of 2.5 s was spent (run --budget SECONDS "
         f"allows more)"] for n in (2, 1)]


def test_the_budget_check_uses_what_a_case_s_first_process_took_not_the_plan_s_guess(tmp_path, monkeypatch):
    """The plan guesses 0.1 s a case; each process takes 1 s of a fake clock. With the
    guess, a process would start with 0.5 s left and the run would end past its
    budget; with what the first process took, it is not started."""
    import types
    from cxlbench.results.schema import OK, CaseResult, Sample
    from cxlbench.runner import run as run_mod
    clock = {"t": 0.0}

    def fake_case(case, ref, env, timeout, installation=None):
        clock["t"] += 1.0
        return CaseResult(case, OK, seconds=1.0,
                          samples=[Sample("latency_ns", 1.0, case.first_repetition + r)
                                   for r in range(case.repetitions)])
    monkeypatch.setattr(run_mod, "run_case", fake_case)
    monkeypatch.setattr(run_mod, "time", types.SimpleNamespace(monotonic=lambda: clock["t"]))
    run(RunConfig(suite_file(tmp_path, ["ok"], repetitions=4, processes=4, time_budget_s=2.5),
                  out=str(tmp_path / "r")))
    assert clock["t"] <= 2.5


def test_the_budget_flag_overrides_the_suites(tmp_path):
    out = tmp_path / "r"
    proc = _cli("run", "--suite", suite_file(tmp_path, ["ok", "ok"]), "--out", str(out),
                "--budget", "0.05", "--no-report", cwd=tmp_path)
    proc.communicate(timeout=60)
    [path] = find_runs(out)
    cases = load_run(path).cases()
    assert list(cases.status) == ["skipped", "skipped"]
    assert all("time budget of 0.05 s" in r for r in cases.reason)


def test_find_max_turns_training_into_the_search_and_refuses_a_suite_without_it():
    from cxlbench.runner.suite import SuiteError, load_suite, with_find_max
    suite = with_find_max(load_suite("training"))
    modes = [b.get("mode") for b in suite["benchmark"] if b["name"] == "training"]
    assert modes == ["optimizer", "find_max"]
    search = suite["benchmark"][1]
    assert not {"config", "steps", "warmup_steps"} & set(search)    # every config, 2 steps
    assert load_suite("training")["benchmark"][1]["mode"] == "train"  # the file is untouched
    with pytest.raises(SuiteError, match="no training benchmark that trains"):
        with_find_max(load_suite("quick"))


def test_a_disk_that_fills_mid_run_is_one_line_naming_where_the_measured_cases_are(tmp_path, monkeypatch):
    import errno
    from cxlbench.results.store import ResultsError, RunWriter
    add, calls = RunWriter.add, []

    def fills(self, *args, **kw):
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return add(self, *args, **kw)
    monkeypatch.setattr(RunWriter, "add", fills)
    with pytest.raises(ResultsError, match="No space left on device while writing the run; the cases measured "
                                           "before it are kept there") as e:
        run(RunConfig(suite_file(tmp_path, ["ok", "ok", "ok"], repetitions=2), out=str(tmp_path / "r")))
    [path] = find_runs(tmp_path / "r")
    assert str(path) in str(e.value)
    stored = load_run(path)
    assert stored.status == "partial" and len(set(stored.samples.case_id)) == 1


def test_the_progress_line_on_a_terminal_never_wraps(monkeypatch):
    """A line longer than the terminal wraps, and '\\r' then redraws only its last row:
    every redraw would leave a line behind on a narrow terminal."""
    import io
    import os
    from cxlbench.runner.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr("shutil.get_terminal_size", lambda fallback=None: os.terminal_size((50, 24)))
    out = Terminal()
    p = Progress([1.0, 1.0], stream=out)
    p.begin("fakes.family/cpu:node0/ddr0/i=0,level=1.0,mode=ok,pause_s=0.5 [process 6/10]")
    drawn = out.getvalue().split("\r")[-1].replace("\033[K", "")
    assert 20 <= len(drawn) <= 49


def test_running_out_of_memory_mid_run_leaves_a_partial_run_not_one_still_running(tmp_path, monkeypatch):
    """Only a failed write marked the run partial: after a MemoryError it read as
    'running' for ever, and history took it for a run in progress."""
    from cxlbench.runner import run as run_module
    real, calls = run_module.run_case, []

    def exhausted(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise MemoryError()
        return real(*args, **kwargs)
    monkeypatch.setattr(run_module, "run_case", exhausted)
    with pytest.raises(MemoryError):
        run(RunConfig(suite_file(tmp_path, ["ok", "ok"]), out=str(tmp_path / "r")))
    [path] = find_runs(tmp_path / "r")
    stored = load_run(path)
    assert stored.meta["status"] == "partial" and len(stored.samples) > 0


def test_another_installation_that_cannot_be_started_fails_its_case_with_the_reason():
    from cxlbench.results.schema import Case
    from cxlbench.runner.run import build_env
    from cxlbench.runner.worker import Installation, run_case
    case = Case("fakes.family", "cpu:node0", "ddr0", "ddr", {"mode": "ok", "i": 0, "level": 1.0})
    r = run_case(case, "fakes.family", build_env("/", []), 60, Installation(python="/nonexistent/cxlbench/python"))
    assert r.status == "failed" and "its process could not be started (No such file or directory)" in r.reason
