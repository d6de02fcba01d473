"""cxlbench ab: configurations measured interleaved — each case's process for every
configuration back to back, in a random order each round — and each case judged on
its per-round ratios; one ordinary run per configuration, and the pairing beside."""
import json
import math
from pathlib import Path

import pytest

from cxlbench.analysis.paired import judge_session, paired_ratio, rounds_needed
from cxlbench.cli.main import main
from cxlbench.results.store import load_run
from cxlbench.runner.ab import load_session, run_session


def ab_file(tmp_path, configs: str, rounds: int = 4, modes=("ok",), extra: str = "") -> str:
    suite = tmp_path / "s.toml"
    suite.write_text(f'repetitions = 3\n[[benchmark]]\nname = "fakes.family"\nmodes = {json.dumps(list(modes))}\n')
    path = tmp_path / "ab.toml"
    path.write_text(f'suite = "{suite}"\nrounds = {rounds}\nseed = 7\nthreshold = "5%"\n{extra}\n{configs}')
    return str(path)


TWO = '[[config]]\nname = "a"\n\n[[config]]\nname = "b"\n'


def test_each_round_runs_every_configuration_once_in_a_random_order(tmp_path):
    where = run_session(load_session(ab_file(tmp_path, TWO, rounds=6, modes=["stamp", "ok"])),
                        out=str(tmp_path / "r"))
    record = json.loads((where / "ab.json").read_text())
    turns = record["order"]
    assert len(turns) == 6 * 2 * 2                      # rounds x cases x configurations
    for r in range(6):
        for case in (0, 1):
            mine = [t["config"] for t in turns if t["round"] == r and t["case"] == case]
            assert sorted(mine) == ["a", "b"]           # both sides, back to back
    firsts = {tuple(t["config"] for t in turns if t["round"] == r and t["case"] == 0) for r in range(6)}
    assert len(firsts) == 2                             # the order is drawn afresh, not fixed
    assert all(Path(c["run"]).is_absolute() for c in record["configs"])   # judged from anywhere
    runs = [load_run(c["run"]) for c in record["configs"]]
    stamps = runs[0].samples[runs[0].samples.pid.notna()]
    assert stamps.pid.nunique() == 6                    # one process a round
    assert [r.meta["label"] for r in runs] == ["ab-a", "ab-b"] and all(r.status == "complete" for r in runs)


def test_a_change_between_configurations_is_judged_on_paired_ratios(tmp_path):
    configs = ('[[config]]\nname = "base"\nenv = { CXLBENCH_FAKE = "100" }\n\n'
               '[[config]]\nname = "slow"\nenv = { CXLBENCH_FAKE = "110" }\n\n'
               '[[config]]\nname = "same"\nenv = { CXLBENCH_FAKE = "100" }\n')
    where = run_session(load_session(ab_file(tmp_path, configs, modes=["env"])), out=str(tmp_path / "r"))
    verdicts = {v.config: v.change for v in judge_session(where).verdicts}
    assert verdicts["slow"].verdict == "slower" and verdicts["slow"].ratio == pytest.approx(1.1)
    assert verdicts["same"].verdict == "same" and verdicts["same"].ratio == pytest.approx(1.0)


def test_a_verdict_whose_arms_buffers_differ_in_contiguity_says_so(tmp_path):
    from cxlbench.analysis.paired import format_verdicts
    configs = ('[[config]]\nname = "base"\nenv = { CXLBENCH_FAKE = "100", CXLBENCH_FAKE_CONTIG = "0.95" }\n\n'
               '[[config]]\nname = "scattered"\nenv = { CXLBENCH_FAKE = "110", CXLBENCH_FAKE_CONTIG = "0.60" }\n\n'
               '[[config]]\nname = "alike"\nenv = { CXLBENCH_FAKE = "110", CXLBENCH_FAKE_CONTIG = "0.90" }\n')
    where = run_session(load_session(ab_file(tmp_path, configs, modes=["env"])), out=str(tmp_path / "r"))
    judged = judge_session(where)
    verdicts = {v.config: v.change for v in judged.verdicts}
    assert verdicts["scattered"].verdict == "slower" and "physical contiguity (0.95 → 0.60" in verdicts["scattered"].note
    assert verdicts["alike"].verdict == "slower" and not verdicts["alike"].note        # 0.05 apart: no note
    assert "slower" in format_verdicts(judged) and "(the runs' buffers differ" in format_verdicts(judged)


def test_a_session_whose_every_round_was_crowded_out_exits_2_saying_so(tmp_path, capsys):
    where = run_session(load_session(ab_file(tmp_path, TWO, rounds=2, modes=["crowded"])), out=str(tmp_path / "r"))
    assert judge_session(where).verdicts == []
    capsys.readouterr()                                 # the session's progress lines
    assert main(["ab", "--judge", str(where)]) == 2
    err = capsys.readouterr().err.strip()
    assert "every repetition was left out" in err and len(err.splitlines()) == 1
    assert all(load_run(c["run"]).samples.shape[0] for c in json.loads((where / "ab.json").read_text())["configs"]), \
        "what was measured is kept"


def test_a_pythonpath_of_several_folders_is_taken_and_a_missing_one_is_named(tmp_path):
    import os
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    two = f'[[config]]\nname = "x"\npythonpath = "{a}{os.pathsep}{b}"\n\n[[config]]\nname = "y"\n'
    assert load_session(ab_file(tmp_path, two)).configs[0].pythonpath == f"{a}{os.pathsep}{b}"
    gone = two.replace(str(b), str(tmp_path / "gone"))
    with pytest.raises(Exception, match="pythonpath entry .*gone' is not a folder"):
        load_session(ab_file(tmp_path, gone))


def test_settings_reach_every_table_whose_family_has_the_key(tmp_path):
    configs = ('[[config]]\nname = "one"\nset = { level = 2.0 }\n\n'
               '[[config]]\nname = "two"\nset = { level = 3.0 }\n')
    where = run_session(load_session(ab_file(tmp_path, configs)), out=str(tmp_path / "r"))
    [v] = judge_session(where).verdicts
    assert v.change.ratio == pytest.approx(1.5) and "level=2.0" in v.point and "level=3.0" in v.point


@pytest.mark.parametrize("configs, says", [
    ('[[config]]\nname = "a"\n', "at least two"),
    ('[[config]]\nname = "a"\ncolour = 1\n\n[[config]]\nname = "b"\n', "unknown key 'colour'"),
    ('[[config]]\nname = "a"\nset = { pages = ["4k"] }\n\n[[config]]\nname = "b"\n', "has the key 'pages'"),
    ('[[config]]\nname = "a"\nset = { level = "high" }\n\n[[config]]\nname = "b"\n', "level = 'high'"),
    ('[[config]]\nname = "a"\nbefore = "false"\n\n[[config]]\nname = "b"\n', "before-command failed"),
    ('[[config]]\nname = "a"\npythonpath = "/nonexistent/cxlbench-tree"\n\n[[config]]\nname = "b"\n',
     "is not a folder"),
    # the C core compares exactly: "Plain" timed the streaming stores while the run said plain
    ('[[config]]\nname = "a"\nenv = { CXLBENCH_ADAMW_STORES = "Plain" }\n\n[[config]]\nname = "b"\n',
     "CXLBENCH_ADAMW_STORES='Plain' is not one of streaming, plain"),
    ('[[config]]\nname = "a"\n\n[[config]]\nname = "a"\n', "must differ"),
    ('[[config]]\nname = "a"\npython = "/nonexistent/python"\n\n[[config]]\nname = "b"\n', "cannot start"),
])
def test_a_configuration_that_cannot_be_honoured_exits_2_in_one_line(tmp_path, capsys, configs, says):
    code = main(["ab", ab_file(tmp_path, configs), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_another_installation_measures_its_side_in_its_own_interpreter(tmp_path):
    other = tmp_path / "other" / "fakes"                 # another build of the family: reads 25% higher
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    source = (Path(__file__).parent / "fakes" / "family.py").read_text()
    (other / "family.py").write_text(source + '\nos.environ["CXLBENCH_FAKE"] = "125"\n')
    configs = ('[[config]]\nname = "here"\nenv = { CXLBENCH_FAKE = "100" }\n\n'
               f'[[config]]\nname = "there"\nenv = {{ CXLBENCH_FAKE = "100" }}\npythonpath = "{other.parent}"\n')
    where = run_session(load_session(ab_file(tmp_path, configs, modes=["env"])), out=str(tmp_path / "r"))
    [v] = judge_session(where).verdicts
    assert v.change.ratio == pytest.approx(1.25) and v.change.verdict == "slower"
    record = json.loads((where / "ab.json").read_text())
    assert record["configs"][1]["pythonpath"] == str(other.parent)
    assert load_run(record["configs"][1]["run"]).meta["ab"]["pythonpath"] == str(other.parent)


def test_an_installation_that_cannot_import_its_cxlbench_is_refused_in_one_line(tmp_path, capsys):
    broken = tmp_path / "broken" / "cxlbench"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('half-built checkout')\n")
    configs = f'[[config]]\nname = "a"\n\n[[config]]\nname = "b"\npythonpath = "{broken.parent}"\n'
    code = main(["ab", ab_file(tmp_path, configs), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot import its cxlbench (ImportError: half-built checkout)" in err
    assert len(err.strip().splitlines()) == 1


def test_a_failure_in_the_middle_keeps_everything_measured_so_far(tmp_path, capsys):
    count = tmp_path / "turns"
    before = f"echo x >> {count}; test $(wc -l < {count}) -le 3"      # fails from its 4th turn
    configs = f'[[config]]\nname = "a"\n\n[[config]]\nname = "b"\nbefore = "{before}"\n'
    code = main(["ab", ab_file(tmp_path, configs, rounds=5), "--out", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0 and "session:" in out
    record = json.loads(next((tmp_path / "r").glob("*/ab-*/ab.json")).read_text())
    a, b = (load_run(c["run"]) for c in record["configs"])
    assert len(a.samples) == 5 and len(b.samples) == 2                # b's first two rounds are kept
    assert b.meta["cases"][0]["status"] == "failed" and "before-command failed in round 3" in \
        b.meta["cases"][0]["reason"]
    assert "same" in out                                              # judged on the two rounds it has


def test_paired_ratio_is_the_geometric_mean_with_a_t_interval():
    r = paired_ratio([100, 200, 50, 100], [110, 220, 55, 110])      # the same 10% in every round
    assert r.ratio == pytest.approx(1.1) and r.lo == pytest.approx(1.1) and r.df == 3
    noisy = paired_ratio([100, 100, 100, 100], [104, 112, 106, 118])
    assert noisy.lo < noisy.ratio < noisy.hi and noisy.n_base == 4
    assert math.isnan(paired_ratio([1.0], [2.0]).lo)                 # one round: no interval


def test_a_rate_that_fell_to_zero_in_its_rounds_is_slower_not_a_missing_round():
    """Zeros were dropped as missing rounds: some gave "same 1.002", all gave "needs at
    least 2 rounds", where compare calls the same runs slower and not all positive."""
    from cxlbench.analysis.stats import judge
    gone = paired_ratio([10, 10, 10, 10, 10], [0, 0, 0, 0, 0])
    assert judge(gone, "higher", 0.05).verdict == "slower"
    some = judge(paired_ratio([10, 10.1, 9.9, 10, 10], [10, 0, 10.1, 0, 9.9]), "higher", 0.05)
    assert some.verdict == "inconclusive" and some.note == "values not all positive"
    assert judge(paired_ratio([1.0, float("nan"), 1.0], [1.1, 1.1, float("nan")]), "lower", 0.05).note == \
        "needs at least 2 rounds with both sides"                 # a missing round is still missing


def test_rounds_needed_grow_as_the_ratio_nears_the_threshold():
    far = paired_ratio([100] * 4, [99, 102, 100, 101])               # ~0.5% against a 10% threshold
    near = paired_ratio([100] * 4, [102, 110, 98, 113])              # ~6%, as noisy
    edge = paired_ratio([100] * 4, [104, 112, 100, 115])             # ~8%: by the 10% edge
    assert rounds_needed(far, 0.10) == 2                              # decided already
    assert 4 < rounds_needed(near, 0.10) < rounds_needed(edge, 0.10) < math.inf


def test_pairs_get_rounds_until_their_ratio_is_as_precise_as_asked(tmp_path):
    from cxlbench.analysis.paired import imprecise_pairs
    configs = ('[[config]]\nname = "a"\nenv = { CXLBENCH_FAKE_SIDE = "a" }\n\n'
               '[[config]]\nname = "b"\nenv = { CXLBENCH_FAKE_SIDE = "b" }\n')

    def session(precision: str, tmp):
        tmp.mkdir()
        path = ab_file(tmp, configs, rounds=3, modes=["jitter", "ok"],
                       extra=f'precision = "{precision}"\nmax_rounds = 30')
        where = run_session(load_session(path), out=str(tmp / "r"), imprecise=imprecise_pairs)
        record = json.loads((where / "ab.json").read_text())
        return record, {i: len({t["round"] for t in record["order"] if t["case"] == i}) for i in (0, 1)}

    record, rounds = session("4%", tmp_path / "reachable")   # 3% a process: ±4% in a few rounds more
    assert rounds[1] == 3                      # "ok" measures the same value each time: precise at once
    assert 3 < rounds[0] < 30 and record["extra"]["rounds"] == {"0": rounds[0] - 3}
    assert record["extra"]["stopped"].startswith("every pair within ±4.0%")
    record, rounds = session("0.2%", tmp_path / "hopeless")  # would take hundreds: not worth a round
    assert rounds == {0: 3, 1: 3} and record["extra"]["rounds"] == {}


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "suites" / "ab").glob("*.toml")),
                         ids=lambda p: p.stem)
def test_every_shipped_ab_file_plans_pairs_on_this_machine(path):
    from cxlbench.runner.ab import plan_sides
    sides = plan_sides(load_session(path), rounds=2)
    assert len(sides) == 2 and len(sides[0].planned) == len(sides[1].planned) > 0


def test_a_pair_too_long_for_the_time_left_gives_way_to_shorter_ones():
    from types import SimpleNamespace as NS

    from cxlbench.runner import ab
    sides = [NS(turn_s=[50.0, 1.0], results={}) for _ in range(2)]
    calls, clock, extra = [], [0.0], {"rounds": {}}

    def one(r, i):
        calls.append((r, i))
        clock[0] += sum(s.turn_s[i] for s in sides)
    ab._extra_rounds(NS(precision=0.04, budget_s=10.0), sides, Path("."), lambda where, p, cap: {0, 1}, one,
                     NS(add=lambda s: None), 3, 30, lambda: clock[0], extra)
    assert calls == [(r, 1) for r in range(3, 8)]          # 2 s a round of pair 1; pair 0's 100 s never fit
    assert extra == {"rounds": {"1": 5}, "stopped": "the time budget of 10 s"}


def test_a_file_and_a_session_to_judge_at_once_is_refused_for_what_it_is(tmp_path, capsys):
    from cxlbench.cli.commands import UserError, ab
    with pytest.raises(UserError, match="not both"):
        ab(file=str(tmp_path / "x.toml"), judge=str(tmp_path / "s"))
    with pytest.raises(UserError, match="needs an A/B file"):
        ab()


def test_a_session_whose_two_arms_name_one_run_is_refused_not_called_same(tmp_path):
    """A hand-edited or damaged ab.json whose arms point at the same run would judge a run
    against itself: every case "same"."""
    where = run_session(load_session(ab_file(tmp_path, TWO, rounds=2)), out=str(tmp_path / "r"))
    record = json.loads((where / "ab.json").read_text())
    record["configs"][1]["run"] = record["configs"][0]["run"]
    (where / "ab.json").write_text(json.dumps(record))
    from cxlbench.results.store import ResultsError
    with pytest.raises(ResultsError, match="name the same run"):
        judge_session(where)


@pytest.mark.parametrize("configs, extra, words", [
    ('[[config]]\nname = "a"\nset = { repetitions = 0 }\n\n[[config]]\nname = "b"\n', "",
     "set.repetitions is the session's to choose"),
    (TWO, "max_rounds = 3", "max_rounds = 3 is below the 4 rounds every pair runs first"),
])
def test_a_setting_the_session_would_override_is_refused_not_dropped(tmp_path, configs, extra, words):
    from cxlbench.runner.suite import SuiteError
    with pytest.raises(SuiteError, match=words):
        load_session(ab_file(tmp_path, configs, extra=extra))


def test_the_summary_gives_the_threshold_as_asked():
    """--threshold 0.5% was printed "threshold 0%" beside verdicts judged at 0.5%."""
    from cxlbench.analysis.paired import SessionVerdicts, format_verdicts
    for asked, shown in ((0.005, "threshold 0.5%"), (0.025, "threshold 2.5%"), (0.1, "threshold 10%")):
        assert shown in format_verdicts(SessionVerdicts(["a", "b"], asked))


def test_ctrl_c_during_a_session_exits_130_and_says_which_rounds_the_verdicts_are_of(tmp_path):
    """It exited 0 with the verdict table as if the session had finished; only stderr
    and ab.json's "interrupted" said otherwise, and --judge never did."""
    import signal
    import time
    from tests.test_runner import _cli
    file = ab_file(tmp_path, TWO, rounds=40, modes=["ok", "stamp"], extra="")
    proc = _cli("ab", file, "--out", str(tmp_path / "r"), cwd=tmp_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        records = list((tmp_path / "r").glob("*/ab-*/ab.json"))
        if records and len(json.loads(records[0].read_text())["order"]) >= 8:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: these verdicts are of the" in out and "of 40 planned rounds that finished" in out
    from cxlbench.cli.main import main
    assert main(["ab", "--judge", str(records[0].parent)]) == 0


@pytest.mark.parametrize("spoil, says", [
    (lambda r: r["pairs"][0].pop("cases"), "pair 1's cases"),
    (lambda r: r["pairs"][0].pop("index"), "pair 1's index is None"),
    (lambda r: r["pairs"][0].update(index=True), "pair 1's index is True"),
    (lambda r: r["pairs"][0].pop("benchmark"), "pair 1 names no benchmark"),
    (lambda r: r["pairs"][0].update(cases=r["pairs"][0]["cases"][:1]), "one case id for each of the 2"),
    (lambda r: r["pairs"][0].update(cases="x"), "pair 1's cases"),
    (lambda r: r.update(repetitions="2"), "its repetitions is '2'")])
def test_a_damaged_session_record_is_one_line_and_exit_2(tmp_path, capsys, spoil, says):
    """Each was a traceback (KeyError, IndexError, TypeError), or a pair skipped unsaid."""
    from cxlbench.cli.main import main
    where = run_session(load_session(ab_file(tmp_path, TWO, rounds=2)), out=str(tmp_path / "r"))
    record = json.loads((where / "ab.json").read_text())
    spoil(record)
    (where / "ab.json").write_text(json.dumps(record))
    capsys.readouterr()                                  # the session's own progress lines
    assert main(["ab", "--judge", str(where)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err and "is damaged" in err, err


def test_ctrl_c_before_any_round_finished_is_still_130_not_nothing_to_judge(tmp_path):
    from tests.test_runner import _cli
    proc = _cli("ab", ab_file(tmp_path, TWO, rounds=3, modes=["interrupt"]), "--out", str(tmp_path / "r"),
                cwd=tmp_path)          # its first turn sends the runner SIGINT, as a terminal's Ctrl-C
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted before a round finished" in err and "Traceback" not in err


def test_a_session_with_some_repetitions_crowded_out_says_so_when_no_pair_is_left():
    """It blamed the rounds ('no point was measured in both configurations') where the
    CPU-held check had dropped the samples that would have paired."""
    import pandas as pd
    from cxlbench.analysis.paired import HELD_MIN, _why_none
    a = pd.DataFrame({"value": [1.0, 1.0], "cpu_held": [1.0, HELD_MIN / 2]})
    b = pd.DataFrame({"value": [1.0, 1.0], "cpu_held": [HELD_MIN / 2, 1.0]})
    assert "2 of 4 samples were left out" in _why_none([a, b])
    assert _why_none([a.assign(cpu_held=1.0), b.assign(cpu_held=1.0)]) == \
        "no point was measured in both configurations of a pair"
