#!/usr/bin/env bash
# Interleaved runs of cxlbench's validation suites and the reference tools on the
# same machine, back to back, so drift hits both alike. Figures go to OUT/*.txt;
# docs/validation.md holds the tables made from them.
#   scripts/validate.sh [OUT] [ROUNDS]
# References: lmbench (lat_mem_rd, bw_mem; Debian non-free), likwid-bench, and
# google/multichase (scripts/validate_multichase.sh: the chase at 16 MiB - 1 GiB,
# 4 KiB and THP pages; MULTICHASE=/path/to/multichase). A tool that is not installed
# is skipped with a line saying so; its rows are left out, never estimated.
# Needs `make setup` done. LOCK=FILE: a shared machine's measurement lock to flock.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-validation-out}; ROUNDS=${2:-5}
CXLBENCH=${CXLBENCH:-.venv/bin/cxlbench}; PYTHON=${PYTHON:-.venv/bin/python}
LMB=/usr/lib/lmbench/bin/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
# LOCK: held for each round's latency pair and for its read sandwich, so no other
# measurement on the lock runs between the tools of a pair.
[ -n "${LOCK:-}" ] && exec 9>>"$LOCK"
lock() { [ -z "${LOCK:-}" ] || flock 9; }
unlock() { [ -z "${LOCK:-}" ] || flock -u 9; }
if [ -n "$(ls -A "$OUT/results" 2>/dev/null)" ]; then
  echo "validate.sh: $OUT/results already holds runs; give a new OUT folder (rounds of two invocations would be paired by their numbers)" >&2
  exit 2
fi
mkdir -p "$OUT"; : > "$OUT/skipped.txt"
skip() { echo "$*" | tee -a "$OUT/skipped.txt"; }
HAVE_LMB=1; [ -x "$LMB/lat_mem_rd" ] || { HAVE_LMB=0
  skip "lmbench: skipped, $LMB/lat_mem_rd not found (Debian's lmbench package, in the non-free component); no lat_mem_rd or bw_mem figures."; }
HAVE_LIKWID=1; command -v likwid-bench > /dev/null || { HAVE_LIKWID=0
  skip "likwid-bench: skipped, not installed (Debian's likwid package); no likwid-bench figures."; }
# The CPUs cxlbench's workers pin to: its latency worker the first CPU of node 0
# (tier ddr0's initiator), its N read threads the node's first N. lmbench is pinned
# to the same: on a VM a peer left to the scheduler moved with the vCPU it landed on.
NODE0=$(cat /sys/devices/system/node/node0/cpulist)
CPU=$(cut -d, -f1 <<< "$NODE0" | cut -d- -f1)
cpus() {   # the first $1 CPUs of node 0, as a taskset list
  $PYTHON -c "from cxlbench.topology.sysfs import parse_cpulist; import sys; print(','.join(map(str, parse_cpulist(sys.argv[1])[:int(sys.argv[2])])))" "$NODE0" "$1"
}
# lmbench's calibration misbehaves in VMs; a fixed ENOUGH (µs per timing) steadies it.
export ENOUGH=100000
# likwid-bench's load_avx, 1 and 2 threads, one line per run: ROUND WHEN MBYTE/S. A run
# that fails writes no line (the table then leaves that round unpaired) and says so.
likwid_reads() {
  local t
  for t in 1 2; do
    { likwid-bench -t load_avx -w S0:1GB:$t 2>&1 || echo "round $1: likwid-bench -w S0:1GB:$t failed (exit $?)" >&2; } |
      awk -v r="$1" -v w="$2" '/MByte\/s/ {print r, w, $2}' >> "$OUT/likwid-load-T$t.txt"
  done
}
for r in $(seq 1 "$ROUNDS"); do
  lock
  echo "round $r: cxlbench latency"
  $CXLBENCH run --suite validation --out "$OUT/results" --label "r$r-latency" > "$OUT/cxlbench-$r.txt" 2>&1 9>&-
  if (( HAVE_LMB )); then
    echo "round $r: lat_mem_rd -t (random chain, up to 1024 MB)"
    # -N 1: lmbench keeps the minimum of its repetitions; one repetition per round
    # makes its figure a sample like ours, and the rounds give its spread.
    taskset -c "$CPU" "$LMB/lat_mem_rd" -t -N 1 1024 64 2> "$OUT/lat_mem_rd-$r.txt" 9>&-
  fi
  unlock; lock
  # This VM's one-thread read moves 15% from one minute to the next: likwid-bench runs
  # just before and just after cxlbench's read, and each round's ratio is against
  # the geometric mean of the two (docs/validation.md, run K).
  if (( HAVE_LIKWID )); then echo "round $r: likwid-bench load_avx 1 GB, 1 and 2 threads"; likwid_reads "$r" before 9>&-; fi
  echo "round $r: cxlbench read"
  $CXLBENCH run --suite validation-read --out "$OUT/results" --label "r$r-read" > "$OUT/cxlbench-read-$r.txt" 2>&1 9>&-
  if (( HAVE_LIKWID )); then echo "round $r: likwid-bench again"; likwid_reads "$r" after 9>&-; fi
  if (( HAVE_LMB )); then
    echo "round $r: bw_mem rd 512m, 1 and 2 processes"
    for p in 1 2; do taskset -c "$(cpus "$p")" "$LMB/bw_mem" -P $p -N 1 512m rd 2>> "$OUT/bw_mem-P$p.txt" 9>&-; done
  fi
  unlock
done

$PYTHON scripts/validation_table.py "$OUT"
echo
CXLBENCH="$CXLBENCH" PYTHON="$PYTHON" scripts/validate_multichase.sh "$OUT/multichase" "$ROUNDS"
