#!/usr/bin/env bash
# CI's check of the fleet's image: scripts/build-image.sh builds it on a base made
# here from Debian's packages (mmdebstrap: no container registry needed), then
# `cxlbench topology` and the `ci` suite run inside it and the run is read back:
# no case may fail and both benchmarks must have samples. It skips, saying why,
# where it cannot run at all (not root; buildah or mmdebstrap not installable);
# once it can, a failed build or run fails.
#
#   scripts/image-check.sh     (as root; .ci/run calls it last)
#   TORCH_WHEEL=path.whl       the CPU torch wheel to install (default: one in
#                              /opt/wheels, else pip fetches torch's CPU build)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "image-check: $*"; }
skip() { say "SKIPPED: $*"; exit 0; }

[ "$(id -u)" = 0 ] || skip "needs root (mmdebstrap, and buildah's chroot isolation)"
if ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null; then
  say "installing buildah and mmdebstrap from Debian"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah mmdebstrap >/dev/null) \
    || skip "buildah and mmdebstrap could not be installed (apt-get failed)"
fi

# chroot isolation: inside a container (CI's, or this sandbox) crun cannot start one of
# its own (cgroups v1/v2 hybrid, rlimits); a chroot runs the image's files all the same.
export BUILDAH_ISOLATION=chroot
args=(--engine buildah --debian-base)
wheel=${TORCH_WHEEL:-$(find /opt/wheels -maxdepth 1 -name 'torch-2.13.0+cpu-*.whl' 2>/dev/null | head -1)}
if [ -n "$wheel" ]; then
  args+=(--torch-wheel "$wheel")
elif ! python3 -c 'import urllib.request as u; u.urlopen("https://download.pytorch.org/whl/cpu/", timeout=15)' 2>/dev/null; then
  skip "no CPU torch wheel (TORCH_WHEEL) and download.pytorch.org is not reachable: PyPI has only the multi-GB CUDA build"
fi
# the system's trust store for pip: a TLS-intercepting proxy's CA is added there
[ -f /etc/ssl/certs/ca-certificates.crt ] && args+=(--pip-cert /etc/ssl/certs/ca-certificates.crt)
tag=localhost/cxlbench:image-check
scripts/build-image.sh "${args[@]}" --tag "$tag" --check

OUT=$(mktemp -d /tmp/cxlbench-image.XXXXXX)
# seccomp off: the default profile refuses move_pages(2), with which every case
# verifies where its pages are (docs/image.md, "Seccomp")
ctr=$(buildah from --security-opt seccomp=unconfined "$tag")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
lock=(); command -v flock >/dev/null && lock=(flock /tmp/cxlbench-measure.lock)
"${lock[@]}" buildah run -v "$OUT:/out" "$ctr" -- cxlbench run --suite ci --out /out --no-report

python3 - "$OUT" <<'EOF'
import glob, json, sys
runs = glob.glob(f"{sys.argv[1]}/*/*/run.json")
assert len(runs) == 1, f"image-check: expected one run, found {runs}"
cases = [c for c in json.load(open(runs[0]))["cases"] if c["benchmark"] != "sentinel"]
failed = [f"{c['case_id']}: {c.get('reason')}" for c in cases if c["status"] == "failed"]
assert not failed, "image-check: cases failed inside the image:\n" + "\n".join(failed)
for bench in ("latency", "bandwidth"):
    n = sum(c["samples"] for c in cases if c["benchmark"] == bench)
    assert n > 0, f"image-check: no {bench} samples inside the image"
print(f"image-check: the ci suite ran inside the image: {len(cases)} cases, none failed")
EOF
