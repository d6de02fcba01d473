# The two commands: `make bench` (measure this machine) and `make test`.
# Each sets itself up on a fresh machine: a virtual environment in .venv,
# the package installed editable with its C core built.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch's CPU build: PyPI's Linux wheel of the same version is the CUDA one, which
# brings a few GB of NVIDIA libraries a CPU machine never loads. The CPU index's
# wheel (2.13.0+cpu) outranks PyPI's 2.13.0, so pip takes it where the index is
# reachable, and PyPI's where it is not. On a GPU machine: make TORCH_SPEC=torch TORCH_INDEX=
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
SUITE  ?= quick
ARGS   ?=

.PHONY: bench test setup clean

# What the setup needs and lacks, in words (nothing when all is there): the
# compiler setuptools will call ($CC, else the one Python was built with, as
# sysconfig names it), Python's headers, and a venv that can install pip (Debian
# ships ensurepip apart). Without this, pip fails a minute in, the cause buried in
# its output.
MISSING_FOR_SETUP = import os, shutil, sysconfig, importlib.util; \
	cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]; \
	h = os.path.join(sysconfig.get_path("include"), "Python.h"); \
	print(f"no C compiler ({cc} is not on PATH)" if not shutil.which(cc) else \
	      f"no Python headers ({h} is missing)" if not os.path.exists(h) else \
	      "no venv module with pip (ensurepip is missing)" if not importlib.util.find_spec("ensurepip") else "")

# Whether an index answers (pip retries an unreachable one five times per package)
REACHABLE = import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)

$(VENV)/.installed: pyproject.toml setup.py $(wildcard cxlbench/_native/*.c cxlbench/_native/*.h)
	@missing=$$($(PYTHON) -c '$(MISSING_FOR_SETUP)') || exit 1; [ -z "$$missing" ] || { \
	  echo "make setup cannot start: $$missing. Debian/Ubuntu: apt-get install" \
	       "gcc python3-dev python3-venv; Fedora: dnf install gcc python3-devel; or name a compiler you have:" \
	       "make setup CC=clang" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	@index=""; if [ -n "$(TORCH_INDEX)" ]; then \
	  if $(PY) -c '$(REACHABLE)' "$(TORCH_INDEX)/torch/" 2>/dev/null; then index="--extra-index-url $(TORCH_INDEX)"; \
	  else echo "make setup: $(TORCH_INDEX) cannot be reached: torch from pip's configured indexes" \
	            "(PyPI's Linux wheel is the CUDA build)" >&2; fi; fi; \
	echo "$(PY) -m pip install --quiet $$index \"$(TORCH_SPEC)\""; \
	$(PY) -m pip install --quiet $$index "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

setup: $(VENV)/.installed

bench: setup
	$(VENV)/bin/cxlbench run --suite $(SUITE) $(ARGS)

test: setup
	$(PY) -m pytest -q $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info cxlbench/*.so

# The QEMU test bed (a real NUMA + CXL guest): `make testbed`, `make test-testbed`.
-include testbed/testbed.mk
