#!/usr/bin/env bash
# Interleaved runs of cxlbench's validation suite and the reference tools on the
# same machine, back to back, so drift hits both alike. Figures go to OUT/*.txt;
# docs/validation.md holds the table made from them.
#   scripts/validate.sh [OUT] [ROUNDS]
# Needs: lmbench (Debian non-free), likwid, and `make setup` done.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-validation-out}; ROUNDS=${2:-5}
LMB=/usr/lib/lmbench/bin/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
mkdir -p "$OUT"
# lmbench's calibration misbehaves in VMs; a fixed ENOUGH (µs per timing) steadies it.
export ENOUGH=100000
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: cxlbench"
  .venv/bin/cxlbench run --suite validation --out "$OUT/results" --label "round$r" > "$OUT/cxlbench-$r.txt" 2>&1
  echo "round $r: lat_mem_rd -t (random chain, up to 1024 MB)"
  # -N 1: lmbench keeps the minimum of its repetitions; one repetition per round
  # makes its figure a sample like ours, and the rounds give its spread.
  "$LMB/lat_mem_rd" -t -N 1 1024 64 2> "$OUT/lat_mem_rd-$r.txt"
  echo "round $r: bw_mem rd 512m, 1 and 2 processes"
  for p in 1 2; do "$LMB/bw_mem" -P $p -N 1 512m rd 2>> "$OUT/bw_mem-P$p.txt"; done
  echo "round $r: likwid-bench load_avx 1 GB, 1 and 2 threads"
  for t in 1 2; do
    likwid-bench -t load_avx -w S0:1GB:$t 2>&1 | awk '/MByte\/s/ {print $2}' >> "$OUT/likwid-load-T$t.txt"
  done
done

.venv/bin/python scripts/validation_table.py "$OUT"
