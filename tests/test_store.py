"""The run store: incremental, atomic, loadable when partial, strict about foreign files."""
import json
from pathlib import Path

import pandas as pd
import pytest

import cxlbench
from cxlbench.results.schema import CORE_COLUMNS, Case, CaseResult, Sample
from cxlbench.results.store import ResultsError, RunWriter, atomic_write, find_runs, load, load_run


def result(ws, values, status="ok", reason=""):
    case = Case("latency", "cpu:node0", "ddr0", "ddr", {"working_set_bytes": ws, "page": "4k"})
    samples = [Sample("latency_ns", v, i, {"page_bytes": 4096}) for i, v in enumerate(values)]
    return CaseResult(case, status, reason, samples if status == "ok" else [])


LATENCY = {"latency": {"metrics": {"latency_ns": {"unit": "ns", "better": "lower"}}}}


def write_run(tmp_path, finish=True, label=None):
    w = RunWriter(tmp_path, "host<1>", {"label": label, "families": LATENCY})
    w.add(result(1 << 20, [10.0, 11.0, 12.0]))
    w.add(result(1 << 30, [], status="skipped", reason="no hugetlb pages"))
    w.add(result(1 << 21, [20.0, 21.0]))
    if finish:
        w.finish()
    return w


def test_complete_run_is_tidy_one_row_per_sample(tmp_path):
    w = write_run(tmp_path)
    run = load_run(w.path)
    assert run.status == "complete"
    assert list(run.samples.columns[:len(CORE_COLUMNS)]) == CORE_COLUMNS
    assert len(run.samples) == 5
    assert set(run.samples.working_set_bytes) == {1 << 20, 1 << 21}
    assert (run.samples.unit == "ns").all() and (run.samples.better == "lower").all()
    assert not (w.path / "parts").exists()


def test_machine_folder_name_is_safe_and_run_is_found_from_any_level(tmp_path):
    w = write_run(tmp_path)
    assert w.path.parent.name == "host_1"
    assert find_runs(tmp_path) == [w.path]
    assert find_runs(w.path.parent) == [w.path]
    assert len(cxlbench.load(tmp_path)) == 5


def test_skipped_cases_are_recorded_with_reason(tmp_path):
    cases = load_run(write_run(tmp_path).path).cases()
    skipped = cases[cases.status == "skipped"]
    assert list(skipped.reason) == ["no hugetlb pages"]
    assert len(cases) == 3


def test_unfinished_run_loads_from_parts_as_partial(tmp_path):
    w = write_run(tmp_path, finish=False)
    meta = json.loads((w.path / "run.json").read_text())
    meta["pid"] = 2 ** 22 + 12345                 # a writer that no longer exists
    (w.path / "run.json").write_text(json.dumps(meta))
    run = load_run(w.path)
    assert run.status == "partial" and run.meta["interrupted"]
    assert len(run.samples) == 5


def test_no_temporary_files_left(tmp_path):
    w = write_run(tmp_path)
    assert not [p for p in w.path.rglob(".*")]


def edit_meta(run_dir, **fields):
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**meta, **fields}))


def _edit_case(run_dir, **fields):
    meta = json.loads((run_dir / "run.json").read_text())
    meta["cases"][0].update(fields)
    (run_dir / "run.json").write_text(json.dumps(meta))


def _edit_samples(run_dir, **columns):
    """The first two samples' columns set to these values."""
    frame = pd.read_parquet(run_dir / "samples.parquet")
    for column, value in columns.items():
        frame[column] = frame[column].astype(object)
        frame.loc[frame.index[:2], column] = value
        frame[column] = frame[column].infer_objects()
    frame.to_parquet(run_dir / "samples.parquet")


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "samples.parquet").write_bytes(b"PAR1 garbage"), "not a readable samples file"),
    (lambda p: pd.DataFrame({"x": [1]}).to_parquet(p / "samples.parquet"), "missing columns"),
    (lambda p: (p / "run.json").write_text("{not json"), "damaged"),
    (lambda p: (p / "run.json").write_text('{"hello": 1}'), "not a cxlbench run record"),
    (lambda p: edit_meta(p, schema_version="x"), "schema_version is 'x', not a number"),
    (lambda p: edit_meta(p, schema_version=None), "schema_version is None"),
    (lambda p: edit_meta(p, cases=None), "cases is not a list of case records"),
    (lambda p: edit_meta(p, cases=[1, 2]), "cases is not a list of case records"),
    (lambda p: pd.read_parquet(p / "samples.parquet").astype({"value": str}).to_parquet(p / "samples.parquet"),
     "its values are .*, not numbers"),
    (lambda p: (p / "samples.parquet").unlink(), "samples.parquet is missing, though the run ended"),
    (lambda p: edit_meta(p, machine="x"), "its machine is not a machine record"),
    (lambda p: edit_meta(p, tiers=[{"name": 1}]), "its tiers is not a list of tiers with names"),
    (lambda p: edit_meta(p, suite=[1]), "its suite is not the suite's settings"),
    (lambda p: edit_meta(p, families="x"), "its families is not a table of the families' tables"),
    (lambda p: edit_meta(p, warnings=5), "its warnings is not a list"),
    (lambda p: edit_meta(p, environment="x"), "its environment is not a table"),
    (lambda p: edit_meta(p, machine={"cpu": "x"}), "its machine record's cpu is not a table"),
    (lambda p: edit_meta(p, machine={"gpus": "x"}), "its machine record's gpus is not a list of records"),
    (lambda p: _edit_case(p, params="x"), "case 1's params is 'x', not a table"),
    (lambda p: _edit_case(p, initiator=5), "case 1's initiator is 5, not text"),
    (lambda p: _edit_samples(p, case_id=None), "2 of its samples name no case"),
    (lambda p: ((p / "samples.parquet").unlink(), (p / "samples.parquet").mkdir()), "is a folder, not a samples file"),
    (lambda p: _edit_samples(p, value=1e308), "2 of its values are past 1e\\+30"),
])
def test_damaged_or_foreign_files_give_one_clear_error(tmp_path, damage, message):
    w = write_run(tmp_path)
    damage(w.path)
    with pytest.raises(ResultsError, match=message):
        load_run(w.path)


def test_paths_that_are_not_runs(tmp_path):
    with pytest.raises(ResultsError, match="does not exist"):
        load(tmp_path / "nope")
    with pytest.raises(ResultsError, match="no cxlbench runs"):
        load(tmp_path)
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ResultsError, match="neither"):
        load(f)
    with pytest.raises(ResultsError, match="not a directory"):
        RunWriter(f, "m", {})


def _readme_snippet() -> str:
    """The README's pandas example, as a user would paste it."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"```python\n(import cxlbench\n.*?)```", text, re.S).group(1)
    assert "cxlbench.load(" in block
    return block


def test_the_readme_one_liner_gives_each_case_the_median_the_summary_prints(tmp_path):
    """A run whose 256 MiB DRAM sentinel shares the key of a 256 MiB latency case: the
    README's lines give that case its own median (the reduction's, which the summary and
    report print), not one pooled with the sentinel's samples."""
    from cxlbench.analysis.reduction import points, repetitions
    big = 256 << 20
    w = RunWriter(tmp_path / "results", "host", {"families": {**LATENCY, "sentinel": LATENCY["latency"]}})
    case = Case("latency", "cpu:node0", "ddr0", "ddr", {"working_set_bytes": big, "page": "4k"})
    probe = Case("sentinel", "cpu:node0", "ddr0", "ddr", {"working_set_bytes": big, "page": "4k",
                                                          "probe": "dram_chase"})
    reps = [[100.0, 101.0, 140.0], [102.0, 103.0, 99.0], [110.0, 98.0, 97.0], [104.0, 104.5, 90.0]]
    w.add(CaseResult(case, "ok", "", [Sample("latency_ns", v, r, {"iteration": i})
                                      for r, vals in enumerate(reps) for i, v in enumerate(vals)]))
    w.add(CaseResult(probe, "ok", "", [Sample("latency_ns", 400.0 + i, i, {}) for i in range(12)]))
    w.finish()
    code = (_readme_snippet().replace('"results/"', repr(str(tmp_path / "results")))
            .replace("reps[reps.metric", "result = reps[reps.metric"))
    scope: dict = {}
    exec(code, scope)
    got = scope["result"]
    run = load_run(w.path)
    samples = run.samples[run.samples.benchmark == "latency"]
    expected = float(points(repetitions(samples))["median"].iloc[0])
    assert len(got) == 1 and float(got.iloc[0]) == pytest.approx(expected)
    assert expected == pytest.approx(101.5)    # the median of the repetitions' medians: 101, 102, 98, 104
    every = cxlbench.load(tmp_path / "results", sentinels=True)
    assert set(every.benchmark) == {"latency", "sentinel"}
    assert set(cxlbench.load(tmp_path / "results").benchmark) == {"latency"}


# ---- the histograms' side table ------------------------------------------------------------

def with_histograms():
    r = result(1 << 30, [300.0, 310.0])
    r.info = {"cpu": 0, "histograms": [
        {"repetition": rep, "kind": kind, "point": "", "k": 8, "overhead_ns": 19.0,
         "lower_ns": [2400, 2432], "width_ns": [32, 32], "count": [90, 10]}
        for rep in (0, 1) for kind in ("chase", "floor")]}
    return r


def test_histograms_go_to_their_side_table_not_to_run_json(tmp_path):
    w = RunWriter(tmp_path, "host", {"families": LATENCY})
    w.add(with_histograms())
    w.finish()
    assert "histograms" not in (w.path / "run.json").read_text()
    assert load_run(w.path).cases()["info"][0] == {"cpu": 0}
    assert not (w.path / "histogram-parts").exists()
    h = cxlbench.histograms(tmp_path)
    assert len(h) == 8 and h["count"].sum() == 400
    assert set(h.kind) == {"chase", "floor"} and set(h.repetition) == {0, 1}
    assert set(h.working_set_bytes) == {1 << 30} and {"machine", "configuration"} <= set(h.columns)


def test_a_later_process_histograms_keep_the_runs_repetition_numbers(tmp_path):
    from cxlbench.runner.processes import renumber
    w = RunWriter(tmp_path, "host", {"families": LATENCY})
    w.add(renumber(with_histograms(), 3))       # its worker numbered them 0 and 1
    h = cxlbench.histograms(tmp_path)                 # unfinished: read from its parts
    assert set(h.repetition) == {3, 4}


def test_a_run_without_distributions_has_an_empty_histogram_table(tmp_path):
    write_run(tmp_path)
    h = cxlbench.histograms(tmp_path)
    assert h.empty and "lower_ns" in h.columns


def test_a_histograms_file_that_is_not_one_is_refused_in_one_line(tmp_path):
    from cxlbench.results.store import load_histograms
    w = write_run(tmp_path)
    pd.DataFrame({"x": [1]}).to_parquet(w.path / "histograms.parquet")
    with pytest.raises(ResultsError, match="not a cxlbench histograms file"):
        load_histograms(w.path)


# ---- how a file is written ---------------------------------------------------------------

def test_a_new_file_gets_what_the_umask_leaves_and_a_replaced_one_keeps_its_mode(tmp_path):
    import os
    import stat
    from cxlbench.results.store import atomic_write
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "new.html", b"a")
        assert stat.S_IMODE(os.stat(tmp_path / "new.html").st_mode) == 0o640   # not mkstemp's 0600
        os.chmod(tmp_path / "new.html", 0o604)
        atomic_write(tmp_path / "new.html", b"b")
        assert stat.S_IMODE(os.stat(tmp_path / "new.html").st_mode) == 0o604
    finally:
        os.umask(old)


def test_a_link_is_written_through_and_a_fifo_in_place(tmp_path):
    import os
    import threading
    from cxlbench.results.store import atomic_write
    (tmp_path / "real").mkdir()
    os.symlink("real/page.html", tmp_path / "link.html")
    atomic_write(tmp_path / "link.html", b"through")
    assert os.path.islink(tmp_path / "link.html") and (tmp_path / "real" / "page.html").read_bytes() == b"through"
    os.mkfifo(tmp_path / "fifo")
    got = []
    reader = threading.Thread(target=lambda: got.append((tmp_path / "fifo").read_bytes()))
    reader.start()
    atomic_write(tmp_path / "fifo", b"streamed")
    reader.join(10)
    assert got == [b"streamed"] and not (tmp_path / "fifo").is_file()


@pytest.mark.parametrize("failure, says", [
    # what pyarrow raised at `ulimit -u 6`, reading an intact run
    (lambda: __import__("pyarrow").ArrowException(
        "Unknown error: Failed to launch worker thread: Resource temporarily unavailable"), "could not start a thread"),
    (MemoryError, "out of memory"),
    (lambda: OSError(24, "Too many open files"), "raise the limit on open files (ulimit -n)"),
    (lambda: PermissionError(13, "Permission denied"), "this user may not read it"),
])
def test_a_file_this_process_could_not_read_is_not_called_damaged(tmp_path, monkeypatch, failure, says):
    """The message said 're-run the case or remove the file' of a good run's samples."""
    w = write_run(tmp_path)

    def short_of_room(*args, **kwargs):
        raise failure()
    monkeypatch.setattr(pd, "read_parquet", short_of_room)
    with pytest.raises(ResultsError) as refused:
        load_run(w.path)
    assert says in str(refused.value) and "not judged damaged" in str(refused.value)
    assert "remove the file" not in str(refused.value)


def test_a_write_that_fails_names_its_file():
    """write() and fsync() raise without a file name: a full disk said only 'No space
    left on device', and a command's output failed without saying which file."""
    with pytest.raises(OSError) as failed:
        atomic_write(Path("/dev/full"), b"a page")
    assert failed.value.filename == "/dev/full" and failed.value.errno == 28


def test_a_run_in_a_folder_named_in_another_encoding_is_not_called_damaged(tmp_path):
    """pyarrow's UnicodeEncodeError on the path read as a damaged file, with the advice
    to remove a good run's samples."""
    import os
    import shutil
    from fakes import synthetic
    run = synthetic.write_run(tmp_path / "r", synthetic.suite_results(__import__("numpy").random.default_rng(1)))
    odd = os.fsdecode(bytes(tmp_path) + b"/run\xff")
    shutil.copytree(run, odd)
    with pytest.raises(ResultsError) as e:
        load_run(odd)
    assert "its path is not UTF-8 text" in str(e.value) and "not judged damaged" in str(e.value)


def test_a_file_that_cannot_be_made_is_named_as_asked_not_as_its_temporary_file(tmp_path):
    """'/sys/.x.html.uk9o8z4s.tmp: Permission denied' named a file the user never asked for."""
    folder = tmp_path / "ro"
    folder.mkdir()
    target = folder / "x.html"
    import os
    from unittest import mock

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied", str(folder / ".x.html.abcd.tmp"))
    with mock.patch("tempfile.mkstemp", refused), pytest.raises(OSError) as failed:
        atomic_write(target, b"a page")
    assert failed.value.filename == str(target) and failed.value.errno == 13
    assert not os.listdir(folder)
