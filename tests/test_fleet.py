"""The fleet: node outcomes from the scheduler's word and the store, the report's
matrix, spread, outliers and A/B contrast over synthetic machines, Kubernetes
manifests valid against the API schema offline, and bad input as one line."""
import json
from pathlib import Path

import numpy as np
import pytest

from cxlbench.cli.main import main
from cxlbench.fleet import page
from cxlbench.fleet.configuration import derive
from cxlbench.fleet.kubernetes import JobSpec, job, manifests, validate
from cxlbench.fleet.matrix import contrast, gather
from cxlbench.fleet.outcome import FAILED, MEASURED, NEVER_STARTED, outcomes
from cxlbench.fleet.record import FleetRecord, Job, save
from cxlbench.results.schema import Case, CaseResult, Sample
from cxlbench.results.store import RunWriter, load_run

FAMILY = {"latency": {"metrics": {"latency_ns": {"unit": "ns", "better": "lower"}},
                      "headlines": [{"label": "idle latency", "metric": "latency_ns", "column": "idle latency",
                                     "pick": "best", "digits": 1}]}}


def machine_run(root, conf, name, level, finish=True, job_id=None, reps=5, status="ok"):
    meta = {"families": FAMILY, "machine_name": name, "configuration": {"name": conf, "source": "label"},
            "scheduler": {"SLURM_JOB_ID": job_id} if job_id else {}}
    w = RunWriter(root, name, meta, conf)
    case = Case("latency", "cpu:node0", "ddr0", "ddr", {"working_set_bytes": 1 << 28}, reps)
    rng = np.random.default_rng(sum(map(ord, conf + name)))
    w.add(CaseResult(case, status, "" if status == "ok" else "worker died: signal 9",
                     [Sample("latency_ns", level * (1 + 0.002 * rng.standard_normal()), i) for i in range(reps)]))
    if finish:
        w.finish()
    return load_run(w.path)


def test_a_killed_job_is_a_failure_that_keeps_its_cases_and_a_pending_one_never_started(tmp_path):
    ok = machine_run(tmp_path, "a", "n1", 100, job_id="11")
    killed = machine_run(tmp_path, "a", "n2", 100, finish=False, job_id="12")
    record = FleetRecord("f1", "slurm", str(tmp_path), "ci", jobs=[
        Job("n1", "a", "11", "COMPLETED", exit_code="0:0", started="t"),
        Job("n2", "a", "12", "CANCELLED", exit_code="0:9", started="t"),
        Job("n3", "a", "13", "PENDING", reason="Resources"),
        Job("n4", "a", "", "SUBMIT_FAILED", reason="sbatch: error: Invalid node name specified"),
        Job("n5", "a", "15", "COMPLETED", exit_code="0:0", started="t")])
    got = {o.node: o for o in outcomes(record, [ok, killed])}
    assert got["n1"].status == MEASURED and got["n1"].cases_kept == 1
    assert got["n2"].status == FAILED and got["n2"].cases_kept == 1 and "CANCELLED" in got["n2"].reason
    assert got["n3"].status == NEVER_STARTED and "Resources" in got["n3"].reason
    assert got["n4"].status == NEVER_STARTED and "Invalid node name" in got["n4"].reason
    assert got["n5"].status == FAILED and "no run in the store" in got["n5"].reason


def test_the_matrix_groups_machines_by_configuration_and_flags_the_one_off_its_median(tmp_path):
    runs = [machine_run(tmp_path, "cxl-a", f"a{i}", v) for i, v in enumerate([100, 101, 99, 130])]
    runs += [machine_run(tmp_path, "cxl-b", f"b{i}", v) for i, v in enumerate([120, 121, 119])]
    fleet = gather(runs, threshold=0.10)
    assert sorted(fleet.machines) == ["cxl-a", "cxl-b"] and len(fleet.machines["cxl-a"]) == 4
    cell = fleet.cell("cxl-a", "ddr0", "idle latency")
    assert cell.low == pytest.approx(99, rel=0.01) and cell.high == pytest.approx(130, rel=0.01)
    assert cell.median == pytest.approx(100.5, rel=0.01) and cell.lo <= cell.median <= cell.hi
    assert cell.spread == pytest.approx(31 / cell.median, rel=0.05)
    assert [(o.configuration, o.machine) for o in fleet.outliers] == [("cxl-a", "a3")]
    [row] = contrast(fleet, "cxl-a", "cxl-b", threshold=0.05)
    assert row.units == "machines" and row.ratio > 1.1 and row.verdict == "inconclusive"   # a3 widens it
    steady = gather([r for r in runs if r.meta["machine_name"] != "a3"])
    [row] = contrast(steady, "cxl-a", "cxl-b", threshold=0.05)
    assert row.verdict == "slower" and row.lo > 1.05


def test_a_machine_whose_case_failed_part_way_gives_its_configuration_no_figure(tmp_path):
    """Its first repetitions stood as the machine's figure, and could call it an outlier."""
    runs = [machine_run(tmp_path, "a", f"n{i}", v) for i, v in enumerate([100, 101, 99])]
    runs.append(machine_run(tmp_path, "a", "n3", 200, status="failed"))
    fleet = gather(runs, threshold=0.10)
    assert fleet.outliers == [] and sorted(fleet.cell("a", "ddr0", "idle latency").machines) == ["n0", "n1", "n2"]


def test_one_machine_per_configuration_is_compared_over_its_repetitions(tmp_path):
    fleet = gather([machine_run(tmp_path, "a", "n1", 100), machine_run(tmp_path, "b", "n2", 100.05)])
    [row] = contrast(fleet, "a", "b", threshold=0.05)
    assert row.units == "repetitions of one machine" and row.verdict == "same"
    assert fleet.outliers == []


def test_a_cell_says_its_spread_is_a_range_over_its_machines_and_one_machine_has_none(tmp_path):
    """The matrix printed "±0.0% · 1" for a configuration of one machine, and a range
    over machines as a ± half-width."""
    for i, v in enumerate([100, 110, 105]):
        machine_run(tmp_path, "many", f"m{i}", v)
    machine_run(tmp_path, "one", "solo", 100)
    rep = page.build(str(tmp_path))
    text, html = page.text(rep), page.html(rep)
    assert "(spread 9.5%, 3 machines)" in text and "(1 machine)" in text and "±0.0%" not in text
    assert "(spread 9.5%, 3 machines)" in html and "(1 machine)" in html


def test_the_report_reads_a_store_with_its_fleet_record_as_text_and_html(tmp_path):
    machine_run(tmp_path, "a", "n1", 100, job_id="1")
    machine_run(tmp_path, "b", "n1", 110, finish=False, job_id="2")
    save(FleetRecord("f1", "slurm", str(tmp_path), "ci", jobs=[Job("n1", "a", "1", "COMPLETED", started="t"),
                                                               Job("n1", "b", "2", "NODE_FAIL", started="t")]))
    rep = page.build(str(tmp_path))
    text = page.text(rep)
    assert "measured" in text and "NODE_FAIL" in text and "idle latency" in text
    html = page.html(rep)
    assert "<svg" in html and 'id="node-table"' in html and "http" not in html.split("<body>")[1].split("xmlns")[0]


def test_fleet_report_and_status_on_the_command_line(tmp_path, capsys):
    machine_run(tmp_path, "a", "n1", 100)
    machine_run(tmp_path, "b", "n2", 120)
    out = tmp_path / "fleet.html"
    assert main(["fleet", "report", str(tmp_path), "--compare", "a", "b", "-o", str(out)]) == 0
    assert "b against a" in capsys.readouterr().out and out.exists()
    assert main(["fleet", "report", str(tmp_path), "--compare", "a", "zz"]) == 2
    assert "no configuration 'zz'" in capsys.readouterr().err
    assert main(["fleet", "status", str(tmp_path)]) == 2
    assert "no fleet record" in capsys.readouterr().err


@pytest.mark.parametrize("edit, names", [
    (lambda d: d.update(submitted=1), "submitted"),
    (lambda d: d.update(fleet_id=7), "fleet_id"),
    (lambda d: d["jobs"][0].update(node=None), "jobs[0].node"),
    (lambda d: d["jobs"][0].update(state=5), "jobs[0].state"),
])
def test_a_fleet_record_with_a_field_of_the_wrong_type_is_one_line_naming_it(tmp_path, capsys, edit, names):
    """A number or a null where text belongs was a TypeError in fleet status and report."""
    machine_run(tmp_path, "a", "n1", 100)
    path = save(FleetRecord("f1", "slurm", str(tmp_path), "ci", jobs=[Job("n1", "a", "1", "COMPLETED")]))
    doc = json.loads(Path(path).read_text())
    edit(doc)
    Path(path).write_text(json.dumps(doc))
    for command in (["fleet", "status", str(tmp_path)], ["fleet", "report", str(tmp_path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"is not a fleet record ({names} not text)" in err


def test_manifests_are_one_indexed_job_per_configuration_one_pod_per_node_and_valid():
    spec = JobSpec("cxl-a", 4, "reg/cxlbench:1", "s3://b/p", "quick", "20250101T000000Z-ab12",
                   hugepages={"2Mi": "2Gi"})
    j = job(spec)
    pod = j["spec"]["template"]["spec"]
    assert j["spec"]["completionMode"] == "Indexed" and j["spec"]["completions"] == 4
    assert pod["nodeSelector"] == {"cxlbench.io/config": "cxl-a"}
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] \
        == "kubernetes.io/hostname"
    assert pod["containers"][0]["resources"]["limits"]["hugepages-2Mi"] == "2Gi"
    assert pod["containers"][0]["securityContext"].get("privileged") is not True
    assert "--out" in pod["containers"][0]["command"] and "s3://b/p" in pod["containers"][0]["command"]
    assert validate(manifests([spec, JobSpec("ddr", 2, "img", "s3://b/p", "quick", "x", privileged=True)])) == []
    broken = json.dumps({**j, "spec": {**j["spec"], "completions": "four"}})
    assert validate(f"---\n{broken}\n")


def test_manifests_command_rejects_bad_input_in_one_line(capsys):
    assert main(["fleet", "manifests", "--store", "s3://b", "--image", "i", "--config", "a"]) == 2
    assert "is not NAME=NODES" in capsys.readouterr().err
    assert main(["fleet", "manifests", "--store", "s3://b", "--image", "i", "--config", "a=1",
                 "--hugepages", "3Mi=1Gi"]) == 2


def test_fleet_run_without_slurm_or_nodes_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))            # no sbatch, no scontrol
    assert main(["fleet", "run", "--store", str(tmp_path), "--suite", "fleet-ci", "--nodes", "n[1-2]"]) == 2
    assert "scontrol is not on PATH" in capsys.readouterr().err
    assert main(["fleet", "run", "--store", str(tmp_path), "--suite", "fleet-ci"]) == 2
    assert "name the nodes" in capsys.readouterr().err


def test_a_derived_configuration_name_is_readable_and_tells_different_hardware_apart():
    meta = {"machine": {"cpu": {"model": "Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz", "sockets": 2, "cores": 112}},
            "tiers": [{"name": "ddr0", "kind": "ddr", "capacity_bytes": 2**40},
                      {"name": "cxl2", "kind": "cxl", "capacity_bytes": 2**38}]}
    name = derive(meta)
    assert name.startswith("xeon-platinum-8480-2s-cxl1-ddr1-")
    other = {**meta, "tiers": meta["tiers"][:1] + [{"name": "cxl2", "kind": "cxl", "capacity_bytes": 2**39}]}
    assert derive(other) != name and derive(meta) == name
    # MemTotal moving by a few percent between runs (a balloon, a reservation) is the same machine
    ballooned = {**meta, "tiers": [{**meta["tiers"][0], "capacity_bytes": int(2**40 * 0.985)}, meta["tiers"][1]]}
    assert derive(ballooned) == name


@pytest.mark.parametrize("config, says", [
    ("a;touch x=2", "label value 'a;touch x' is not valid"),
    ("lead-=1", "label value 'lead-' is not valid"),
    (f"{'c' * 64}=1", "is not valid: at most 63 characters"),
])
def test_a_configuration_name_the_api_server_would_refuse_is_one_line_and_exit_2(tmp_path, capsys, config, says):
    """The OpenAPI schema types a label as any string; the label syntax is checked
    before anything is written."""
    from cxlbench.cli.main import main
    out = tmp_path / "fleet.yaml"
    code = main(["fleet", "manifests", "--store", "s3://bench/fleet", "--image", "cxlbench:1",
                 "--config", config, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and says in err and not out.exists()


def test_valid_label_values_pass_the_label_check():
    from cxlbench.fleet.kubernetes import label_problems
    for key, value in (("cxlbench.io/config", "cxl-a"), ("config", "A.b_c-1"), ("cxlbench.io/config", "")):
        assert label_problems(key, value) == []
    assert label_problems("Bad.Prefix/config", "x") and label_problems("cxlbench.io/", "x")


def test_the_manifests_name_the_built_image_by_default_and_let_move_pages_through(tmp_path, capsys):
    """scripts/build-image.sh tags cxlbench:VERSION; an unprivileged pod's seccomp must
    let move_pages(2) through, or every case fails its placement check."""
    from cxlbench.cli.main import main
    from cxlbench.version import __version__
    out = tmp_path / "fleet.yaml"
    assert main(["fleet", "manifests", "--store", "s3://bench/fleet", "--config", "cxl-a=2", "-o", str(out)]) == 0
    (doc,) = [json.loads(d) for d in out.read_text().split("---\n") if d.strip()]
    container = doc["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"cxlbench:{__version__}"
    assert container["securityContext"]["seccompProfile"] == {"type": "Unconfined"}


def test_manifests_to_dash_go_to_standard_output_alone_for_kubectl(tmp_path, capsys, monkeypatch):
    """`-o -` wrote a file named '-' and printed 'wrote -: ...' into what kubectl reads."""
    monkeypatch.chdir(tmp_path)
    assert main(["fleet", "manifests", "--store", "s3://bench/fleet", "--config", "cxl-a=2", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "-").exists() and not out.startswith("wrote")
    assert [json.loads(d)["kind"] for d in out.split("---\n") if d.strip()] == ["Job"]


@pytest.mark.parametrize("args, says", [
    (["--store", "fs"], "is a path inside each pod, lost when the pod ends"),
    (["--hugepages", "2Mi=-2Gi"], "is not SIZE=AMOUNT"),
    (["--memory", "0"], "is not a positive Kubernetes quantity"),
    (["--secret", "a b"], "is not a Kubernetes Secret's name"),
    (["--config", "b=99999999999999"], "1 to 10,000"),
    (["--store", "s3://"], "names no bucket"),
    (["--image", "cxlbench 1"], "is not an image reference"),
    (["--endpoint", "minio:9000"], "is not an http(s) URL"),
])
def test_a_manifest_no_cluster_could_run_as_meant_is_refused_in_one_line(tmp_path, capsys, args, says):
    """A store path inside the pods (its runs gone with them), a negative amount of huge
    pages, a Secret name with a space, a Job of 10^14 nodes: refused before any manifest."""
    from cxlbench.cli.main import main
    base = {"--store": "s3://bench/fleet", "--config": "a=1"}
    given = dict(zip(args[::2], args[1::2]))
    argv = ["fleet", "manifests", *[x for k, v in {**base, **given}.items() for x in (k, v)],
            "-o", str(tmp_path / "f.yaml")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err and not (tmp_path / "f.yaml").exists()


def test_a_slurm_nodes_command_carries_the_store_options_where_run_takes_them(monkeypatch):
    from cxlbench.cli.main import parser
    from cxlbench.fleet.slurm import run_command
    from cxlbench.results import location
    location.configure(["endpoint_url=http://minio:9000"])
    try:
        cmd = run_command("quick", "s3://bench/fleet", "cxl-a", "f1", python="cxlbench")
    finally:
        location.configure([])
    args = parser().parse_args(cmd[1:])                  # after the program
    assert args.command == "run" and args.store_option == ["endpoint_url=http://minio:9000"]


def test_the_scaling_table_takes_no_figure_from_a_case_that_failed_part_way():
    import pandas as pd
    from cxlbench.fleet.scaling import NAME, table
    from cxlbench.results.store import Run

    def run(world, tokens, status="ok"):
        cid = f"{NAME}/cpu:node0/ddr0/world_size={world}"
        samples = pd.DataFrame([{"run_id": f"2026-w{world}", "case_id": cid, "benchmark": NAME, "metric": m,
                                 "value": v, "repetition": rep, "world_size": world, "model": "tiny", "nodes": world}
                                for rep in range(3) for m, v in (("tokens_per_s_total", tokens),
                                                                 ("tokens_per_s", tokens / world))])
        meta = {"run_id": f"2026-w{world}", "cases": [{"case_id": cid, "status": status, "reason": ""}]}
        return Run(f"/nowhere/w{world}", meta, samples)
    assert [r.world_size for r in table([run(1, 1000.0), run(2, 1900.0)])] == [1, 2]
    assert [r.world_size for r in table([run(1, 1000.0), run(2, 1900.0, status="failed")])] == [1]
