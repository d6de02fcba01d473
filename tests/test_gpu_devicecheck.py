"""The device check's table, from a run made of fake-measured GPU cases: ours vs
torch on the same buffers, the published figures, the Hopper latencies, the
zero-copy crossover — each with its verdict — and the exit status."""
import pytest

from cxlbench.benchmarks import gpu_bandwidth, gpu_latency, gpu_write_penalty, gpu_zerocopy
from cxlbench.benchmarks.base import describe
from cxlbench.cli import devicecheck
from cxlbench.gpu import device, torchref
from cxlbench.results.schema import Case, CaseResult
from cxlbench.results.store import RunWriter
from cxlbench.runner.run import build_env
from cxlbench.topology.model import Initiator, Tier

from fakes.gpu import FakeDevice
from test_gpu_families import FakeTorchCopies, bw


@pytest.fixture(scope="module")
def made_run(tmp_path_factory):
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _make_run(tmp_path_factory.mktemp("runs"), monkeypatch)


def _make_run(tmp_path, monkeypatch):
    env = build_env("/", [], {})
    env.initiators["gpu:0"] = Initiator("gpu:0", "gpu", node=0, gpu=0)
    env.tiers["hbm0"] = Tier("hbm0", "hbm", gpu=0)
    dev = FakeDevice(chase_ns=34 / 1.5)                     # 34 cycles at 1500 MHz: Hopper's L1
    dev.slow.add("cb_copy")                                  # the eight-deep copy is the one kept
    monkeypatch.setattr(device, "open_device", lambda env, name: dev)
    monkeypatch.setattr(torchref, "TorchCopies", FakeTorchCopies)
    families = {m.NAME: describe(m) for m in (gpu_bandwidth, gpu_latency, gpu_write_penalty, gpu_zerocopy)}
    writer = RunWriter(tmp_path, "gpu-host", {"machine": {"gpus": [{"name": "NVIDIA H200"}]},
                                              "label": "device-check", "families": families})
    cases = [
        (gpu_bandwidth, "hbm0", "hbm", bw("copy")),
        (gpu_bandwidth, "hbm0", "hbm", bw("memcpy_d2d", impl="torch")),
        (gpu_bandwidth, "ddr0", "ddr", bw("h2d")),
        (gpu_bandwidth, "ddr0", "ddr", bw("h2d", impl="torch")),
        (gpu_bandwidth, "ddr0", "ddr", bw("d2h")),
        (gpu_bandwidth, "ddr0", "ddr", bw("h2d", host_memory="pageable")),
        (gpu_latency, "hbm0", "hbm", {"pattern": "random", "stride_bytes": 64, "working_set_bytes": 16 << 10,
                                      "load": "ca"}),
        (gpu_latency, "hbm0", "hbm", {"pattern": "random", "stride_bytes": 64, "working_set_bytes": 256 << 20,
                                      "load": "ca"}),
        (gpu_zerocopy, "ddr0", "ddr", {"strategy": "in_place", "data_bytes": 1 << 20, "max_uses": 8, "page": "4k"}),
        (gpu_zerocopy, "ddr0", "ddr", {"strategy": "memcpy", "data_bytes": 1 << 20, "max_uses": 8, "page": "4k"}),
        (gpu_write_penalty, "hbm0", "hbm", {"op": "read", "access": "load", "write_bytes": 16, "stride_bytes": 16,
                                            "size_bytes": 1 << 20, "bytes_counted": "instructions", "iterations": 2}),
        (gpu_write_penalty, "hbm0", "hbm", {"op": "write", "access": "store", "write_bytes": 16,
                                            "stride_bytes": 16, "size_bytes": 1 << 20,
                                            "bytes_counted": "instructions", "iterations": 2}),
    ]
    for module, target, kind, params in cases:
        if module is gpu_latency and params["working_set_bytes"] > 1 << 20:
            params = {**params, "working_set_bytes": 256 << 20}
            dev.chase_ns = 650 / 1.5 * 1.5                      # 975 cycles: far from 650
        case = Case(module.NAME, "gpu:0", target, kind, params, 2, 1)
        info = {}
        samples = module.measure(case, env, info)
        writer.add(CaseResult(case, "ok", samples=samples, info=info))
    skipped = Case("gpu_storage", "gpu:0", "nvme0", "nvme", {"path": "bounce"}, 2, 1)
    writer.add(CaseResult(skipped, "skipped", "no NVMe tier declared"))
    writer.finish()
    return writer.path


def test_the_table_holds_each_target_with_its_verdict(made_run):
    text, counts = devicecheck.table(made_run)
    assert counts == {"ok": 12, "skipped": 1, "failed": 0}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    copy = rows["HBM copy kernel vs torch D2D copy"]
    assert "2,000 GB/s" in copy and "100.0%" in copy and "meets" in copy
    assert "hbm0, 1MiB, 8 loads in flight" in copy
    assert "SHORT" in rows["HBM copy kernel vs published H200"] and "4,300 GB/s" in rows[
        "HBM copy kernel vs published H200"]
    assert "meets" in rows["pinned H2D vs torch copy_"]
    assert "pageable 4k h2d" in rows and "20.0%" in rows["pageable 4k h2d"]   # 10 vs 50 GB/s pinned
    assert "34 cycles" in rows["L1 latency (chase, 64 B random)"] and "meets" in rows["L1 latency (chase, 64 B random)"]
    assert "SHORT" in rows["HBM latency (chase, 64 B random)"]
    assert "K ≥" in rows["memcpy beats in-place"]
    assert "write ÷ read per sector (ECC on)" in rows
    assert "skipped 1× : no NVMe tier declared" in text
    assert text.startswith("GPU: NVIDIA H200")


def test_the_exit_status_says_whether_the_check_passed(made_run, capsys):
    assert devicecheck.main(["--table", str(made_run)]) == 0
    assert "HBM copy kernel" in capsys.readouterr().out
    assert devicecheck._status({"ok": 3, "skipped": 0, "failed": 1}) == 1
    assert devicecheck._status({"ok": 0, "skipped": 40, "failed": 0}) == 2


def test_a_run_without_gpu_cases_gives_an_empty_table(tmp_path):
    writer = RunWriter(tmp_path, "cpu-host", {"machine": {"gpus": []}})
    writer.add(CaseResult(Case("gpu_latency", "gpu:0", "hbm0", "hbm", {}, 1, 0), "skipped", "no GPU"))
    writer.finish()
    text, counts = devicecheck.table(writer.path)
    assert counts == {"ok": 0, "skipped": 1, "failed": 0}
    assert "GPU: no GPU" in text and "skipped 1× : no GPU" in text


def test_the_report_renders_the_gpu_families(made_run, tmp_path):
    from cxlbench.report import render
    from cxlbench.results.store import load_run
    run = load_run(made_run)
    assert {"bytes_counted", "iteration", "sm_clock_mhz", "ecc"} <= set(run.samples.columns)
    path = render([made_run], tmp_path / "gpu.html")
    html = path.read_text()
    assert "gpu_bandwidth" in html and "gpu_latency" in html and "<svg" in html
