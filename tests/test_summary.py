"""The terminal summary `cxlbench run` ends with: each family's headline figures per
tier, as the run recorded the families; per repetition first, then median and range."""
import pandas as pd

from cxlbench.benchmarks import family
from cxlbench.benchmarks.base import describe
from cxlbench.cli.tier_table import tier_summary


def summary(rows):
    """The summary of tidy rows, with the units and the families' descriptions a run records."""
    frame = pd.DataFrame(rows)
    names = set(frame.benchmark)
    fams = {n: describe(family(n)) for n in names}
    frame["run_id"] = "r"
    frame["unit"] = [fams[b]["metrics"][m]["unit"] for b, m in zip(frame.benchmark, frame.metric)]
    frame["better"] = [fams[b]["metrics"][m]["better"] for b, m in zip(frame.benchmark, frame.metric)]
    frame["tier_kind"] = frame.target.str.extract(r"([a-z]+)", expand=False)
    return tier_summary(frame, {"families": fams})


def rows(**common):
    def make(values, **extra):
        return [{**common, **extra, "value": v, "repetition": r} for r, v in enumerate(values)]
    return make


def test_latency_at_the_largest_working_set_and_peak_bandwidth_by_threads():
    lat = rows(benchmark="latency", target="ddr0", initiator="cpu:node0", metric="latency_ns", page="4k",
               pattern="random", chains=1)
    bw = rows(benchmark="bandwidth", target="ddr0", initiator="cpu:node0", metric="bandwidth_GBps",
              kernel="read", nt=False)
    text = summary(lat([10, 11, 12], case_id="a", working_set_bytes=1 << 20)
                   + lat([300, 310, 500], case_id="b", working_set_bytes=1 << 30)
                   + bw([9, 10, 11], case_id="c", threads=1)
                   + bw([15, 16, 30], case_id="d", threads=2))
    assert "latency, 1GiB working set, 4k pages" in text and "310.0 ns [300.0-500.0]" in text
    assert "peak read bandwidth (2 threads)" in text and "16.00 GB/s [15.00-30.00]" in text


def test_storage_lines_for_an_nvme_tier():
    st = rows(benchmark="storage", target="nvme0", initiator="cpu:node0", block_bytes=4096, rw="randread")
    text = summary(st([50e3, 60e3, 70e3], case_id="q1", metric="latency_ns", qd=1, percentile=50)
                   + st([15e3, 16e3, 17e3], case_id="q1", metric="iops", qd=1)
                   + st([70e3, 80e3, 90e3], case_id="q32", metric="iops", qd=32))
    assert "QD1, p50 latency" in text and "60.0 us [50.0-70.0]" in text
    assert "peak IOPS (QD32)" in text and "80000 IO/s" in text


def test_training_lines_tokens_over_steps_loss_and_where_adamw_state_lives():
    def steps(values, metric, **extra):
        return [{"benchmark": "training", "initiator": "cpu:node0", "mode": "train", "config": "tiny",
                 "compute": "cpu", "metric": metric, "value": v, "repetition": 0, "iteration": i, **extra}
                for i, v in enumerate(values)]
    opt = rows(benchmark="training", initiator="cpu:node0", mode="optimizer", metric="params_per_s")
    text = summary(
        steps([900, 1000, 1100], "tokens_per_s", case_id="t", target="ddr0", engine="offload")
        + steps([5.0, 4.2, 3.1], "loss", case_id="t", target="ddr0", engine="offload")
        + opt([1.0e9, 1.2e9, 1.1e9], case_id="o1", target="ddr0", impl="fused", threads=1)
        + opt([3.0e8, 3.1e8, 3.2e8], case_id="o1", target="ddr0", impl="foreach", threads=1)
        + opt([6e7, 7e7, 8e7], case_id="o2", target="nvme0", impl="fused", io="nvme", threads=1)
        + opt([3e9, 3e9, 3e9], case_id="o2", target="nvme0", impl="fused", io="memory", threads=1))
    ddr, nvme = text.split("nvme0")
    assert "training tiny, engine offload (cpu)" in ddr and "1000 tokens/s [900-1100], loss 5.00 -> 3.10" in ddr
    assert "AdamW, state on this tier (fused, 1 thread)" in ddr and "1100 M params/s [1000-1200]" in ddr
    # with the state in files, the rate that counts includes the I/O, not the in-memory update
    assert "AdamW, state on this tier (fused, 1 thread)" in nvme and "70 M params/s [60-80]" in nvme
    assert "3000 M params/s" not in nvme
    assert "over repetitions (training: steady steps)" in text


def test_find_max_line_names_the_largest_config_per_engine():
    found = rows(benchmark="training", initiator="cpu:node0", mode="find_max", compute="cpu",
                 metric="max_params", target="ddr0")
    text = summary(found([27.3e6], case_id="a", engine="offload", max_config="small")
                   + found([131392], case_id="b", engine="none", max_config="tiny"))
    assert "largest config that fits, offload (cpu): small" in text and "27.3 M params" in text
    assert "largest config that fits, none (cpu): tiny" in text and "131 k params" in text


def test_a_tier_without_a_headline_says_the_report_has_its_figures():
    text = summary(rows(benchmark="zerocopy", target="cxl2", initiator="cpu:node0", metric="seconds",
                        strategy="copy", uses=1)([1.0, 1.1], case_id="z"))
    assert "cxl2\n  (no summary figure" in text


def test_a_run_without_a_dpu_case_or_a_thp_case_prints_no_such_line():
    """Absent dpu means off and absent page means 4 KiB: the 3b GPU run, whose only
    DPU case was skipped, printed every placement twice, once as 'delayed update'."""
    def steps(values, **extra):
        return [{"benchmark": "training", "initiator": "gpu:0", "mode": "train", "config": "3b",
                 "compute": "gpu", "metric": "tokens_per_s", "value": v, "repetition": 0, "iteration": i,
                 "target": "ddr0", "engine": "offload", **extra} for i, v in enumerate(values)]
    opt = rows(benchmark="training", initiator="cpu:node0", mode="optimizer", metric="params_per_s")
    plain = summary(steps([3000, 3100, 3200], case_id="t") + opt([1e9, 1e9, 1e9], case_id="o", target="ddr0",
                                                                 impl="native", threads=2))
    assert "3100 tokens/s" in plain and "delayed update" not in plain and "THP" not in plain
    both = summary(steps([3000, 3100, 3200], case_id="t") + steps([4000, 4100, 4200], case_id="d", dpu=True)
                   + opt([1e9, 1e9, 1e9], case_id="o", target="ddr0", impl="native", threads=2, page="4k")
                   + opt([2e9, 2e9, 2e9], case_id="h", target="ddr0", impl="native", threads=2, page="thp"))
    assert "engine offload, delayed update (gpu)" in both and "4100 tokens/s" in both
    assert "AdamW, state on THP (native, 2 threads)" in both and "2000 M params/s" in both
    assert "AdamW, state on this tier (native, 2 threads)" in both and "1000 M params/s" in both
