"""The terminal summary `cxlbench run` ends with: per repetition first, then median and range."""
import pandas as pd

from cxlbench.cli.summary import tier_summary


def rows(**common):
    def make(values, **extra):
        return [{**common, **extra, "value": v, "repetition": r} for r, v in enumerate(values)]
    return make


def test_latency_at_the_largest_working_set_and_peak_bandwidth_by_threads():
    lat = rows(benchmark="latency", target="ddr0", initiator="cpu:node0", metric="latency_ns", page="4k")
    bw = rows(benchmark="bandwidth", target="ddr0", initiator="cpu:node0", metric="bandwidth_GBps", kernel="read")
    frame = pd.DataFrame(lat([10, 11, 12], case_id="a", working_set_bytes=1 << 20)
                         + lat([300, 310, 500], case_id="b", working_set_bytes=1 << 30)
                         + bw([9, 10, 11], case_id="c", threads=1)
                         + bw([15, 16, 30], case_id="d", threads=2))
    text = tier_summary(frame)
    assert "1024 MiB working set, 4k pages" in text and "310.0 ns [300.0-500.0]" in text
    assert "peak read bandwidth (2 threads)" in text and "16.00 GB/s [15.00-30.00]" in text


def test_storage_lines_for_an_nvme_tier():
    st = rows(benchmark="storage", target="nvme0", initiator="cpu:node0", block_bytes=4096, rw="randread")
    frame = pd.DataFrame(st([50e3, 60e3, 70e3], case_id="q1", metric="latency_ns", qd=1, percentile=50)
                         + st([15e3, 16e3, 17e3], case_id="q1", metric="iops", qd=1)
                         + st([70e3, 80e3, 90e3], case_id="q32", metric="iops", qd=32))
    text = tier_summary(frame)
    assert "QD1, p50 latency" in text and "60.0 us [50.0-70.0]" in text
    assert "peak IOPS (QD32)" in text and "80000 IO/s" in text
