"""Export a run in pytest-benchmark's JSON format.

So `pytest-benchmark compare`, and the CI dashboards that read that format, can
show cxlbench results. pytest-benchmark holds times (seconds, lower is better),
one entry per benchmark with its rounds; here each point (a metric of a case) is
one entry and its rounds are the run's process repetitions (inner samples
reduced to their median, as everywhere in cxlbench).

Units: latency_ns becomes seconds (×1e-9); seconds-like metrics stay seconds;
metrics where higher is better (GB/s, tokens/s, ...) are exported as their
reciprocal — seconds per GB, seconds per token — so pytest-benchmark's "lower is
better" keeps the right direction; anything else is exported as is. Each entry's
extra_info keeps the original metric, unit, direction and median.
"""
from __future__ import annotations

import json
import math
import platform
import statistics
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any

from cxlbench.analysis.compare import as_run, params_text
from cxlbench.analysis.reduction import axis_columns, param_columns, point_id, repetitions
from cxlbench.results.store import Run, atomic_write

#: The pytest-benchmark file format version these files follow.
FORMAT_VERSION = "5.1.0"
_TIME_SCALE = {"latency_ns": 1e-9, "seconds": 1.0, "step_time_s": 1.0}


def _convert(metric: str, unit: str, better: str, values: list[float]) -> tuple[list[float], str]:
    if metric in _TIME_SCALE:
        return [v * _TIME_SCALE[metric] for v in values], "seconds"
    if unit == "s":
        return values, "seconds"
    if better == "higher":
        return [1.0 / v if v else math.inf for v in values], f"seconds per {unit.split('/')[0]} (1/value)"
    return values, f"{unit} (as is; not a time)"


def _quartiles(data: list[float]) -> tuple[float, float]:
    """Quartiles exactly as pytest-benchmark computes them."""
    n = len(data)
    if n == 1:
        return data[0], data[0]
    if n % 2:
        k, q = n // 4, n % 4
        if q == 1:
            q1 = 0.25 * data[k - 1] + 0.75 * data[k]
            q3 = 0.75 * data[3 * k] + 0.25 * data[3 * k + 1]
        else:
            q1 = 0.75 * data[k] + 0.25 * data[k + 1]
            q3 = 0.25 * data[3 * k + 1] + 0.75 * data[3 * k + 2]
        return q1, q3
    return statistics.median(data[: n // 2]), statistics.median(data[n // 2:])


def stats(values: list[float], iterations: int = 1) -> dict[str, Any]:
    """pytest-benchmark's Stats fields for one benchmark's rounds."""
    data = sorted(values)
    n = len(data)
    mean = statistics.mean(data)
    stddev = statistics.stdev(data) if n > 1 else 0.0
    q1, q3 = _quartiles(data)
    iqr = q3 - q1
    ld = data[0] if n == 1 else data[bisect_left(data, q1 - 1.5 * iqr)]
    hd = data[0] if n == 1 else data[bisect_right(data, q3 + 1.5 * iqr) - 1]
    iqr_out = sum(1 for v in data if v < q1 - 1.5 * iqr or v > q3 + 1.5 * iqr)
    sd_out = sum(1 for v in data if v < mean - stddev or v > mean + stddev)
    return {"min": data[0], "max": data[-1], "mean": mean, "stddev": stddev, "rounds": n,
            "median": statistics.median(data), "iqr": iqr, "q1": q1, "q3": q3,
            "iqr_outliers": iqr_out, "stddev_outliers": sd_out, "outliers": f"{sd_out};{iqr_out}",
            "ld15iqr": ld, "hd15iqr": hd, "ops": 1.0 / mean if mean else 0.0, "total": sum(data),
            "data": list(values), "iterations": iterations}


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def pytest_benchmark_dict(run: Run) -> dict[str, Any]:
    meta = run.meta
    reps = repetitions(run.samples)
    axes = axis_columns(reps)
    params_cols = [c for c in param_columns(reps)]
    env = meta.get("environment") or {}
    cpu = (meta.get("machine") or {}).get("cpu") or {}
    benchmarks = []
    if not reps.empty:
        keys = ["case_id", "metric"] + axes
        for key, g in reps.groupby(keys, sort=False, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            first = g.iloc[0]
            metric, unit, better = str(first["metric"]), str(first["unit"]), str(first["better"])
            params = {c: _jsonable(first[c]) for c in params_cols
                      if c in g.columns and first[c] is not None and not (isinstance(first[c], float)
                                                                          and math.isnan(first[c]))}
            ax = {a: first[a] for a in axes}
            pid = point_id(str(first["case_id"]), ax)
            values = [float(v) for v in g.sort_values("repetition")["value"]]
            converted, as_unit = _convert(metric, unit, better, values)
            where = f"{first['initiator']}→{first['target']}"
            param = " ".join(x for x in [where, params_text(params), metric] if x)
            name = f"{first['benchmark']}[{param}]"
            benchmarks.append({
                "group": f"{first['benchmark']} · {metric}",
                "name": name, "fullname": f"cxlbench/{first['benchmark']}::{name}",
                "params": params or None, "param": param,
                "extra_info": {"metric": metric, "unit": unit, "better": better, "exported_as": as_unit,
                               "median": statistics.median(values), "case_id": str(first["case_id"]),
                               "point": pid, "initiator": str(first["initiator"]),
                               "target": str(first["target"]), "tier_kind": str(first["tier_kind"]),
                               "run_id": str(first["run_id"])},
                "options": {"disable_gc": False, "timer": "cxlbench", "min_rounds": len(values),
                            "max_time": 0, "min_time": 0, "warmup": False},
                "stats": stats(converted, int(g["n_inner"].max()) if "n_inner" in g else 1),
            })
    return {
        "machine_info": {"node": meta.get("hostname"), "processor": cpu.get("model") or platform.processor(),
                         "machine": platform.machine(), "python_compiler": "",
                         "python_implementation": "CPython",
                         "python_implementation_version": (meta.get("versions") or {}).get("python", ""),
                         "python_version": (meta.get("versions") or {}).get("python", ""),
                         "python_build": [], "release": env.get("kernel") or "", "system": "Linux",
                         "cpu": {"brand_raw": cpu.get("model"), "count": cpu.get("threads")},
                         "cxlbench": {"run_id": meta.get("run_id"), "label": meta.get("label"),
                                      "status": meta.get("status"),
                                      "suite": (meta.get("suite") or {}).get("name")
                                      if isinstance(meta.get("suite"), dict) else meta.get("suite")}},
        "commit_info": {"id": None, "time": None, "author_time": None, "dirty": False,
                        "project": "cxlbench", "branch": None},
        "benchmarks": benchmarks,
        "datetime": meta.get("started") or "",
        "version": FORMAT_VERSION,
    }


def export_pytest_benchmark(run: Run | str | Path, path: str | Path) -> Path:
    """Write `run` (a run directory or a loaded Run) to `path` as pytest-benchmark JSON."""
    data = pytest_benchmark_dict(as_run(run))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(data, indent=1, allow_nan=False, default=str).encode())
    return out


__all__ = ["export_pytest_benchmark", "pytest_benchmark_dict"]
