"""Builds the C core (cxlbench._native) with the package; everything else is in pyproject.toml."""
from glob import glob

from setuptools import Extension, setup

native = Extension(
    "cxlbench._native",
    sources=sorted(glob("cxlbench/_native/*.c")),
    include_dirs=["cxlbench/_native"],
    # -O2 without -ffast-math: the timed loops must do exactly the loads and stores written.
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread",
                        "-fopenmp"],
    # OpenMP for the AdamW kernel only, so that it shares torch's worker threads.
    extra_link_args=["-pthread", "-fopenmp"],
)

setup(ext_modules=[native])
