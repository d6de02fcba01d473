# The two commands: `make bench` (measure this machine) and `make test`.
# Each sets itself up on a fresh machine: a virtual environment in .venv,
# the package installed editable with its C core built.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch that satisfies the dependency range without
# downloading a multi-GB CUDA build. On a GPU machine: make TORCH_SPEC=torch
TORCH_SPEC ?= torch==2.13.0
SUITE  ?= quick
ARGS   ?=

.PHONY: bench test setup clean

$(VENV)/.installed: pyproject.toml setup.py $(wildcard cxlbench/_native/*.c cxlbench/_native/*.h)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
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
