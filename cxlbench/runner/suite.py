"""Suites are data: suites/<name>.toml says which families, tiers, sweeps and budget."""
from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from types import ModuleType

from cxlbench import tomlfile
from cxlbench.benchmarks import UnknownBenchmark, family
from cxlbench.benchmarks.spec import SUITE_ONLY, Spec, SpecError, coerce, parse
SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"

#: What a suite's top level may set for all its tables (spec.Spec's common keys),
#: with their defaults.
DEFAULTS = {k: v for k, v in Spec(name="").settings().items() if k not in ("name", "tiers", "initiators")}


class SuiteError(Exception):
    """A suite that cannot be used; the message says what to do."""


def available() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def load_suite(name_or_path: str) -> dict[str, Any]:
    """A suite by name (suites/<name>.toml) or by path to a TOML file, checked whole:
    its top-level keys and every table's against what they may be (benchmarks.spec),
    so whoever loads it — run, ab, fleet run, fleet manifests — refuses a bad value
    in one line before anything is planned, submitted or measured."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = SUITES_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise SuiteError(f"unknown suite {name_or_path!r}; available: {', '.join(available())} "
                         f"(or pass a path to a .toml file)")
    data = read_toml(path)
    benchmarks = data.get("benchmark")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise SuiteError(f"{path}: a suite needs at least one [[benchmark]] table")
    for i, b in enumerate(benchmarks):
        if not isinstance(b, dict):
            raise SuiteError(f"{path}: benchmark number {i + 1} is not a table; write [[benchmark]]")
        if not isinstance(b.get("name"), str):
            raise SuiteError(f"{path}: [[benchmark]] number {i + 1} has no name")
    _check_top_level(data, path)
    suite = {**DEFAULTS, **data, "name": data.get("name", path.stem), "path": str(path)}
    families(suite)                  # every table against its family's Spec: the suite is checked whole
    return suite


def _check_top_level(data: dict[str, Any], path: Path) -> None:
    """The suite's own keys: its name, a description, and the settings every table shares,
    each checked against what spec.Spec allows (a value, not just its type)."""
    hints = typing.get_type_hints(Spec, include_extras=True)
    check_known(data, {*DEFAULTS, *SUITE_ONLY}, str(path), "top-level key")
    for key, value in data.items():
        if key in ("name", "description") and not isinstance(value, str):
            raise SuiteError(f"{path}, top level: {key} = {value!r}: expected a string")
        if key in SUITE_ONLY:
            continue
        try:
            coerce(value, hints[key])
        except (TypeError, ValueError) as e:
            raise SuiteError(f"{path}, top level: {key} = {value!r}: {e}") from None


def check_known(table: dict[str, Any], known: set[str], where: str, what: str = "key") -> None:
    """A SuiteError naming the first key of `table` not in `known`, and the known ones."""
    unknown = sorted(set(table) - known)
    if unknown:
        raise SuiteError(f"{where}: unknown {what} {unknown[0]!r}; known: {', '.join(sorted(known))}")


def read_toml(path: Path) -> dict[str, Any]:
    """A suite's or an A/B session's file, or a SuiteError in one line."""
    try:
        return tomlfile.read(path)
    except tomlfile.TomlFileError as e:
        raise SuiteError(str(e)) from None


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


def benchmark_tables(suite: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each [[benchmark]] table with the suite-level settings it did not override,
    and where it is (for messages): "suites/quick.toml, [[benchmark]] 2 (bandwidth)"."""
    shared = {k: suite[k] for k in DEFAULTS}
    return [(f"{suite['path']}, [[benchmark]] {i + 1} ({b['name']})", {**shared, **b})
            for i, b in enumerate(suite["benchmark"])]


def families(suite: dict[str, Any]) -> list[tuple[str, ModuleType, Spec]]:
    """Each table's family (how it was named, the module) and its settings, checked
    against the family's Spec: an unknown family or key, a wrong type or unit is a
    SuiteError naming the suite file, the table and the key."""
    out = []
    for where, table in benchmark_tables(suite):
        try:
            module = family(table["name"])
            out.append((table["name"], module, parse(module.Spec, table, where)))
        except UnknownBenchmark as e:
            raise SuiteError(f"{where}: {e}") from None
        except SpecError as e:
            raise SuiteError(str(e)) from None
    return out
