"""Benchmark families, imported by name only when a suite asks for them
(GPU families import torch/cupy; a CPU-only machine never pays for that)."""
from __future__ import annotations

import importlib
from types import ModuleType

FAMILIES = {
    "latency": "cxlbench.benchmarks.latency",
    "bandwidth": "cxlbench.benchmarks.bandwidth",
}


def family(name: str) -> ModuleType:
    try:
        return importlib.import_module(FAMILIES[name])
    except KeyError:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(sorted(FAMILIES))}") from None
