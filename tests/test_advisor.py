"""The placement advisor: every placement priced by the step-time model from measured
rates (and a GPU's datasheet), each input with its provenance, the cheapest placement
within a margin of the best named, and what is missing refused in one line.

Runs are synthetic, written through the real store (fakes.synthetic): a machine with
DDR, CXL and a declared NVMe directory, the training suite's optimizer cases on each,
optionally a GPU training run with its probes and a storage run.
"""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from cxlbench.analysis.advisor import (ASSUMED, COST_ORDER, DATASHEET, MEASURED, PAPER, AdviceError, advise,
                                       load_gpus, same_gpu)
from cxlbench.cli.main import main
from cxlbench.report import render_run_html
from cxlbench.report.advice import render_advice
from cxlbench.results.schema import SKIPPED
from cxlbench.topology.model import Gpu, Tier
from cxlbench.training.configs import model_config, train_config
from cxlbench.training.stepmodel import Rates, Workload, predict
from fakes import synthetic

GIB = 2**30
#: CPU AdamW params/s per tier kind, and the NVMe file's bandwidth (GB/s)
ADAMW = {"ddr": 2.0e9, "cxl": 1.2e9, "nvme": 1.8e9}
NVME_READ, NVME_WRITE = 6.0, 4.0


def _optimizer(target: str, kind: str, rate: float, threads: int | None = None, page: str | None = None):
    params = {"mode": "optimizer", "n_params": 16 << 20, "impls": "fused,native"}
    if threads is not None:
        params["threads"] = threads
    if page is not None:
        params["page"] = page
    found = {"threads": threads or 16}
    if kind != "nvme":
        values = {"fused": [rate] * 3, "native": [rate * 0.8] * 3}
        return synthetic.case_result("training", target, params, {"params_per_s": values["fused"]}, kind,
                                     sample_params=lambda rep, i: {**found, "impl": "fused"}), \
            synthetic.case_result("training", target, params, {"params_per_s": values["native"]}, kind,
                                  sample_params=lambda rep, i: {**found, "impl": "native"})
    r = synthetic.case_result("training", target, {**params, "n_params": 4 << 20}, {}, kind)
    from cxlbench.results.schema import Sample
    r.samples = [Sample("params_per_s", rate, i, {**found, "impl": "fused", "io": "memory"}) for i in range(3)]
    r.samples += [Sample("params_per_s", 5e7, i, {**found, "impl": "fused", "io": "nvme"}) for i in range(3)]
    r.samples += [Sample("bandwidth_GBps", NVME_READ, 0, {"probe": "nvme_read"}),
                  Sample("bandwidth_GBps", NVME_WRITE, 0, {"probe": "nvme_write"})]
    r.info = {"buffers": {"asked_node": 0}}
    return (r,)


def _merge(results):
    """Cases of the same id (one per impl above) as one case, as the store holds them."""
    out = {}
    for r in results:
        if r.case.case_id in out:
            out[r.case.case_id].samples += r.samples
        else:
            out[r.case.case_id] = r
    return list(out.values())


def host_run(root, cxl: bool = True, adamw: dict | None = None, label: str = "host"):
    """The training suite's optimizer mode on ddr0, cxl2 (when there is one) and nvme0,
    at all threads and at one; without CXL, its case skipped as a machine without one
    records it."""
    rates = {**ADAMW, **(adamw or {})}
    m, tiers = synthetic.machine(cxl=cxl)
    tiers.append(Tier("nvme0", "nvme", path="/scratch", capacity_bytes=4 << 40, free_bytes=3 << 40,
                      declared="nvme=/scratch"))
    results = []
    for target, kind in (("ddr0", "ddr"), ("cxl2", "cxl"), ("nvme0", "nvme")):
        if kind == "cxl" and not cxl:
            results.append(synthetic.case_result(
                "training", "cxl", {"mode": "optimizer", "n_params": 16 << 20}, {}, "cxl", status=SKIPPED,
                reason="no CXL tier on this machine (declare one: cxl=node:N)"))
            continue
        if kind != "nvme":                  # huge pages: not the pages the engines' state is on
            results += _optimizer(target, kind, rates[kind] * 3, page="thp")
        results += _optimizer(target, kind, rates[kind])
        results += _optimizer(target, kind, rates[kind] / 10, threads=1)    # one thread: not the figure
    return synthetic.write_run(root, _merge(results), m=m, tiers=tiers, suite="training", label=label)


def gpu_run(root, flops_tflops: float = 600.0, copy_GBps: float = 50.0, adamw: float = 1.5e11,
            config: str = "8b", probed_host_adamw: float = 2e9, optimizer_mode: bool = True,
            offload: dict | None = None, replayed_s: float | None = None):
    """A GPU training run: engine none (state in HBM) and offload on ddr0, with the probes
    the training family stores (matmul at the model's shapes, d2h/h2d, device AdamW, the
    offload engine's host AdamW), and the optimizer mode's case on ddr0 unless told not."""
    from cxlbench.results.schema import Sample
    m, tiers = synthetic.machine(hostname="gpu-host", cxl=False)
    m.gpus = [Gpu(0, "NVIDIA H200", 141 * GIB, numa_node=0)]
    tiers.append(Tier("hbm0", "hbm", gpu=0, capacity_bytes=141 * GIB, free_bytes=140 * GIB))
    common = {"mode": "train", "config": config, "compute": "gpu", "batch": 1, "seq": 2048,
              "activation_checkpointing": False, "activations_on": "device", "impl": "fused"}
    none = synthetic.case_result("training", "hbm0", {**common, "engine": "none", "params_on": "hbm0",
                                                      "grads_on": "hbm0"}, {}, "hbm", initiator="gpu:0")
    none.samples = [Sample("tokens_per_s", 5000.0, 0, {"iteration": 0}),
                    Sample("tflops", flops_tflops, 0, {"probe": "matmul_model_shape"}),
                    Sample("params_per_s", adamw, 0, {"probe": "adamw", "impl": "fused"})]
    if replayed_s is not None:           # the compute probe: the step's kernels replayed, per step
        none.samples += [Sample("seconds", replayed_s * f, 0, {"probe": "compute_kernels", "iteration": i})
                         for i, f in enumerate((0.98, 1.0, 1.05))]
        none.samples.append(Sample("seconds", 0.0, 0, {"probe": "compute_framework"}))
        none.info = {"flops_per_token": 6e10, "tokens_per_step": 2048}
    off = synthetic.case_result("training", "ddr0", {**common, "engine": "offload", "params_on": "ddr0",
                                                     "grads_on": "ddr0", **(offload or {})}, {}, "ddr",
                                initiator="gpu:0")
    off.samples = [Sample("tokens_per_s", 900.0, 0, {"iteration": 0}),
                   Sample("tflops", flops_tflops, 0, {"probe": "matmul_model_shape"}),
                   Sample("bandwidth_GBps", copy_GBps, 0, {"probe": "d2h"}),
                   Sample("bandwidth_GBps", copy_GBps, 0, {"probe": "h2d"}),
                   Sample("params_per_s", probed_host_adamw, 0, {"probe": "adamw", "impl": "native"})]
    opt = _optimizer("ddr0", "ddr", ADAMW["ddr"]) if optimizer_mode else ()
    return synthetic.write_run(root, _merge([*opt, none, off]), m=m, tiers=tiers, suite="training",
                               label="gpu")


def run_cli(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as e:            # argparse's own refusals: one line, exit 2
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _expected_step(model: str, tier_kind: str, flops: float, copy: float, batch: int | None = None,
                   hbm_adamw: float | None = None) -> float:
    """The step the model gives, computed here from the same rates."""
    cfg, train = model_config(model), train_config(model, batch=batch)
    n = cfg.num_params()
    w = Workload(n, cfg.num_params(embeddings=False), cfg.n_layers, cfg.dim, train.seq_len,
                 train.batch * train.seq_len, nvme_bytes=12 if tier_kind == "nvme" else 0,
                 offload=tier_kind != "hbm", chunks=-(-n // train.chunk_params))
    if tier_kind == "hbm":
        return predict(w, Rates(flops, opt_params_per_s=hbm_adamw), "none").step_s
    return predict(w, Rates(flops, copy, copy, ADAMW[tier_kind], NVME_READ * 1e9, NVME_WRITE * 1e9),
                   "overlapped").step_s


# ---- what it computes -----------------------------------------------------------------

def test_placements_are_ordered_and_priced_as_the_step_model_says(tmp_path):
    a = advise([host_run(tmp_path)], "8b", "h200")
    h200 = load_gpus()["h200"]
    flops, copy = h200.bf16_dense_tflops * 0.4 * 1e12, h200.host_GBps * 1e9
    steps = {p.tier: p.step_s for p in a.placements}
    expected = {"hbm": _expected_step("8b", "hbm", flops, copy, hbm_adamw=h200.hbm_TBps * 1e12 / 28),
                "ddr0": _expected_step("8b", "ddr", flops, copy),
                "cxl2": _expected_step("8b", "cxl", flops, copy),
                "nvme0": _expected_step("8b", "nvme", flops, copy)}
    assert steps == pytest.approx(expected, rel=1e-12)
    assert [p.tier for p in a.placements] == sorted(expected, key=expected.get)    # fastest first
    assert [p.tier for p in a.placements] == ["hbm", "ddr0", "cxl2", "nvme0"]
    for p in a.placements:
        assert p.tokens_per_s == pytest.approx(2048 / p.step_s)
        assert set(p.terms) <= {"compute", "d2h", "h2d", "optimizer", "nvme"}


def test_hbm_is_the_best_at_relative_throughput_1_and_the_rest_are_fractions_of_it(tmp_path):
    a = advise([host_run(tmp_path)], "8b", "h200")
    assert a.best.tier == "hbm" and a.best.relative == 1.0
    assert all(0 < p.relative < 1 for p in a.placements[1:])
    assert a.choice is a.best          # batch 1: no host tier within 10% of the GPU


def test_the_cheapest_tier_within_the_margin_is_named_with_the_rule(tmp_path):
    """An 80 GiB GPU cannot hold 8b's state: the host tiers compete. CXL steps at 95%
    of DDR's AdamW rate, so it comes within 10% of the best (DDR) and, costing less
    per byte, is named; NVMe is far slower."""
    run = host_run(tmp_path, adamw={"cxl": 0.95 * ADAMW["ddr"]})
    a = advise([run], "8b", "h100-sxm")
    by = {p.tier: p for p in a.placements}
    assert a.best is by["ddr0"] and by["cxl2"].relative >= 0.9 and by["nvme0"].relative < 0.9
    assert a.choice is by["cxl2"]
    assert a.conclusion.startswith("optimizer state on cxl2:") and "of the best (optimizer state on ddr0" in a.conclusion
    assert "nvme < cxl < ddr < hbm" in a.rule and "10%" in a.rule
    assert list(COST_ORDER) == ["nvme", "cxl", "ddr", "hbm"]
    tight = advise([run], "8b", "h100-sxm", within=0.0)
    assert tight.choice is tight.best and tight.best.tier == "ddr0"


def test_an_hbm_placement_that_does_not_fit_says_so_instead_of_a_figure(tmp_path, capsys):
    run = host_run(tmp_path)
    a = advise([run], "8b", "h100-sxm")
    hbm = next(p for p in a.placements if p.tier == "hbm")
    # bf16 params and grads, fp32 master, m and v, the activations (one GPU buckets nothing)
    need = (16 * model_config("8b").num_params() + 34 * 2048 * 4096 * 32) / GIB
    assert not hbm.fits and hbm.relative is None
    assert hbm.verdict == f"does not fit in 79.6 GiB HBM: needs {need:.0f} GiB"
    assert a.best.tier == "ddr0" and a.placements[-1] is hbm            # after every placement that fits
    code, out, _ = run_cli(capsys, "advise", str(run), "--model", "8b", "--gpu", "h100-sxm")
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.startswith("optimizer state on hbm")]
    assert line == f"optimizer state on hbm: does not fit in 79.6 GiB HBM: needs {need:.0f} GiB"


def test_one_gpu_holds_the_same_whether_advised_alone_or_as_a_node_of_one(tmp_path):
    """The offloaded 8b on one H100: its bf16 parameters, a bucket of gradients in flight
    (the engines free each gradient once it is on its way to the host) and the
    activations, the same in `advise RUN` as in `advise --gpus 1 --host`."""
    from cxlbench.analysis.whatif import load_host, whatif
    from cxlbench.training.stepmodel import Cluster
    a = advise([host_run(tmp_path)], "8b", "h100-sxm")
    w = whatif(a.inputs.gpu, load_host("h100-8gpu-cxl"), "8b", Cluster(1, 1))
    offloaded = next(p for p in a.placements if p.tier == "ddr0")
    assert offloaded.device_bytes == w.rows[1].device_bytes
    assert next(p for p in a.placements if p.tier == "hbm").device_bytes == w.hbm.device_bytes


def test_70b_fits_no_single_gpu_and_no_placement_is_named(tmp_path):
    a = advise([host_run(tmp_path)], "70b", "h200")
    assert not any(p.fits for p in a.placements) and a.best is None and a.choice is None
    assert a.conclusion.startswith("no placement fits one h200")


def test_a_gpu_run_supplies_the_gpu_side_measured(tmp_path):
    results = tmp_path / "results"
    host_run(results)
    gpu = gpu_run(results, flops_tflops=600.0, copy_GBps=50.0)
    a = advise([results], "8b")                                   # no --gpu: the GPU run
    g = a.inputs.gpu
    assert g.flops.value == 600.0 and g.d2h.value == 50.0 and g.adamw.value == 1.5e11
    assert g.hbm.value == 141
    assert all(f.source.kind == MEASURED for f in g.figures())
    assert gpu.name in g.flops.source.text and "NVIDIA H200" in g.flops.source.text
    by = {p.tier: p for p in a.placements}
    assert by["hbm"].step_s == pytest.approx(_expected_step("8b", "hbm", 600e12, 50e9, hbm_adamw=1.5e11))
    # with --gpu, the datasheet's figures, but the copies the GPU run measured
    b = advise([results], "8b", "h200")
    assert b.inputs.gpu.flops.source.kind == ASSUMED and b.inputs.gpu.d2h.value == 50.0
    assert b.inputs.gpu.d2h.source.kind == MEASURED
    # another part's copies are not this one's link: an A100 is priced at its own sheet's rate
    c = advise([results], "8b", "a100-80gb")
    assert c.inputs.gpu.d2h.value == 25 and c.inputs.gpu.d2h.source.kind == PAPER
    assert "NVIDIA H200" in c.inputs.gpu.d2h.detail


@pytest.mark.parametrize("entry, device, same", [
    ("h200", "NVIDIA H200", True), ("h200", "NVIDIA H200 NVL", True),
    ("a100-80gb", "NVIDIA A100-SXM4-80GB", True), ("h100-sxm", "NVIDIA H100 80GB HBM3", True),
    ("h100-sxm", "NVIDIA H200", False), ("h200", "NVIDIA H20", False), ("b200", "NVIDIA GB200", False),
    ("h200", "", False)])
def test_a_datasheet_entry_matches_the_devices_of_its_part_and_no_other(entry, device, same):
    assert same_gpu(load_gpus()[entry], device) is same


def test_a_gpu_offload_run_alone_supplies_its_hosts_adamw_from_its_own_probe(tmp_path):
    alone = gpu_run(tmp_path / "alone", probed_host_adamw=3.66e9, optimizer_mode=False)
    a = advise([alone], "1b", tiers=["hbm", "ddr"])
    ddr = a.inputs.tiers["ddr0"].adamw
    assert ddr.value == 3.66e9 and ddr.source.kind == MEASURED
    assert "native, the offload engine's own probe" in ddr.detail and "engine=offload" in ddr.source.text
    # the optimizer mode's own measurement, where a run has one, is the figure
    both = gpu_run(tmp_path / "both", probed_host_adamw=3.66e9)
    assert advise([both], "1b", tiers=["hbm", "ddr"]).inputs.tiers["ddr0"].adamw.value == ADAMW["ddr"]
    # a probe on the delayed update's thread team, or of state split across tiers, is not the tier's
    for i, other in enumerate(({"dpu": True}, {"grads_on": "ddr1"})):
        elsewhere = gpu_run(tmp_path / f"other{i}", probed_host_adamw=3.66e9, optimizer_mode=False, offload=other)
        with pytest.raises(AdviceError, match="no CPU AdamW rate with the optimizer state on a DDR tier"):
            advise([elsewhere], "1b", tiers=["hbm", "ddr"])


def test_a_gpu_run_that_replayed_its_step_prices_compute_at_what_its_kernels_achieved(tmp_path):
    replayed = gpu_run(tmp_path / "r", flops_tflops=600.0, replayed_s=0.41)
    f = advise([replayed], "8b", tiers=["hbm", "ddr"]).inputs.gpu.flops
    assert f.value == pytest.approx(6e10 * 2048 / 0.41 / 1e12)        # 300 TFLOP/s, not the GEMM's 600
    assert "step's own kernels" in f.name and "410 ms" in f.detail and f.source.kind == MEASURED
    plain = gpu_run(tmp_path / "p", flops_tflops=600.0)
    g = advise([plain], "8b", tiers=["hbm", "ddr"]).inputs.gpu.flops
    assert g.value == 600.0 and "a bound" in g.detail                 # no replay: the GEMM rate, said so


def test_a_figure_comes_from_the_newest_run_that_has_it(tmp_path):
    results = tmp_path / "results"
    host_run(results, label="old")
    newer = host_run(results, adamw={"ddr": 3.0e9}, label="new")
    import json
    meta = json.loads((newer / "run.json").read_text())
    meta["started"] = "2027-01-01T00:00:00+00:00"
    (newer / "run.json").write_text(json.dumps(meta))
    a = advise([results], "8b", "h200")
    assert a.inputs.tiers["ddr0"].adamw.value == 3.0e9 and newer.name in a.inputs.tiers["ddr0"].adamw.source.text


def test_nvme_bandwidth_comes_from_the_storage_family_when_the_optimizer_did_not_measure_it(tmp_path):
    from cxlbench.results.schema import Sample
    m, tiers = synthetic.machine(cxl=False)
    tiers.append(Tier("nvme0", "nvme", path="/scratch", capacity_bytes=4 << 40))
    results = list(_optimizer("ddr0", "ddr", ADAMW["ddr"]))
    for rw, values in (("read", (3.0, 6.5)), ("write", (2.0, 3.5))):
        for block, v in zip((128 << 10, 1 << 20), values):
            r = synthetic.case_result("storage", "nvme0", {"rw": rw, "block_bytes": block, "qd": 8,
                                                           "io": "direct"}, {}, "nvme")
            r.samples = [Sample("bandwidth_GBps", v, i, {}) for i in range(3)]
            results.append(r)
    run = synthetic.write_run(tmp_path, _merge(results), m=m, tiers=tiers, suite="storage")
    t = advise([run], "8b", "h200", tiers=["nvme"]).inputs.tiers["nvme0"]
    assert (t.nvme_read.value, t.nvme_write.value) == (6.5, 3.5)
    assert "storage family" in t.nvme_read.detail and t.adamw.value == ADAMW["ddr"]


# ---- provenance ------------------------------------------------------------------------

def test_every_input_says_whether_it_was_measured_read_off_a_datasheet_or_assumed(tmp_path, capsys):
    """A datasheet is the vendor's; a copy rate someone measured on their machine is a
    published measurement (paper); a rate derived from a datasheet's bandwidth is modelled,
    so assumed."""
    run = host_run(tmp_path)
    a = advise([run], "8b", "h200")
    kinds = {f.source.kind for f in a.inputs.figures()}
    assert kinds == {MEASURED, DATASHEET, PAPER, ASSUMED}
    by_name = {f.name: f.source.kind for f in a.inputs.figures()}
    assert by_name["GPU AdamW, optimizer state in HBM"] == ASSUMED and by_name["HBM bandwidth"] == DATASHEET
    assert by_name["device → host copy (d2h)"] == PAPER
    ddr = a.inputs.tiers["ddr0"].adamw
    assert ddr.value == ADAMW["ddr"]                      # the best impl at all threads, not one thread
    assert "fused" in ddr.detail and "16 threads" in ddr.detail
    assert run.name in ddr.source.text and "synth-host" in ddr.source.text
    assert "Synthetic Xeon" in ddr.source.text and "mode=optimizer" in ddr.source.text
    mfu = next(f for f in a.inputs.figures() if f.name.startswith("MFU"))
    assert mfu.value == 0.4 and mfu.source.kind == ASSUMED and "REFERENCES.md" in mfu.source.text
    code, out, _ = run_cli(capsys, "advise", str(run), "--model", "8b", "--gpu", "h200")
    assert code == 0 and "MODELLED" in out
    for label in (MEASURED, DATASHEET, ASSUMED):
        assert re.search(rf"^  {label}\s", out, re.M), label
    assert "gpus.toml [h200]" in out and run.name in out


def test_datasheet_entries_load_with_their_sources():
    gpus = load_gpus()
    assert {"h100-sxm", "h200", "b200", "a100-80gb"} <= set(gpus)
    for g in gpus.values():
        assert g.source and g.url.startswith("https://") and g.host_source
        assert g.bf16_dense_tflops > 100 and g.hbm_gib >= 79 and g.hbm_TBps > 1 and g.pcie_gen in (4, 5, 6)
        assert 10 < g.host_GBps < 64             # a practical rate, under the Gen5 x16 link's ~63 GB/s
        assert g.hbm_source                      # what the device reports, not the datasheet's "GB"
    # the H200 this project measured reported 150754820096 B; an "80GB" H100 81559 MiB
    assert gpus["h200"].hbm_gib == pytest.approx(150754820096 / 2**30, abs=0.005) and gpus["h100-sxm"].hbm_gib == pytest.approx(81559 / 1024, abs=0.005)
    assert "nvbandwidth" in gpus["h200"].host_source


# ---- the command -----------------------------------------------------------------------

def test_a_missing_cxl_input_exits_2_with_one_line_naming_it_and_how_to_get_it(tmp_path, capsys):
    run = host_run(tmp_path, cxl=False)
    code, out, err = run_cli(capsys, "advise", str(run), "--model", "8b", "--gpu", "h200")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("cxlbench: error: no CPU AdamW rate with the optimizer state on a CXL tier")
    assert "no CXL tier on this machine" in line and "cxlbench run --suite training" in line
    assert "--tiers hbm,ddr,nvme" in line
    code, out, _ = run_cli(capsys, "advise", str(run), "--model", "8b", "--gpu", "h200", "--tiers", "hbm,ddr,nvme")
    assert code == 0 and "left out with --tiers: cxl" in out


def test_no_gpu_side_exits_2_naming_the_datasheet_entries(tmp_path, capsys):
    code, out, err = run_cli(capsys, "advise", str(host_run(tmp_path)), "--model", "8b")
    assert code == 2 and len(err.splitlines()) == 1
    assert "--gpu" in err and "h200" in err and "GPU machine" in err


@pytest.mark.parametrize("args, says", [
    (["--model", "9b", "--gpu", "h200"], "unknown model '9b'"),
    (["--model", "8b", "--gpu", "h300"], "unknown GPU 'h300'"),
    (["--model", "8b", "--gpu", "h200", "--within", "ten"], "is not a percentage"),
    (["--model", "8b", "--gpu", "h200", "--mfu", "40"], "is not a fraction"),
    (["--model", "8b", "--gpu", "h200", "--tiers", "hbm,optane"], "--tiers 'optane'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, says):
    code, out, err = run_cli(capsys, "advise", str(host_run(tmp_path)), *args)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and says in err
    assert "Traceback" not in err


def test_a_path_with_no_runs_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, out, err = run_cli(capsys, "advise", str(tmp_path / "empty"), "--model", "8b", "--gpu", "h200")
    assert code == 2 and len(err.splitlines()) == 1 and "no cxlbench runs" in err
    with pytest.raises(AdviceError, match="unknown model"):
        advise([tmp_path], "13b", "h200")


# ---- HTML ------------------------------------------------------------------------------

def test_the_advice_page_is_self_contained_and_names_its_inputs(tmp_path, capsys):
    run = host_run(tmp_path / "results")
    out = tmp_path / "advice.html"
    code, text, _ = run_cli(capsys, "advise", str(run), "--model", "8b", "--gpu", "h100-sxm", "-o", str(out))
    assert code == 0 and f"report: {out}" in text
    html = out.read_text()
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert "<svg" in html and "Modelled, not measured" in html
    assert "www.nvidia.com/en-us/data-center/h100/" in html          # the source, named as text
    for label in (MEASURED, DATASHEET, ASSUMED):
        assert f">{label}</span>" in html
    assert "does not fit in 79.6 GiB HBM" in html and 'id="advice-placements"' in html
    assert "nvme &lt; cxl &lt; ddr &lt; hbm" in html


def test_a_training_run_with_a_gpu_shows_its_placement_chart_in_its_report(tmp_path):
    results = tmp_path / "results"
    gpu = gpu_run(results)
    html = render_run_html(gpu)
    assert 'id="advice-placements"' in html and "modelled from this run" in html
    assert "optimizer state on hbm" in html and "optimizer state on ddr0" in html
    cpu_only = render_run_html(host_run(tmp_path / "other"))
    assert 'id="advice-placements"' not in cpu_only and 'id="advice-hint"' in cpu_only
    assert "--gpu h200" in cpu_only


def test_mfu_scales_the_compute_a_datasheet_gpu_is_priced_at(tmp_path):
    run = host_run(tmp_path)
    a, b = advise([run], "8b", "h200", mfu=0.4), advise([run], "8b", "h200", mfu=0.2)
    ca = next(p for p in a.placements if p.tier == "hbm").terms["compute"]
    cb = next(p for p in b.placements if p.tier == "hbm").terms["compute"]
    assert cb == pytest.approx(2 * ca)
    mfu = next(f for f in b.inputs.figures() if f.name.startswith("MFU"))
    assert mfu.source.kind == ASSUMED and "--mfu" in mfu.source.text
    assert replace(mfu, value=0.3).value == 0.3


def test_a_figure_measured_on_a_declared_tier_says_it_was_declared(tmp_path):
    run = host_run(tmp_path)
    a = advise([run], "8b", "h200")
    assert "declared nvme=/scratch" in a.inputs.tiers["nvme0"].adamw.source.text
    assert "declared" not in a.inputs.tiers["ddr0"].adamw.source.text       # discovered: nothing to say
