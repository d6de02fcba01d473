"""Export a run in other tools' formats: pytest-benchmark's JSON, and
github-action-benchmark's customBiggerIsBetter / customSmallerIsBetter.

A point's name is made of what the case asked for — its family, initiator, target,
the suite's parameters and the point's axis values, the metric — never of a value
found while measuring (cpu_held, t_s, steps, huge_coverage): two runs of one suite
give every point the same name, so the tools that follow a name over runs pair them.

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
import sys
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any

from cxlbench.analysis import drift
from cxlbench.analysis.compare import as_run, params_text
from cxlbench.analysis.reduction import axis_columns, point_id, repetitions
from cxlbench.results.schema import why_none_measured
from cxlbench.results.store import ResultsError, Run, atomic_write, measured_whole

#: The pytest-benchmark file format version these files follow.
FORMAT_VERSION = "5.1.0"
#: seconds per unit of each unit that is a time: a metric converts by its unit, so every
#: time (p50_ns, max_ns, ns_per_line ... as well as latency_ns) goes in as seconds
_TIME_SCALE = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


class NoTime(ValueError):
    """A higher-is-better figure of 0 or less (loaded latency's idle point reads 0 GB/s):
    pytest-benchmark holds times, and it has no time per unit."""


def _convert(metric: str, unit: str, better: str, values: list[float]) -> tuple[list[float], str]:
    if unit in _TIME_SCALE:
        return [v * _TIME_SCALE[unit] for v in values], "seconds"
    if better == "higher":
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise NoTime(f"{metric} {min(values):g} {unit}")
        return [1.0 / v for v in values], f"seconds per {unit.split('/')[0]} (1/value)"
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


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def points_of(run: Run) -> list[dict[str, Any]]:
    """Every point of the run (a metric of a case, at its axis values) with its stable
    name, the case's asked parameters and its per-repetition values: the cases measured
    whole, without the drift sentinels' visits (no benchmark of the suite; compare,
    gate and the headlines leave them out too)."""
    reps = repetitions(drift.cases_only(measured_whole(run.samples, run.meta), run.meta))
    axes = axis_columns(reps)
    asked = {c.get("case_id"): c.get("params") or {} for c in run.meta.get("cases") or []}
    out = []
    if reps.empty:
        return out
    for _, g in reps.groupby(["case_id", "metric"] + axes, sort=False, dropna=False):
        first = g.iloc[0]
        case_id = str(first["case_id"])
        params = {k: _jsonable(v) for k, v in sorted(asked.get(case_id, {}).items()) if _present(v)}
        ax = {a: _jsonable(first[a]) for a in axes if _present(first[a])}
        where = f"{first['initiator']}→{first['target']}"
        param = " ".join(x for x in [where, params_text({**params, **ax}), str(first["metric"])] if x)
        out.append({"benchmark": str(first["benchmark"]), "name": f"{first['benchmark']}[{param}]",
                    "param": param, "params": {**params, **ax}, "first": first,
                    "point": point_id(case_id, {a: first[a] for a in axes}),
                    "values": [float(v) for v in g.sort_values("repetition")["value"]],
                    "n_inner": int(g["n_inner"].max()) if "n_inner" in g else 1})
    return out


def pytest_benchmark_dict(run: Run) -> dict[str, Any]:
    meta = run.meta
    env = meta.get("environment") or {}
    cpu = (meta.get("machine") or {}).get("cpu") or {}
    benchmarks, left = [], []
    points = points_of(run)
    for p in points:
        first, values = p["first"], p["values"]
        metric, unit, better = str(first["metric"]), str(first["unit"]), str(first["better"])
        try:
            converted, as_unit = _convert(metric, unit, better, values)
        except NoTime as e:
            left.append(f"{p['name']} ({e})")
            continue
        benchmarks.append({
            "group": f"{p['benchmark']} · {metric}",
            "name": p["name"], "fullname": f"cxlbench/{p['benchmark']}::{p['name']}",
            "params": p["params"] or None, "param": p["param"],
            "extra_info": {"metric": metric, "unit": unit, "better": better, "exported_as": as_unit,
                           "median": statistics.median(values), "case_id": str(first["case_id"]),
                           "point": p["point"], "initiator": str(first["initiator"]),
                           "target": str(first["target"]), "tier_kind": str(first["tier_kind"]),
                           "run_id": str(first["run_id"])},
            "options": {"disable_gc": False, "timer": "cxlbench", "min_rounds": len(values),
                        "max_time": 0, "min_time": 0, "warmup": False},
            "stats": stats(converted, p["n_inner"]),
        })
    if not benchmarks:
        raise ResultsError(_nothing(run) if not points else
                           f"{meta.get('run_id')} holds no figure pytest-benchmark can take (no sample is a "
                           "positive number): nothing to export")
    if left:
        print(f"cxlbench: note: {len(left)} point(s) left out, a figure of 0 or less has no time per unit: "
              + "; ".join(left[:3]) + (" ..." if len(left) > 3 else ""), file=sys.stderr)
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
                                      if isinstance(meta.get("suite"), dict) else meta.get("suite"),
                                      "left_out": left}},
        "commit_info": {"id": None, "time": None, "author_time": None, "dirty": False,
                        "project": "cxlbench", "branch": None},
        "benchmarks": benchmarks,
        "datetime": meta.get("started") or "",
        "version": FORMAT_VERSION,
    }


def export_pytest_benchmark(run: Run | str | Path, path: str | Path) -> Path:
    """Write `run` (a run directory or a loaded Run) to `path` as pytest-benchmark JSON."""
    return write(pytest_benchmark_dict(as_run(run)), path)


#: github-action-benchmark's two custom tools, and the direction each holds
GAB_TOOLS = {"customBiggerIsBetter": "higher", "customSmallerIsBetter": "lower"}


def github_action_benchmark_list(run: Run, tool: str) -> list[dict[str, Any]]:
    """The points whose metric goes `tool`'s way, in github-action-benchmark's custom
    format: name, unit, value (the median of the repetitions, as cxlbench prints it),
    range (its 95% interval) and extra (repetitions, the case and the run). None is
    refused (ResultsError): the action fails on an empty file."""
    from cxlbench.analysis.stats import median_ci
    want = GAB_TOOLS[tool]
    out, left = [], []
    points = points_of(run)
    for p in points:
        first = p["first"]
        if str(first["better"]) != want:
            continue
        if want == "higher" and not statistics.median(p["values"]) > 0:
            left.append(p["name"])         # loaded latency's idle point: no load, 0 GB/s by construction
            continue
        lo, hi, cover = median_ci(p["values"])
        out.append({"name": p["name"], "unit": str(first["unit"]), "value": statistics.median(p["values"]),
                    "range": f"{lo:.6g} to {hi:.6g} ({cover:.0%} interval)" if math.isfinite(lo) else "",
                    "extra": f"{len(p['values'])} repetitions; case {first['case_id']}; run {first['run_id']}"
                             + ("" if run.meta.get("status") == "complete" else f" ({run.meta.get('status')})")})
    if left:
        print(f"cxlbench: note: {len(left)} point(s) left out, a higher-is-better figure of 0 or less is no "
              "rate to track: " + "; ".join(left[:3]) + (" ..." if len(left) > 3 else ""), file=sys.stderr)
    if not out:             # github-action-benchmark fails its step on an empty list ("No benchmark result")
        other = next(t for t in GAB_TOOLS if t != tool)
        if not points:
            raise ResultsError(_nothing(run))
        raise ResultsError(f"{run.meta.get('run_id')} has no {want}-is-better figure: nothing to export as "
                           f"{tool} (its figures go with {other})")
    return out


def _nothing(run: Run) -> str:
    """Why a run has no point to export: how its cases ended, and the commonest reason."""
    cases = [c for c in run.meta.get("cases") or [] if c.get("benchmark") != drift.NAME]
    ended = why_none_measured([(c.get("status"), c.get("reason")) for c in cases])
    return f"{run.meta.get('run_id')} measured no case whole ({ended}): nothing to export"


def format_data(run: Run | str | Path, fmt: str) -> Any:
    """`run` as format `fmt` would hold it (one of FORMATS), before it is written."""
    run = as_run(run)
    return pytest_benchmark_dict(run) if fmt == "pytest-benchmark" else github_action_benchmark_list(run, fmt)


def export_github_action_benchmark(run: Run | str | Path, path: str | Path, tool: str) -> Path:
    """Write the points of `run` whose direction is `tool`'s (customBiggerIsBetter or
    customSmallerIsBetter): one file per tool, as github-action-benchmark reads one
    tool per step."""
    return write(github_action_benchmark_list(as_run(run), tool), path)


def dumps(data: Any) -> str:
    """The JSON both formats are written as (NaN refused: neither reader takes it)."""
    return json.dumps(data, indent=1, allow_nan=False, default=str)


def write(data: Any, path: str | Path) -> Path:
    """`data` as JSON at `path`, whole or not at all (atomic), its folders made."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, dumps(data).encode())
    return out


FORMATS = ("pytest-benchmark", *GAB_TOOLS)

__all__ = ["export_pytest_benchmark", "pytest_benchmark_dict", "export_github_action_benchmark",
           "github_action_benchmark_list", "points_of", "format_data", "dumps", "write", "FORMATS", "GAB_TOOLS"]
