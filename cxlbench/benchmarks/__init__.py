"""Benchmark families, imported by name only when a suite asks for them
(GPU families import torch/cupy; a CPU-only machine never pays for that)."""
from __future__ import annotations

import importlib
from types import ModuleType

FAMILIES = {
    "latency": "cxlbench.benchmarks.latency",
    "bandwidth": "cxlbench.benchmarks.bandwidth",
    "training": "cxlbench.benchmarks.training",
    "storage": "cxlbench.benchmarks.storage",
    # host suites (issue 3)
    "loaded_latency": "cxlbench.benchmarks.loaded_latency",
    "write_penalty": "cxlbench.benchmarks.write_penalty",
    "page_size": "cxlbench.benchmarks.page_size",
    "zerocopy": "cxlbench.benchmarks.zerocopy",
    "interleave": "cxlbench.benchmarks.interleave",
    "gpu_latency": "cxlbench.benchmarks.gpu_latency",              # GPU suites (issue 7)
    "gpu_bandwidth": "cxlbench.benchmarks.gpu_bandwidth",
    "gpu_write_penalty": "cxlbench.benchmarks.gpu_write_penalty",
    "gpu_zerocopy": "cxlbench.benchmarks.gpu_zerocopy",
    "gpu_storage": "cxlbench.benchmarks.gpu_storage",
}


def family(name: str) -> ModuleType:
    """A family by its short name, or any importable module by dotted path (a plugin)."""
    if name in FAMILIES:
        return importlib.import_module(FAMILIES[name])
    if "." in name:
        return importlib.import_module(name)
    raise UnknownBenchmark(f"unknown benchmark {name!r}; known: {', '.join(sorted(FAMILIES))}")


class UnknownBenchmark(LookupError):
    pass
