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
    # host suites
    "loaded_latency": "cxlbench.benchmarks.loaded_latency",
    "write_penalty": "cxlbench.benchmarks.write_penalty",
    "page_size": "cxlbench.benchmarks.page_size",
    "zerocopy": "cxlbench.benchmarks.zerocopy",
    "interleave": "cxlbench.benchmarks.interleave",
    "stride": "cxlbench.benchmarks.stride",
    "sentinel": "cxlbench.benchmarks.sentinel",      # the run's drift reference (runner.sentinels)
    # GPU suites
    "gpu_latency": "cxlbench.benchmarks.gpu_latency",
    "gpu_bandwidth": "cxlbench.benchmarks.gpu_bandwidth",
    "gpu_write_penalty": "cxlbench.benchmarks.gpu_write_penalty",
    "gpu_zerocopy": "cxlbench.benchmarks.gpu_zerocopy",
    "gpu_storage": "cxlbench.benchmarks.gpu_storage",
}


#: what the runner takes from a family module
CONTRACT = ("NAME", "Spec", "plan", "measure")


def family(name: str) -> ModuleType:
    """A family by its short name, or any importable module by dotted path (a plugin).
    The runner hands workers the same reference, so a plugin's NAME need not be
    its path; a registered family's NAME must be its key (its cases are found by it)."""
    if name in FAMILIES:
        module = importlib.import_module(FAMILIES[name])
        if getattr(module, "NAME", None) != name:
            raise UnknownBenchmark(f"{FAMILIES[name]} declares NAME = {getattr(module, 'NAME', None)!r} "
                                   f"but is registered as {name!r}")
        return module
    if "." in name:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise UnknownBenchmark(f"benchmark {name!r} cannot be imported: {e}") from None
        lacking = [part for part in CONTRACT if not hasattr(module, part)]
        if lacking:
            raise UnknownBenchmark(f"{name!r} imports but is no benchmark family: it has no {', '.join(lacking)} "
                                   "(a family module defines NAME, Spec, plan and measure)")
        return module
    raise UnknownBenchmark(f"unknown benchmark {name!r}; known: {', '.join(sorted(FAMILIES))}")


class UnknownBenchmark(LookupError):
    pass
