"""A results store at a URL (S3 through s3fs, against moto on loopback) holds runs as
the local store does: partitioned by configuration and machine, readable while
partial, found and loaded from any level, with one clear line when unusable."""
import json

import pytest

import cxlbench
from cxlbench.results import location
from cxlbench.results.store import ResultsError, RunWriter, StoreWriter, find_runs, load_run
from tests.s3server import s3_endpoint, s3_store  # noqa: F401  (fixtures)
from tests.test_store import LATENCY, result


def write(url_or_dir, machine="node-a", config="cxl-a", finish=True, **kw):
    meta = {"families": LATENCY, "configuration": {"name": config, "source": "label"},
            "machine_name": machine}
    w = (StoreWriter(url_or_dir, machine, meta, config, **kw) if location.is_url(str(url_or_dir))
         else RunWriter(url_or_dir, machine, meta, config))
    w.add(result(1 << 20, [10.0, 11.0, 12.0]))
    w.add(result(1 << 21, [20.0, 21.0]))
    if finish:
        w.finish()
    return w


def test_a_run_in_the_store_lies_under_its_configuration_and_machine_and_loads_like_a_local_one(
        s3_store, tmp_path):
    w = write(s3_store, staging=tmp_path / "staging")
    assert w.url.startswith(f"{s3_store}/cxl-a/node-a/")
    stored, local = load_run(w.url), load_run(w.path)
    assert stored.status == local.status == "complete"
    assert stored.samples.equals(local.samples)
    assert location.glob(w.url, "parts/*") == []          # merged, as on disk
    assert json.loads(location.read_bytes(location.join(w.url, "run.json")))["run_id"] == w.run_id


def test_each_case_is_in_the_store_as_soon_as_it_finished(s3_store, tmp_path):
    w = write(s3_store, finish=False, staging=tmp_path)
    run = load_run(w.url)                 # the writer is gone: what a killed node leaves behind
    assert run.status == "running" and len(run.samples) == 5
    assert [c["status"] for c in run.meta["cases"]] == ["ok", "ok"]


def test_runs_of_every_node_are_found_from_the_store_root_and_loaded_as_one_table(s3_store, tmp_path):
    a = write(s3_store, "node-a", "cxl-a", staging=tmp_path / "a")
    b = write(s3_store, "node-b", "cxl-b", finish=False, staging=tmp_path / "b")
    assert find_runs(s3_store) == sorted([a.url, b.url])
    assert find_runs(f"{s3_store}/cxl-b") == [b.url]
    assert find_runs(a.url) == [a.url]
    frame = cxlbench.load(s3_store)
    assert len(frame) == 10
    assert set(zip(frame.machine, frame.configuration)) == {("node-a", "cxl-a"), ("node-b", "cxl-b")}


def test_a_store_that_cannot_be_used_is_one_clear_error(s3_store, tmp_path):
    with pytest.raises(ResultsError, match="no bucket 'missing'"):
        write("s3://missing/x", staging=tmp_path)
    with pytest.raises(ResultsError, match="no cxlbench runs under"):
        find_runs(s3_store)
    with pytest.raises(ResultsError, match="is not a cxlbench run"):
        load_run(f"{s3_store}/nothing/here")
    with pytest.raises(ResultsError, match="not KEY=VALUE"):
        location.configure(["endpoint_url"])


def test_store_options_name_the_endpoint_and_travel_as_arguments(monkeypatch):
    monkeypatch.setenv("CXLBENCH_S3_ENDPOINT", "http://127.0.0.1:9")
    location.configure(["endpoint_url=http://127.0.0.1:9000", "anon=false"])
    try:
        assert location.options("s3://b/p")["endpoint_url"] == "http://127.0.0.1:9000"
        assert location.options("s3://b/p")["anon"] is False
        assert location.option_args() == ["--store-option=endpoint_url=http://127.0.0.1:9000",
                                          "--store-option=anon=false"]
    finally:
        location.configure([])
    assert location.options("s3://b/p")["endpoint_url"] == "http://127.0.0.1:9"


def test_a_local_store_keeps_its_layout_and_adds_the_configuration_level_only_when_named(tmp_path):
    flat = RunWriter(tmp_path, "node-a", {"families": LATENCY})
    flat.add(result(1 << 20, [1.0]))
    flat.finish()
    named = write(tmp_path, "node-b", "cxl-b")
    assert flat.path.parent == tmp_path / "node-a"
    assert named.path.parent == tmp_path / "cxl-b" / "node-b"
    assert find_runs(tmp_path) == sorted([flat.path, named.path])


def test_a_machines_history_reads_its_runs_from_the_store(s3_store, tmp_path):
    from cxlbench.analysis import history
    write(s3_store, staging=tmp_path / "a")
    write(s3_store, staging=tmp_path / "b")
    h = history.history(s3_store)
    assert len(h.runs) == 2 and h.machine == "node-a"
    assert set(h.rows["position"]) == {0, 1}
    marker = history.accept(h.paths[h.runs["run_id"].iloc[-1]], "new expander firmware")
    assert [m.run_id for m in history.history(s3_store).markers] == [marker.run_id]


def test_an_ended_run_whose_samples_are_gone_from_the_store_is_called_damaged(s3_store, tmp_path):
    w = write(s3_store, staging=tmp_path / "staging")
    location.delete(location.join(w.url, "samples.parquet"))
    with pytest.raises(ResultsError, match="samples.parquet is missing, though the run ended"):
        load_run(w.url)


def test_a_store_gone_mid_run_is_one_line_naming_where_the_run_is_kept(s3_store, tmp_path, monkeypatch):
    w = write(s3_store, finish=False, staging=tmp_path / "staging")

    def gone(url, data):
        raise ConnectionError(f"Could not connect to the endpoint URL: {url}")
    monkeypatch.setattr(location, "write_bytes", gone)
    with pytest.raises(ResultsError, match=f"the store could not take .*what was measured is kept in {w.path}"):
        w.add(result(1 << 22, [30.0, 31.0]))
    assert len(load_run(w.path).samples) == 7                  # the local copy has the last case too


def test_a_complete_runs_local_copy_goes_once_the_store_holds_it(s3_store, tmp_path, monkeypatch, capsys):
    import tempfile
    from cxlbench.cli.main import main
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))        # where the staging folder is made
    suite = tmp_path / "s.toml"
    suite.write_text('repetitions = 2\n[[benchmark]]\nname = "fakes.family"\nmodes = ["ok"]\n')
    assert main(["run", "--suite", str(suite), "--out", s3_store, "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "the store holds the run" in out and not list(tmp_path.glob("cxlbench-staging-*"))
    stored = out.split("stored: ")[1].split()[0]
    assert load_run(stored).status == "complete"
