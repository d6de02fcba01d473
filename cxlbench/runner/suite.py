"""Suites are data: suites/<name>.toml says which families, tiers, sweeps and budget."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"

DEFAULTS = {
    "repetitions": 5,        # independent trials per case (fresh buffer each)
    "processes": 1,          # workers the repetitions are spread over, in passes
    "warmup": 1,
    "time_budget_s": 0,      # 0: no budget
    "case_timeout_s": 600,
    "min_sample_s": 0.2,     # each timed native run lasts at least this long
}


class SuiteError(Exception):
    """A suite that cannot be used; the message says what to do."""


def available() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def load_suite(name_or_path: str) -> dict[str, Any]:
    """A suite by name (suites/<name>.toml) or by path to a TOML file."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = SUITES_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise SuiteError(f"unknown suite {name_or_path!r}; available: {', '.join(available())} "
                         f"(or pass a path to a .toml file)")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SuiteError(f"{path}: not valid TOML ({e})") from None
    benchmarks = data.get("benchmark")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise SuiteError(f"{path}: a suite needs at least one [[benchmark]] table")
    for i, b in enumerate(benchmarks):
        if "name" not in b:
            raise SuiteError(f"{path}: [[benchmark]] number {i + 1} has no name")
    suite = {**DEFAULTS, **data, "name": data.get("name", path.stem), "path": str(path)}
    return suite


def with_find_max(suite: dict[str, Any]) -> dict[str, Any]:
    """`run --find-max`: each training benchmark that trains becomes one that looks for
    the largest model config that fits each placement: every config, smallest first,
    two steps each (a suite with mode = "find_max" chooses its own)."""
    found, benchmarks = False, []
    for b in suite["benchmark"]:
        if b.get("name") == "training" and b.get("mode", "train") == "train":
            b = {k: v for k, v in b.items() if k not in ("config", "steps", "warmup_steps")}
            b["mode"], found = "find_max", True
        benchmarks.append(b)
    if not found:
        raise SuiteError(f"--find-max: suite {suite['name']!r} has no training benchmark that "
                         f"trains (try --suite training)")
    return {**suite, "benchmark": benchmarks}


def benchmark_specs(suite: dict[str, Any]) -> list[dict[str, Any]]:
    """Each [[benchmark]] table with the suite-level defaults it did not override."""
    shared = {k: suite[k] for k in DEFAULTS}
    return [{**shared, **b} for b in suite["benchmark"]]
