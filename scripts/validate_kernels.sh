#!/usr/bin/env bash
# The write, copy and triad kernels (regular and non-temporal stores, 1 and 2
# threads) against likwid-bench's, in interleaved rounds on the same machine.
#   scripts/validate_kernels.sh [OUT] [ROUNDS]
# Needs: likwid (Debian), and `make setup` done. Prints the table
# docs/validation.md holds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-validation-kernels-out}; ROUNDS=${2:-4}
mkdir -p "$OUT"
# ours -> likwid-bench's kernel with the same loads, stores and byte count:
# write = store (8 B), copy = copy (16 B), triad = stream (a = b*s + c, 24 B);
# the _mem variants use non-temporal stores.
# The write-penalty family's line loop: read = load (8 B), rmw = update (16 B).
declare -A LIKWID=([write]=store_avx [copy]=copy_avx [triad]=stream_avx
                   [write-nt]=store_mem_avx [copy-nt]=copy_mem_avx [triad-nt]=stream_mem_avx
                   [read]=load_avx [rmw]=update_avx)
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: cxlbench run --suite validation-kernels"
  .venv/bin/cxlbench run --suite validation-kernels --out "$OUT/results" --label "round$r" \
    --no-report > "$OUT/cxlbench-$r.txt" 2>&1
  for k in "${!LIKWID[@]}"; do
    for t in 1 2; do
      echo "round $r: likwid-bench ${LIKWID[$k]}, $t thread(s)"
      likwid-bench -t "${LIKWID[$k]}" -w S0:1GB:$t 2>&1 | awk '/MByte\/s/ {print $2}' \
        >> "$OUT/likwid-$k-T$t.txt"
    done
  done
done
.venv/bin/python scripts/validation_table.py --kernels "$OUT"
