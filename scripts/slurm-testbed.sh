#!/usr/bin/env bash
# The fleet test bed: a one-node Slurm cluster from Debian's packages (munge,
# slurmctld, slurmd started directly: PID 1 is not systemd here) and an S3 server
# (moto) on loopback; then `cxlbench fleet run` for two configurations of this node
# and a third whose job is killed mid-run, `fleet status`, `fleet report` over the
# store, FSDP2 training at world size 1 and 2 into it, and the Kubernetes manifests
# validated offline. If Slurm cannot start, this fails saying why: it never skips.
#
#   scripts/slurm-testbed.sh            (as root; CI calls it after `make test`)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CXL=("$PY" -m cxlbench.cli.main)
say() { echo "slurm-testbed: $*"; }
die() { echo "slurm-testbed: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (slurmd and munged run as root here)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  say "installing munge, slurmctld, slurmd, slurm-client from Debian"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq munge slurmctld slurmd slurm-client \
     >/dev/null) || die "apt-get could not install munge/slurmctld/slurmd"
fi

BED=$(mktemp -d /tmp/cxlbench-slurm.XXXXXX)
NODE=$(hostname -s)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$BED/slurmctld.pid" ] && kill "$(cat "$BED/slurmctld.pid")" 2>/dev/null || true
  [ -f "$BED/slurmd.pid" ] && kill "$(cat "$BED/slurmd.pid")" 2>/dev/null || true
  [ -f "$BED/munged.pid" ] && kill "$(cat "$BED/munged.pid")" 2>/dev/null || true
}
trap cleanup EXIT

# --- munge: its own key, socket and pid file in the test bed's folder
mkdir -p "$BED/munge"
dd if=/dev/urandom bs=1 count=1024 of="$BED/munge/munge.key" status=none
chmod 700 "$BED/munge"; chmod 400 "$BED/munge/munge.key"
munged --force --key-file "$BED/munge/munge.key" --socket "$BED/munge/munge.socket" \
  --pid-file "$BED/munged.pid" --log-file "$BED/munged.log" --seed-file "$BED/munge/seed" \
  || die "munged did not start: $(tail -n 3 "$BED/munged.log" 2>/dev/null)"

# --- slurm.conf for this host: one node, one partition, state and logs in the bed
NODELINE=$(slurmd -C | head -n 1)
[[ $NODELINE == NodeName=* ]] || die "slurmd -C could not describe this node: $NODELINE"
cat > "$BED/slurm.conf" <<CONF
ClusterName=cxlbench-testbed
SlurmctldHost=$NODE
AuthType=auth/munge
AuthInfo=socket=$BED/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6917}
SlurmdPort=${SLURMD_PORT:-6918}
StateSaveLocation=$BED/state
SlurmdSpoolDir=$BED/spool
SlurmctldPidFile=$BED/slurmctld.pid
SlurmdPidFile=$BED/slurmd.pid
SlurmctldLogFile=$BED/slurmctld.log
SlurmdLogFile=$BED/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=3600
SlurmdTimeout=60
$NODELINE State=UNKNOWN
PartitionName=testbed Nodes=$NODE Default=YES MaxTime=30:00 State=UP
CONF
mkdir -p "$BED/state" "$BED/spool"
export SLURM_CONF="$BED/slurm.conf"
slurmctld -f "$SLURM_CONF" || die "slurmctld did not start: $(tail -n 5 "$BED/slurmctld.log" 2>/dev/null)"
slurmd -f "$SLURM_CONF" || die "slurmd did not start: $(tail -n 5 "$BED/slurmd.log" 2>/dev/null)"
for _ in $(seq 60); do
  state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
  [[ $state == idle* ]] && break
  sleep 1
done
[[ ${state:-} == idle* ]] || die "node $NODE is '${state:-unknown}', not idle, after 60 s: $(tail -n 5 "$BED/slurmctld.log" "$BED/slurmd.log")"
say "Slurm up: node $NODE idle in partition testbed"

# --- an S3 server on loopback
PORT=${S3_PORT:-5917}
"$PY" -m moto.server -H 127.0.0.1 -p "$PORT" >"$BED/moto.log" 2>&1 &
PIDS+=($!)
export CXLBENCH_S3_ENDPOINT="http://127.0.0.1:$PORT" AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
  AWS_DEFAULT_REGION=us-east-1
for _ in $(seq 30); do "$PY" -c "import urllib.request; urllib.request.urlopen('$CXLBENCH_S3_ENDPOINT')" \
  2>/dev/null && break; sleep 1; done
"$PY" -c "
from cxlbench.results.location import filesystem
fs, _ = filesystem('s3://fleet'); fs.mkdir('fleet')" || die "the S3 server on port $PORT did not answer"
STORE=s3://fleet/testbed
say "S3 (moto) up at $CXLBENCH_S3_ENDPOINT; store $STORE"

# --- two configurations and a third whose job is killed once it stored a case
"${CXL[@]}" fleet run --store "$STORE" --suite fleet-ci --config ddr-a="$NODE" --config ddr-b="$NODE" \
  --config killed="$NODE" --time 10:00 --log-dir "$BED/logs" --no-wait | tee "$BED/submit.txt"
KILL_JOB=$("$PY" - <<PYEOF
from cxlbench.fleet import record
print(next(j.job_id for j in record.load("$STORE").jobs if j.configuration == "killed"))
PYEOF
)
say "waiting for job $KILL_JOB (configuration killed) to store a case, then killing it"
kept=$("$PY" - <<PYEOF
import time
from cxlbench.results.store import ResultsError, find_runs, load_run
for _ in range(3000):                      # up to 10 minutes, every 0.2 s
    try:
        n = max((sum(c["status"] == "ok" for c in load_run(r).meta["cases"]) for r in find_runs("$STORE/killed")),
                default=0)
    except ResultsError:
        n = 0
    if n >= 1:
        break
    time.sleep(0.2)
print(n)
PYEOF
)
[ "${kept:-0}" -ge 1 ] || die "job $KILL_JOB never stored a case: $(cat "$BED"/logs/*killed* 2>/dev/null | tail -n 5)"
scancel --signal=KILL --full "$KILL_JOB"
for _ in $(seq 120); do
  [ -z "$(squeue -h -j "$KILL_JOB" 2>/dev/null)" ] && break
  sleep 1
done
rc=0; "${CXL[@]}" fleet status "$STORE" | tee "$BED/status.txt" || rc=$?
[ "$rc" = 1 ] || die "fleet status should exit 1 (a node failed), exited $rc"
grep -Eq "^$NODE +ddr-a +measured" "$BED/status.txt" || die "ddr-a did not measure"
grep -Eq "^$NODE +ddr-b +measured" "$BED/status.txt" || die "ddr-b did not measure"
grep -Eq "^$NODE +killed +failed .*case\(s\) it finished are kept" "$BED/status.txt" || die "the killed job is not shown failed"

# --- training across ranks into the same store: world size 1, then 2 (two launchers)
mkdir -p "$BED/tmp"        # torchrun's torchelastic_* scratch, kept with the bed's logs, not left in /tmp
TR=(env TMPDIR="$BED/tmp" "$(dirname "$PY")/torchrun" --nproc-per-node 1 --rdzv-backend c10d --max-restarts 0)
"${TR[@]}" --nnodes 1 --rdzv-endpoint 127.0.0.1:29611 --rdzv-id w1 -m cxlbench.training.distributed \
  --out "$STORE" --config train-cpu --steps 4 2>"$BED/train1.log" || die "torchrun world 1: $(tail -n 3 "$BED/train1.log")"
for r in 0 1; do
  "${TR[@]}" --nnodes 2 --rdzv-endpoint 127.0.0.1:29612 --rdzv-id w2 -m cxlbench.training.distributed \
    --out "$STORE" --config train-cpu --steps 4 2>"$BED/train2-$r.log" &
  PIDS+=($!)
done
wait "${PIDS[-1]}" && wait "${PIDS[-2]}" || die "torchrun world 2: $(tail -n 3 "$BED"/train2-*.log)"

# --- the fleet's report over the store, and the Kubernetes manifests
"${CXL[@]}" fleet report "$STORE" --compare ddr-a ddr-b -o "$BED/fleet.html" | tee "$BED/report.txt"
grep -q "ddr-b against ddr-a" "$BED/report.txt" || die "the report compares no configurations"
grep -Eq "train-cpu +tiny +2 " "$BED/report.txt" || die "the report has no scaling row for world size 2"
"${CXL[@]}" fleet manifests --store "$STORE" --image cxlbench:testbed --suite fleet-ci --config ddr-a=4 \
  --config ddr-b=2 --hugepages 2Mi=1Gi --endpoint "$CXLBENCH_S3_ENDPOINT" -o "$BED/fleet.yaml"
say "passed: Slurm fleet (2 configurations measured, 1 killed and shown failed), report, training, manifests"
