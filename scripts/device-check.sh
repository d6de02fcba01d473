#!/usr/bin/env bash
# The GPU device check: on a machine with a GPU, torch and cupy, and
# nothing else but this repository (it never downloads).
#
#   scripts/device-check.sh OUT [NVME_DIR]
#
#   1. picks the Python that has torch and cupy (PYTHON=path overrides) and
#      makes cxlbench importable there: as installed, else `pip install
#      --no-deps -e .` without build isolation, else from the source tree
#      (PYTHONPATH) with the C core compiled in place (setup.py, or the C
#      compiler directly when this setuptools cannot read pyproject.toml)
#   2. the training what-if, first because it is what cxlbench is for
#      (suites/training-gpu.toml: 1b all on HBM, optimizer state on DDR with
#      and without DPU, FSDP2's CPU offload; each step beside the step-time
#      model), a run of its own                          (<= 330 s, OUT/training.txt)
#   3. the GPU suite (suites/gpu.toml) in what time is left, its run and HTML
#      report into OUT
#   4. the GPU tests (tests/test_gpu_device.py): kernels compile, mapped host
#      memory, the spin kernel, one small case of every family     (<= 60 s)
#   5. the table last: ours vs torch on the same buffers, the published
#      figures, the Hopper latencies, crossovers, write penalty    (OUT/table.md)
#   SMOKE=1 stops after step 1 and a two-to-three-minute first look instead (the GPU
#      tests, the training engines' GPU tests among them: the offload engine against
#      the no-offload reference, DPU's staleness; the tiny config on every engine):
#      run it first on a leased machine.
#   PACK=1 then packs OUT's runs into OUT/runs.tgz (a run is three folders down).
#
# Under 9 minutes on one H200: every step has a hard limit, and the suite's
# budget is what is left of DEADLINE (520 s from the start) once the training
# run is done and the tests' slot is set aside. BUDGET=seconds shortens the
# suite further (a rerun). Exit status: the suite's (0 ok, 1 a case failed,
# 2 no GPU case ran).
set -uo pipefail
OUT=${1:?usage: scripts/device-check.sh OUT_DIR [NVME_DIR]}
NVME=${2:-}
BUDGET=${BUDGET:-330}
DEADLINE=${DEADLINE:-520}
TRAIN_S=${TRAIN_S:-330}
TESTS_S=${TESTS_S:-60}                 # 0: the smoke ran them already
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)          # relative to where we were called
if [ -n "$NVME" ]; then NVME=$(cd "$NVME" && pwd) || exit 2; fi
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
T0=$(date +%s)
say() { printf '[device-check %4ds] %s\n' $(( $(date +%s) - T0 )) "$*"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
# The C core is built: cxlbench/_native/ (its C sources) also imports, as an empty
# namespace package, wherever the extension module is missing.
native_ok() { "$PY" -c 'import sys, cxlbench.gpu, cxlbench._native as n
sys.exit(0 if getattr(n, "__file__", None) else 1)' 2>/dev/null; }

# --- 1. the interpreter and the package ----------------------------------------------
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for want in 'import torch, cupy' 'import cupy' 'import torch'; do
    for cand in .venv/bin/python python3 python; do
      c=$(command -v "$cand" 2>/dev/null) || continue
      if "$c" -c "$want" 2>/dev/null; then PY=$c; break 2; fi
    done
  done
  PY=${PY:-$(command -v python3 || command -v python)}
fi
say "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
if ! "$PY" -c 'import cupy' 2>/dev/null; then
  say "WARNING: cupy is not importable in $PY: every GPU case will be skipped (needs cupy-cuda12x or"
  say "         cupy-cuda13x for the driver's CUDA; PYTHON=path picks another interpreter)"
fi

if ! native_ok; then
  if "$PY" -m pip install --no-build-isolation --no-deps -q -e . > "$OUT/install.log" 2>&1 \
      && native_ok; then
    say "installed cxlbench (editable, no dependencies fetched)"
  else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1 && native_ok; then
      say "cxlbench from the source tree, C core built in place"
    else
      # setuptools older than pyproject.toml asks for cannot even read it: compile directly
      EXT=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
      INC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
      CC=${CC:-$(command -v cc || command -v gcc || echo cc)}
      build() { $CC -O2 -std=gnu11 -fPIC -shared -pthread "$@" -Icxlbench/_native -I"$INC" \
                  cxlbench/_native/*.c -o "cxlbench/_native$EXT" >> "$OUT/build.log" 2>&1; }
      # OpenMP where the compiler has it (AdamW on torch's threads), else without
      if { build -fopenmp || build; } && native_ok; then
        say "cxlbench from the source tree, C core compiled in place with $CC"
      else
        say "WARNING: the C core did not build (see $OUT/build.log): host-tier cases will be skipped"
      fi
    fi
  fi
fi
"$PY" - <<'EOF' 2>&1 | tee "$OUT/environment.txt"
import importlib, shutil, subprocess
for name in ("cxlbench", "numpy", "pandas", "pyarrow", "jinja2", "matplotlib", "torch", "cupy",
             "pynvml", "kvikio"):
    try:
        m = importlib.import_module(name)
        print(f"{name:10} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"{name:10} missing ({type(e).__name__}: {e})")
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
{ grep -m1 'model name' /proc/cpuinfo; echo "CPUs: $(nproc)"; ls /sys/devices/system/node 2>&1 | tr '\n' ' '; echo
  grep -e MemTotal -e MemAvailable -e Hugepagesize /proc/meminfo; cat /sys/kernel/mm/transparent_hugepage/enabled
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,ecc.mode.current,clocks.sm,clocks.mem,power.limit --format=csv
} 2>&1 | tee -a "$OUT/environment.txt"

# --- SMOKE=1: a first look in about two minutes, then stop ------------------------------
# Every path that only a GPU takes, small: the GPU tests and the tiny config on each
# engine. On a leased machine, run it first, and the long check only once it is clean.
if [ "${SMOKE:-0}" = 1 ]; then
  say "smoke: GPU tests"
  PER_TEST=$("$PY" -c 'import pytest_timeout' 2>/dev/null && echo --timeout=20)   # a hang costs one test
  timeout -k 5 150 "$PY" -m pytest -v -m gpu -p no:cacheprovider -o addopts="" $PER_TEST \
    tests/test_gpu_device.py tests/test_training_gpu.py > "$OUT/pytest-gpu.txt" 2>&1
  say "smoke: GPU tests exit $?"; tail -n 15 "$OUT/pytest-gpu.txt"
  say "smoke: tiny on the GPU, every engine"
  timeout -k 5 60 "$PY" -m cxlbench.cli.training_check --configs tiny --compute gpu \
    --engines none,offload,fsdp2_cpu_offload --optimizer-on ddr,hbm --steps 3 --warmup 2 2>&1 | tee "$OUT/smoke.md"
  timeout -k 5 40 "$PY" -m cxlbench.cli.devicecheck --dpu --configs tiny --optimizer-on ddr \
    --steps 3 2>&1 | tee -a "$OUT/smoke.md"
  say "smoke: done"
  exit 0
fi

# --- 2. the training what-if ---------------------------------------------------------
say "training what-if (suites/training-gpu.toml, ${TRAIN_S}s)"
timeout -k 5 "$TRAIN_S" "$PY" -m cxlbench.cli.main run --suite suites/training-gpu.toml \
  --label device-check-training --out "$OUT/results" > "$OUT/training.txt" 2>&1
say "training what-if: exit $? (OUT/training.txt)"
TRAIN_RUN=$(ls -1dt "$OUT"/results/*/*/ 2>/dev/null | head -n 1)   # never mistaken for the suite's below
tail -n 25 "$OUT/training.txt"

# --- 3. the GPU suite ---------------------------------------------------------------
SUITE_S=$(( $(left) - TESTS_S - 60 ))   # 60: the last case past the budget, the report
[ "$SUITE_S" -lt "$BUDGET" ] && BUDGET=$SUITE_S
[ "$BUDGET" -lt 30 ] && BUDGET=30
say "GPU suite (budget ${BUDGET}s)"
rm -f "$OUT/run_path"                        # never the table of an earlier run in OUT
timeout -k 5 $(( BUDGET + 50 )) "$PY" -m cxlbench.cli.devicecheck "$OUT" --budget "$BUDGET" \
  ${NVME:+--nvme "$NVME"} > "$OUT/suite.txt" 2>&1
RC=$?
say "GPU suite: exit $RC ($(grep -c '' "$OUT/suite.txt") lines in suite.txt)"

# --- 4. the GPU tests --------------------------------------------------------------
if [ "$TESTS_S" -gt 0 ]; then
T=$(( $(left) - 10 )); [ "$T" -gt "$TESTS_S" ] && T=$TESTS_S; [ "$T" -lt 20 ] && T=20
say "GPU tests (tests/test_gpu_device.py, ${T}s)"
timeout -k 5 "$T" "$PY" -m pytest -q -m gpu -p no:cacheprovider -o addopts="" tests/test_gpu_device.py \
  > "$OUT/pytest-gpu.txt" 2>&1
say "GPU tests: exit $? — $(tail -n 1 "$OUT/pytest-gpu.txt")"
fi

# --- 5. the table, last -----------------------------------------------------------------
echo
RUN=""
if [ -s "$OUT/run_path" ]; then
  RUN=$(cat "$OUT/run_path")
else                                  # the suite was stopped: its run keeps what finished
  RUN=$(ls -1dt "$OUT"/results/*/*/ 2>/dev/null | grep -vxF "$TRAIN_RUN" | head -n 1)  # results/HOST/RUN/
  [ -n "$RUN" ] && echo "the suite did not finish (exit $RC); the table of what its run kept:"
fi
if [ -n "$RUN" ]; then
  "$PY" -m cxlbench.cli.devicecheck --table "$RUN" | tee "$OUT/table.md"
else
  echo "no run was written; the suite's output ends:"; tail -n 30 "$OUT/suite.txt"
fi
case $RC in 0|1|2) ;; *) RC=1 ;; esac   # stopped by its time limit, or crashed: a failure
if [ "${PACK:-0}" = 1 ] && [ -d "$OUT/results" ]; then
  tar czf "$OUT/runs.tgz" -C "$OUT" results && rm -rf "$OUT/results" "$OUT/run_path"
fi
say "done: runs, report.html and table.md in $OUT"
exit $RC
