#!/usr/bin/env bash
# The GPU device check (issue 7): on a machine with a GPU, torch and cupy, and
# nothing else but this repository (it never downloads).
#
#   scripts/device-check.sh OUT [NVME_DIR]
#
#   1. makes cxlbench importable: as installed, else `pip install --no-deps -e .`
#      without build isolation, else from the source tree (PYTHONPATH) with the
#      C core built in place
#   2. the GPU tests (tests/test_gpu_device.py): kernels compile, mapped host
#      memory, the spin kernel, one small case of every family     (~1 min)
#   3. the GPU suite (suites/gpu.toml) within a time budget, its run and HTML
#      report into OUT                                             (~5 min)
#   4. the training check (tiny and 1b configs, optimizer on DDR and HBM)
#                                                                  (<= 100 s)
#   5. the table last: ours vs torch on the same buffers, the published
#      figures, the Hopper latencies, crossovers, write penalty    (OUT/table.md)
#
# Under 8 minutes on one H200. BUDGET=seconds shortens the suite (a rerun);
# PYTHON=path picks the interpreter. Exit status: the suite's (0 ok, 1 a case
# failed, 2 no GPU case ran).
set -uo pipefail
OUT=${1:?usage: scripts/device-check.sh OUT_DIR [NVME_DIR]}
NVME=${2:-}
BUDGET=${BUDGET:-270}
cd "$(dirname "$0")/.."
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
T0=$(date +%s)
say() { printf '[device-check %4ds] %s\n' $(( $(date +%s) - T0 )) "$*"; }

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch, cupy' 2>/dev/null; then PY=.venv/bin/python
  else PY=$(command -v python3 || command -v python); fi
fi
say "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"

# --- 1. the package --------------------------------------------------------------
if ! "$PY" -c 'import cxlbench.gpu, cxlbench._native' 2>/dev/null; then
  if "$PY" -m pip install --no-build-isolation --no-deps -q -e . > "$OUT/install.log" 2>&1 \
      && "$PY" -c 'import cxlbench.gpu, cxlbench._native' 2>/dev/null; then
    say "installed cxlbench (editable, no dependencies fetched)"
  else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
      say "cxlbench from the source tree, C core built in place"
    else
      say "WARNING: the C core did not build (see $OUT/build.log): host-tier cases will be skipped"
    fi
  fi
fi
"$PY" - <<'EOF' 2>&1 | tee "$OUT/environment.txt"
import importlib, shutil, subprocess
for name in ("cxlbench", "numpy", "pandas", "pyarrow", "torch", "cupy", "pynvml", "kvikio"):
    try:
        m = importlib.import_module(name)
        print(f"{name:9} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"{name:9} missing ({type(e).__name__})")
try:
    import cupy
    rt = cupy.cuda.runtime
    print("CUDA runtime", rt.runtimeGetVersion(), "driver", rt.driverGetVersion(), "devices", rt.getDeviceCount())
except Exception as e:
    print("CUDA: not usable:", e)
if shutil.which("nvidia-smi"):
    print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip())
from cxlbench.runner.run import build_env
env = build_env("/", [])
print("tiers:", ", ".join(f"{t.name} ({t.kind})" for t in env.tiers.values()) or "none")
print("GPUs:", "; ".join(f"gpu:{g.index} {g.name} node {g.numa_node}" for g in env.machine.gpus) or "none")
EOF

# --- 2. the GPU tests --------------------------------------------------------------
say "GPU tests (tests/test_gpu_device.py)"
timeout 180 "$PY" -m pytest -q -m gpu -p no:cacheprovider -o addopts="" tests/test_gpu_device.py \
  > "$OUT/pytest-gpu.txt" 2>&1
say "GPU tests: exit $? — $(tail -n 1 "$OUT/pytest-gpu.txt")"

# --- 3. the GPU suite ---------------------------------------------------------------
say "GPU suite (budget ${BUDGET}s)"
timeout $(( BUDGET + 150 )) "$PY" -m cxlbench.gpu.devicecheck "$OUT" --budget "$BUDGET" \
  ${NVME:+--nvme "$NVME"} > "$OUT/suite.txt" 2>&1
RC=$?
say "GPU suite: exit $RC ($(grep -c '' "$OUT/suite.txt") lines in suite.txt)"

# --- 4. the training check ------------------------------------------------------------
say "training check"
timeout 100 "$PY" -m cxlbench.training.check --configs tiny,1b --optimizer-on ddr,hbm \
  ${NVME:+--nvme "$NVME"} --steps 10 --warmup 2 > "$OUT/training.md" 2>&1
say "training check: exit $? (OUT/training.md)"
grep '^|' "$OUT/training.md" | head -20

# --- 5. the table, last -----------------------------------------------------------------
echo
if [ -s "$OUT/run_path" ]; then
  "$PY" -m cxlbench.gpu.devicecheck --table "$(cat "$OUT/run_path")" | tee "$OUT/table.md"
else
  echo "no run was written; the suite's output ends:"; tail -n 30 "$OUT/suite.txt"
fi
say "done: run, report.html and table.md in $OUT"
exit $RC
