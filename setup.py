"""Builds the C core (cxlbench._native) with the package; everything else is in pyproject.toml."""
import os
import tempfile
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """OpenMP (for the AdamW kernel, so that it shares torch's worker threads) where
    the compiler has it; without, the kernel runs on one thread and says nothing."""

    def build_extensions(self):
        if not self._has_openmp():
            for ext in self.extensions:
                ext.extra_compile_args.remove("-fopenmp")
                ext.extra_link_args.remove("-fopenmp")
        super().build_extensions()

    def _has_openmp(self) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "omp.c")
            with open(src, "w") as f:
                f.write("#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n")
            try:
                objs = self.compiler.compile([src], output_dir=tmp, extra_postargs=["-fopenmp"])
                self.compiler.link_executable(objs, os.path.join(tmp, "omp"),
                                              extra_postargs=["-fopenmp"])
            except Exception:
                return False
        return True


native = Extension(
    "cxlbench._native",
    sources=sorted(glob("cxlbench/_native/*.c")),
    include_dirs=["cxlbench/_native"],
    # -O2 without -ffast-math: the timed loops must do exactly the loads and stores written.
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread",
                        "-fopenmp"],
    extra_link_args=["-pthread", "-fopenmp"],
)

setup(ext_modules=[native], cmdclass={"build_ext": BuildExt})
