"""The public shape of results: cases, samples, metrics, and the run record.

samples.parquet is tidy: one row per sample. Its core columns (CORE_COLUMNS)
are a public format that users and CI scripts read; parameters follow as one
column each (working_set_bytes, threads, page_bytes, pattern, kernel, ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

#: a bound no measured figure comes near (ns, bytes/s, tokens/s, IOPS all sit far below):
#: past it, or not finite, a value is a fault (a division by a zero time). A case that
#: measures one fails (benchmarks.base.check_metrics); a file that holds one is damaged.
MOST_VALUE = 1e30

CORE_COLUMNS = [
    "run_id", "case_id", "benchmark", "initiator", "target", "tier_kind",
    "metric", "value", "unit", "better", "repetition",
]

#: Per family, parameters a case records only when they are not the default, so
#: that the ordinary cases keep their ids: absent means this value (training's
#: delayed update is off; its host state is on 4 KiB pages). Anywhere else an
#: absent parameter means nothing is known, or does not apply (an older run; a
#: GPU latency case on HBM has no page size).
ABSENT_MEANS: dict[str, dict[str, Any]] = {"training": {"dpu": False, "page": "4k"}}

# Case statuses as recorded in run.json.
OK, SKIPPED, FAILED = "ok", "skipped", "failed"
# Run statuses.
RUNNING, COMPLETE, PARTIAL, RUN_FAILED = "running", "complete", "partial", "failed"
#: how a case that ran past its time limit is failed: a gate's --allow-missing does not
#: cover it, since its time limit is a measurement (slower than it allows) and no choice
TIMED_OUT = "timed out after"


@dataclass(frozen=True)
class Metric:
    """What a family's samples measure; each family declares its own (METRICS),
    and the run records them, so there is no table of metrics to keep in step."""
    name: str
    unit: str
    better: str    # "lower" or "higher": comparisons and colours read it from here

    def __post_init__(self):
        if self.better not in ("lower", "higher"):
            raise ValueError(f"metric {self.name}: better must be lower/higher")


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


def failed_cases(meta: dict[str, Any]) -> dict[str, str]:
    """case_id -> reason, for a run's cases that failed. A case that failed part-way
    keeps the samples of its finished repetitions in the run (nothing measured is
    lost), but they are not its figure: every reader that states or judges figures
    (the summaries, the gates, the history) leaves them out."""
    return {c["case_id"]: c.get("reason") or "" for c in meta.get("cases") or []
            if c.get("status") == FAILED and "case_id" in c}


def timed_out_cases(meta: dict[str, Any]) -> list[str]:
    """The case ids a run's time limit failed: in the case's own process or any of them
    (the runner prefixes "process 2 of 5: " to a later process's reason)."""
    return [c["case_id"] for c in meta.get("cases") or []
            if c.get("status") == FAILED and TIMED_OUT in str(c.get("reason") or "") and "case_id" in c]


def unmeasured_reason(case: dict[str, Any]) -> str:
    """"status: reason" for a case record that was not measured whole (skipped or
    failed), "" for one measured: why a case a gate expected has no figure."""
    if case.get("status") in (None, OK):
        return ""
    return f"{case.get('status')}: {case.get('reason') or ''}"


def why_none_measured(ended: list[tuple[str, str | None]]) -> str:
    """'3 failed, 1 skipped; <the commonest reason>' for the (status, reason) of each
    case of a run that measured nothing whole: what `run` says as it exits 1 and what
    `export` says as it refuses, worded alike."""
    from collections import Counter
    said = ", ".join(f"{n} {status}" for status, n in Counter(s for s, _ in ended).most_common())
    why = Counter(r for s, r in ended if s != OK and r).most_common(1)
    return f"{said or 'no cases'}{f'; {why[0][0]}' if why else ''}"


def case_warnings(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """(case_id, warning) for each warning a measured case recorded: what the case
    found that may move its figure (ECC counts that moved during it, a file on a
    filesystem held in memory, a step model that disagrees, a process that failed past
    the planned repetitions). The figure stands; a reader shows the warning beside it."""
    out = []
    for c in meta.get("cases") or []:
        found = (c.get("info") or {}).get("warnings") or []
        if c.get("status") == OK and "case_id" in c:
            out += [(c["case_id"], str(w)) for w in (found if isinstance(found, list) else [found])]
    return out


def sample_rows(run_id: str, result: CaseResult, metrics: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Flatten a case's samples into tidy rows (one per sample); `metrics`: the unit
    and direction of each metric its family declares, as run.json records them."""
    case = result.case
    rows = []
    for s in result.samples:
        m = metrics[s.metric]
        row = {
            "run_id": run_id, "case_id": case.case_id, "benchmark": case.benchmark,
            "initiator": case.initiator, "target": case.target, "tier_kind": case.tier_kind,
            "metric": s.metric, "value": float(s.value), "unit": m["unit"], "better": m["better"],
            "repetition": s.repetition,
        }
        row.update(case.params)
        row.update(s.params)
        rows.append(row)
    return rows
