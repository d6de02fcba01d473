"""The public shape of results: cases, samples, metrics, and the run record.

samples.parquet is tidy: one row per sample. Its core columns (CORE_COLUMNS)
are a public format that users and CI scripts read; parameters follow as one
column each (working_set_bytes, threads, page_bytes, pattern, kernel, ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

CORE_COLUMNS = [
    "run_id", "case_id", "benchmark", "initiator", "target", "tier_kind",
    "metric", "value", "unit", "better", "repetition",
]

# Case statuses as recorded in run.json.
OK, SKIPPED, FAILED = "ok", "skipped", "failed"
# Run statuses.
RUNNING, COMPLETE, PARTIAL, RUN_FAILED = "running", "complete", "partial", "failed"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: str    # "lower" or "higher": comparisons and colours read it from here

    def __post_init__(self):
        if self.better not in ("lower", "higher"):
            raise ValueError(f"metric {self.name}: better must be lower/higher")


METRICS: dict[str, Metric] = {m.name: m for m in [
    Metric("latency_ns", "ns", "lower"),
    Metric("bandwidth_GBps", "GB/s", "higher"),     # 10^9 bytes per second
    Metric("iops", "IO/s", "higher"),
    Metric("tokens_per_s", "tokens/s", "higher"),
    Metric("step_time_s", "s", "lower"),
    Metric("seconds", "s", "lower"),
    Metric("params_per_s", "params/s", "higher"),
    Metric("tflops", "TFLOP/s", "higher"),
    Metric("mfu", "fraction", "higher"),
    Metric("cycles", "cycles", "lower"),
    Metric("loss", "nats", "lower"),
    # training step breakdown (seconds of one step spent in each phase)
    Metric("forward_s", "s", "lower"),
    Metric("backward_s", "s", "lower"),
    Metric("transfer_s", "s", "lower"),          # device<->host copies not hidden behind compute
    Metric("optimizer_s", "s", "lower"),
    Metric("nvme_read_s", "s", "lower"),         # time the update waited for NVMe reads
    Metric("nvme_write_s", "s", "lower"),
    Metric("idle_s", "s", "lower"),
    Metric("predicted_step_s", "s", "lower"),    # the step-time model's prediction
    Metric("memory_bytes", "B", "lower"),        # peak/placed bytes per tier (column `memory`)
    Metric("max_params", "params", "higher"),    # largest model that trains in a placement
    # host suites (issue 3)
    Metric("ns_per_load", "ns", "lower"),        # chase with N chains: elapsed / (steps x chains)
    Metric("ns_per_line", "ns", "lower"),        # write penalty: time per 64-byte line, all threads
    Metric("ns_per_sector", "ns", "lower"),      # GPU write penalty: time per 32-byte sector touched
]}


def metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}") from None


@dataclass
class Case:
    """One measurement: an initiator accesses a target tier with a pattern and parameters."""
    benchmark: str
    initiator: str             # cpu:node0, gpu:0
    target: str                # ddr0, cxl2, hbm0, nvme0
    tier_kind: str             # ddr / cxl / hbm / nvme
    params: dict[str, Any] = field(default_factory=dict)
    repetitions: int = 5
    warmup: int = 1
    # Where this worker's repetitions start in the case's numbering, when the runner
    # spreads them over processes (runner.processes); not part of the case's identity.
    first_repetition: int = 0

    def seed(self, rep: int) -> int:
        """A random seed per repetition, distinct across the processes of one case."""
        return self.first_repetition + rep + 1

    @property
    def case_id(self) -> str:
        """Stable and readable: the same case on another machine or day has the same id."""
        parts = ",".join(f"{k}={self.params[k]}" for k in sorted(self.params))
        return f"{self.benchmark}/{self.initiator}/{self.target}/{parts}"


@dataclass
class Sample:
    """One repetition's value of one metric. `params` holds what was found at run time
    (page_bytes actually obtained, huge_coverage, ...), which overrides the case's asked-for
    parameters of the same name in the stored row."""
    metric: str
    value: float
    repetition: int
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class CaseResult:
    case: Case
    status: str                # ok / skipped / failed
    reason: str = ""
    samples: list[Sample] = field(default_factory=list)
    seconds: float = 0.0       # wall time the case took
    info: dict[str, Any] = field(default_factory=dict)   # placement verification, warnings


def sample_rows(run_id: str, result: CaseResult) -> list[dict[str, Any]]:
    """Flatten a case's samples into tidy rows (one per sample)."""
    case = result.case
    rows = []
    for s in result.samples:
        m = metric(s.metric)
        row = {
            "run_id": run_id, "case_id": case.case_id, "benchmark": case.benchmark,
            "initiator": case.initiator, "target": case.target, "tier_kind": case.tier_kind,
            "metric": m.name, "value": float(s.value), "unit": m.unit, "better": m.better,
            "repetition": s.repetition,
        }
        row.update(case.params)
        row.update(s.params)
        rows.append(row)
    return rows
