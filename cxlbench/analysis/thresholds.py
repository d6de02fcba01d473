"""Per-benchmark thresholds for the gate and comparisons, from a checked-in TOML file.

    default = 0.05              # or "5%"
    [benchmarks]
    latency = 0.10              # every metric of the latency benchmark
    [benchmarks.training]       # or a table: per metric, with its own default
    default = 0.05
    tokens_per_s = 0.03

The most specific entry wins: benchmark+metric, then benchmark, then the
default: a threshold given explicitly (--threshold), else the file's `default`,
else 5%.

An optional [noise] table holds each benchmark's run-to-run noise (σ of log
values between runs, which repetitions inside one run cannot see), as
`cxlbench calibrate` measures it; the gate widens its intervals by it:

    [noise]
    latency = 0.12
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cxlbench import tomlfile, units

DEFAULT_THRESHOLD = 0.05
#: The project's checked-in example, calibrated on our 2-core VMs (see docs/gating.md).
EXAMPLE_FILE = Path(__file__).with_name("thresholds.toml")


class ThresholdError(ValueError):
    """A thresholds file that cannot be used; the message says where."""


def parse_fraction(value: Any, where: str = "threshold") -> float:
    """0.05, "5%", "0.05" → 0.05 (units.parse_fraction), a ThresholdError otherwise."""
    try:
        return units.parse_fraction(value, where)
    except ValueError as e:
        raise ThresholdError(str(e)) from None


@dataclass
class Thresholds:
    default: float = DEFAULT_THRESHOLD
    benchmarks: dict[str, float] = field(default_factory=dict)
    metrics: dict[tuple[str, str], float] = field(default_factory=dict)
    source: str = "default"
    noise: dict[str, float] = field(default_factory=dict)     # benchmark → run-to-run σ
    noise_source: str = ""                                     # where noise came from, if not the file

    def for_case(self, benchmark: str, metric: str) -> float:
        return self.metrics.get((benchmark, metric), self.benchmarks.get(benchmark, self.default))

    def noise_for(self, benchmark: str) -> float:
        return self.noise.get(benchmark, self.noise.get("default", 0.0))

    def describe(self) -> str:
        parts = [f"{self.default:.1%} default"]
        parts += [f"{b} {v:.1%}" for b, v in sorted(self.benchmarks.items())]
        parts += [f"{b}.{m} {v:.1%}" for (b, m), v in sorted(self.metrics.items())]
        if self.noise:
            parts.append("run-to-run noise " + ", ".join(f"{b} {v:.1%}" for b, v in sorted(self.noise.items()))
                         + (f" ({self.noise_source})" if self.noise_source else ""))
        return ", ".join(parts) + (f" (from {self.source})" if self.source != "default" else "")


def check_names(th: Thresholds, present: dict[str, set[str]]) -> None:
    """Refuse names a thresholds file gives that match nothing: a benchmark that is no
    family and none of the runs', a metric the runs hold no such benchmark's samples of.
    A misspelt name would leave its cases at the default without a word. `present`:
    each benchmark in the runs compared, with its metrics."""
    from cxlbench.benchmarks import FAMILIES
    known = set(FAMILIES) | set(present)
    for name in [*th.benchmarks, *(b for b, _ in th.metrics), *th.noise]:
        if name != "default" and name not in known:
            raise ThresholdError(f"{th.source}: no benchmark is named {name!r} (the families: "
                                 f"{', '.join(sorted(FAMILIES))})")
    for bench, metric in th.metrics:
        if bench in present and metric not in present[bench]:
            raise ThresholdError(f"{th.source}: benchmarks.{bench}.{metric}: these runs' {bench} has no metric "
                                 f"{metric!r} (it has {', '.join(sorted(present[bench]))})")


def load_thresholds(path: str | Path | None = None, threshold: float | str | None = None) -> Thresholds:
    """Thresholds from a file (or none); an explicit `threshold` sets the default
    (over the file's); per-benchmark entries of the file still apply."""
    explicit = parse_fraction(threshold, "--threshold") if threshold is not None else None
    base = explicit if explicit is not None else DEFAULT_THRESHOLD
    if path is None:
        return Thresholds(default=base)
    p = Path(path)
    try:
        data = tomlfile.read(p)
    except tomlfile.TomlFileError as e:
        raise ThresholdError(f"thresholds file {e}") from None
    t = Thresholds(default=base, source=str(p))
    if "default" in data:
        file_default = parse_fraction(data["default"], f"{p}: default")
        t.default = explicit if explicit is not None else file_default
    for table in ("benchmarks", "noise"):
        if not isinstance(data.get(table, {}), dict):
            raise ThresholdError(f"{p}: {table} must be a table ([{table}]), not {data[table]!r}")
    for bench, value in (data.get("benchmarks") or {}).items():
        if isinstance(value, dict):
            for metric, v in value.items():
                if metric == "default":
                    t.benchmarks[bench] = parse_fraction(v, f"{p}: benchmarks.{bench}.default")
                else:
                    t.metrics[(bench, metric)] = parse_fraction(v, f"{p}: benchmarks.{bench}.{metric}")
        else:
            t.benchmarks[bench] = parse_fraction(value, f"{p}: benchmarks.{bench}")
    for bench, value in (data.get("noise") or {}).items():
        try:
            if isinstance(value, bool):           # float(true) is 1.0: a noise of 100%
                raise TypeError
            v = float(value[:-1]) / 100 if isinstance(value, str) and value.strip().endswith("%") \
                else float(value)
        except (TypeError, ValueError):
            v = -1.0
        if not 0 <= v < 5:
            raise ThresholdError(f"{p}: noise.{bench}: {value!r} is not a run-to-run noise (write 0.12 or \"12%\")")
        t.noise[bench] = v
    unknown = set(data) - {"default", "benchmarks", "noise"}
    if unknown:
        raise ThresholdError(f"thresholds file {p}: unknown keys {', '.join(sorted(unknown))} "
                             f"(expected default, [benchmarks] and [noise])")
    return t


def to_toml(t: Thresholds, comment: str = "") -> str:
    lines = [f"# {line}" for line in comment.splitlines()] if comment else []
    lines.append(f"default = {t.default:.3g}")
    lines.append("")
    lines.append("[benchmarks]")
    for b, v in sorted(t.benchmarks.items()):
        lines.append(f"{_key(b)} = {v:.3g}")
    by_bench: dict[str, dict[str, float]] = {}
    for (b, m), v in t.metrics.items():
        by_bench.setdefault(b, {})[m] = v
    for b, ms in sorted(by_bench.items()):
        lines += ["", f"[benchmarks.{_key(b)}]"] + [f"{_key(m)} = {v:.3g}" for m, v in sorted(ms.items())]
    if t.noise:
        lines += ["", "[noise]"] + [f"{_key(b)} = {v:.3g}" for b, v in sorted(t.noise.items())]
    return "\n".join(lines) + "\n"


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else '"' + k.replace('"', '\\"') + '"'


#: Run-to-run noise assumed on a virtual machine when nothing measured it: whole
#: runs of our 2-core KVM guests moved 5-15% against each other (docs/gating.md),
#: beyond what the repetitions inside one run can show.
VM_RUN_NOISE = 0.05


def assume_vm_noise(th: Thresholds, hypervisors: list[str]) -> Thresholds:
    """On a VM, with no run-to-run noise given (a thresholds file's [noise], from
    `cxlbench calibrate`), widen every interval by VM_RUN_NOISE and say so: a host
    shared with other tenants moves whole runs, and one run cannot show by how much."""
    if th.noise or not hypervisors:
        return th
    named = sorted(set(hypervisors) - {"unknown"})
    vm = f"a virtual machine ({', '.join(named)})" if named else "a virtual machine"
    return replace(th, noise={"default": VM_RUN_NOISE},
                   noise_source=f"assumed: {vm}; measure it with cxlbench calibrate")
