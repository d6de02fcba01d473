#!/usr/bin/env bash
# The write, copy and triad kernels (regular and non-temporal stores, 1 and 2
# threads) against likwid-bench's, interleaved kernel by kernel on the same machine.
#   scripts/validate_kernels.sh [OUT] [ROUNDS]
# Needs: likwid (Debian), and `make setup` done. Prints the table
# docs/validation.md holds.
#
# Why kernel by kernel: a shared VM's bandwidth drifts 10-30% over minutes, and a
# round that ran all of ours and then all of likwid-bench's put two minutes between
# the two figures of a row (on the AMD VM that read copy nt at 1.30x one morning and
# 1.09x interleaved the same day). Now each kernel's cxlbench process and its
# likwid-bench runs follow each other within seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-validation-kernels-out}; ROUNDS=${2:-4}
mkdir -p "$OUT/suites"
# ours -> likwid-bench's kernel with the same loads, stores and byte count:
# write = store (8 B), copy = copy (16 B), triad = stream (a = b*s + c, 24 B);
# the _mem variants use non-temporal stores. `stream` (likwid's scalar triad) is a
# second reference for triad: its AVX kernels read below it on both our CPUs.
# The write-penalty family's line loop: read = load (8 B), rmw = update (16 B).
declare -A LIKWID=([write]="store_avx" [copy]="copy_avx" [triad]="stream_avx stream"
                   [write-nt]=store_mem_avx [copy-nt]=copy_mem_avx [triad-nt]=stream_mem_avx)
LINES="load_avx store_avx store_mem_avx update_avx"

# One suite per kernel: the validation-kernels suite's settings, one kernel.
suite() {  # NAME BENCHMARK-TABLE-BODY
  sed -n '/^\[\[benchmark\]\]/q;p' suites/validation-kernels.toml | sed "s/^name = .*/name = \"vk-$1\"/" \
    > "$OUT/suites/$1.toml"
  printf '[[benchmark]]\n%s\n' "$2" >> "$OUT/suites/$1.toml"
}
for k in write copy triad; do
  suite "$k" "name = \"bandwidth\"
tiers = [\"ddr\"]
kernel = [\"$k\"]
nt = [false, true]
threads = [1, 2]
page = [\"4k\"]
array_bytes = \"512MiB\"
iterations = 10"
done
suite lines "$(sed -n '/name = "write_penalty"/,$p' suites/validation-kernels.toml)"

likwid() {  # GROUP KERNEL THREADS: one run, appended to likwid-GROUP-KERNEL-TTHREADS.txt
  echo "round $r: likwid-bench $2, $3 thread(s)"
  likwid-bench -t "$2" -w S0:1GB:$3 2>&1 | awk '/MByte\/s/ {print $2}' >> "$OUT/likwid-$1-$2-T$3.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  for k in write copy triad lines; do
    echo "round $r: cxlbench $k"
    .venv/bin/cxlbench run --suite "$OUT/suites/$k.toml" --out "$OUT/results" --label "round$r-$k" \
      --no-report > "$OUT/cxlbench-$r-$k.txt" 2>&1
    if [ "$k" = lines ]; then tools=$LINES; else tools="${LIKWID[$k]} ${LIKWID[$k-nt]}"; fi
    for tool in $tools; do for t in 1 2; do likwid "$k" "$tool" $t; done; done
  done
done
.venv/bin/python scripts/validation_table.py --kernels "$OUT"
