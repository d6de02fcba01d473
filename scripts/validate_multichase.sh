#!/usr/bin/env bash
# cxlbench's pointer chase against google/multichase, same pattern, sizes and page
# sizes, interleaved pair by pair so drift hits both alike.
#   scripts/validate_multichase.sh [OUT] [ROUNDS]
# Env: MULTICHASE  the multichase binary (default: `multichase` on PATH); build it
#                  from https://github.com/google/multichase (`make multichase`)
#      SIZES       working sets (default "16MiB 64MiB 256MiB 1GiB")
#      PAGES       page sizes (default "4k thp")
#      REPS        cxlbench repetitions per pair (default 3, each a fresh buffer and cycle)
#      LOCK        a file to flock (a shared machine's measurement lock), held for each
#                  working set's pairs, or for a whole round with LOCK_SCOPE=round
#                  (about 100 s for the default sizes on a 2-vCPU VM)
#      CXLBENCH    the cxlbench command (default .venv/bin/cxlbench), PYTHON the
#                  interpreter for the table (default .venv/bin/python)
#      SCATTER     GiB to scatter the free pool with (scripts/scatter_free_pool.py)
#                  for each pair, so both tools' 4 KiB pages come from the same
#                  kind of frames (default: none, each takes what the kernel gives)
#
# The pattern, both sides: one dependent load per 64-byte line, a uniformly random
# single cycle over every line of the working set (cxlbench's `random` pattern;
# multichase `-s 64 -T SIZE`, one TLB group as large as the arena, so its page order is
# random too). Pages: cxlbench `4k` is MADV_NOHUGEPAGE, multichase's default also
# madvises MADV_NOHUGEPAGE; cxlbench `thp` is MADV_HUGEPAGE with >= 90% coverage
# checked, multichase -H madvises MADV_HUGEPAGE (its coverage is sampled from its
# smaps below, since multichase checks none). Frames: cxlbench records each buffer's
# physical contiguity; multichase's 4k arena's is read once from its pagemap when
# its pages are in (scripts/arena_contiguity.py), since on a VM frames alone move a
# 1 GiB 4 KiB chase by up to a third. Timing: multichase -a, the mean of 5
# half-second samples after a dropped first one; cxlbench REPS repetitions of 0.5 s
# each after a calibration and a warm-up. Both run on the CPU cxlbench's latency
# worker pins itself to (the first CPU of the initiator's node): multichase is started
# under `taskset -c CPU`, which its chase thread then pins itself to.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-validation-out/multichase}; ROUNDS=${2:-5}
SIZES=${SIZES:-"16MiB 64MiB 256MiB 1GiB"}; PAGES=${PAGES:-"4k thp"}; REPS=${REPS:-3}
CXLBENCH=${CXLBENCH:-.venv/bin/cxlbench}; PYTHON=${PYTHON:-.venv/bin/python}
MC=${MULTICHASE:-$(command -v multichase || true)}
if [ -z "$MC" ] || [ ! -x "$MC" ]; then
  echo "multichase: skipped, not found (set MULTICHASE=/path/to/multichase; build it from" \
       "https://github.com/google/multichase with 'make multichase'). No multichase figures."
  exit 0
fi
[ -n "${LOCK:-}" ] && exec 9>>"$LOCK"
lock() { if [ -n "${LOCK:-}" ]; then flock 9; fi; }
unlock() { if [ -n "${LOCK:-}" ]; then flock -u 9; fi; }
# The CPU cxlbench's latency family pins to: the first CPU of node 0 (tier ddr0's
# initiator). validation_table.py checks it against the cpu cxlbench recorded.
CPU=$(cut -d, -f1 /sys/devices/system/node/node0/cpulist | cut -d- -f1)
mkdir -p "$OUT/suites"
echo "multichase: $MC, pinned to CPU $CPU; cxlbench: $CXLBENCH, $REPS repetitions a pair" | tee "$OUT/setup.txt"
grep -m1 'model name' /proc/cpuinfo | tee -a "$OUT/setup.txt"
echo "THP enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled)" | tee -a "$OUT/setup.txt"

mc_arg() {   # 16MiB -> 16m, 1GiB -> 1g
  local s=${1%iB}; echo "${s,,}"
}

suite() {    # one latency case: its own suite file, so a pair is one case each side
  local size=$1 page=$2 f="$OUT/suites/latency-$1-$2.toml"
  cat > "$f" <<EOF
name = "mc-latency-$size-$page"
description = "random chase, $size, $page pages, for the multichase comparison"
repetitions = $REPS
warmup = 1
min_sample_s = 0.5

[[benchmark]]
name = "latency"
tiers = ["ddr0"]
page = ["$page"]
pattern = ["random"]
working_set = ["$size"]
EOF
  echo "$f"
}

run_cxlbench() {  # round size page
  $CXLBENCH run --suite "$(suite "$2" "$3")" --out "$OUT/results" \
    --label "r$1-$2-$3" --no-report > "$OUT/cxlbench-$2-$3-r$1.txt" 2>&1 9>&-
}

run_multichase() {  # round size page
  local m; m=$(mc_arg "$2")
  local flags=(-m "$m" -s 64 -T "$m" -a -n 5); [ "$3" = thp ] && flags+=(-H)
  local log="$OUT/multichase-$2-$3-r$1.log"
  taskset -c "$CPU" "$MC" "${flags[@]}" > "$log" 2>&1 9>&- & local pid=$! huge=0 kb contig=-
  [ "$3" = 4k ] && contig=$($PYTHON scripts/arena_contiguity.py $pid)
  # THP: sample its coverage, which multichase does not check (cheap: a few hundred
  # PMDs). 4k: no sampling (walking its PTEs each second would run beside the chase).
  while [ "$3" = thp ] && kill -0 $pid 2>/dev/null; do
    kb=$(awk '/^AnonHugePages/ {print $2}' /proc/$pid/smaps_rollup 2>/dev/null || true)
    [ "${kb:-0}" -gt "$huge" ] && huge=$kb
    sleep 1
  done
  wait $pid
  echo "anon_huge_kb $huge" >> "$log"
  echo "$1 $(grep -E '^ *[0-9.]+$' "$log" | tail -1 | tr -d ' ') $huge $contig" >> "$OUT/multichase-$2-$3.txt"
  echo "  multichase ${flags[*]}: $(grep -E '^ *[0-9.]+$' "$log" | tail -1 | tr -d ' ') ns"
}

scattered() {  # run a command while the free pool is scattered (SCATTER GiB), if asked
  [ -z "${SCATTER:-}" ] && { "$@"; return; }
  local ready="$OUT/scatter.ready"; rm -f "$ready"
  $PYTHON scripts/scatter_free_pool.py "$SCATTER" > "$ready" 9>&- & local pid=$!
  until grep -q ready "$ready" 2>/dev/null; do kill -0 $pid || exit 1; sleep 0.2; done
  "$@"; kill $pid; wait $pid || true
}

pair() {  # round size page i: the tool that goes first alternates pair to pair, round to round
  if (( ($4 + $1) % 2 )); then run_cxlbench "$1" "$2" "$3"; run_multichase "$1" "$2" "$3"
  else run_multichase "$1" "$2" "$3"; run_cxlbench "$1" "$2" "$3"; fi
}

[ -n "${SCATTER:-}" ] && echo "free pool scattered with $SCATTER GiB for each pair" | tee -a "$OUT/setup.txt"
for r in $(seq 1 "$ROUNDS"); do
  i=0
  [ "${LOCK_SCOPE:-size}" = round ] && lock
  for size in $SIZES; do
    [ "${LOCK_SCOPE:-size}" = round ] || lock
    for page in $PAGES; do
      echo "round $r, $size, $page pages"
      scattered pair "$r" "$size" "$page" "$i"
      i=$((i + 1))
    done
    [ "${LOCK_SCOPE:-size}" = round ] || unlock
  done
  unlock
done
$PYTHON scripts/validation_table.py --multichase "$OUT"
