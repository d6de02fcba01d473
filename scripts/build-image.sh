#!/usr/bin/env bash
# Builds the image the fleet's Kubernetes Jobs run (`cxlbench fleet manifests
# --image REGISTRY/cxlbench:TAG`) from the Containerfile at the repository's root.
#
#   scripts/build-image.sh                         CPU image cxlbench:VERSION on debian:bookworm-slim
#   scripts/build-image.sh --torch-wheel W.whl     ... installing that torch wheel (the CPU build on disk)
#   scripts/build-image.sh --debian-base           ... on a base made here from Debian's packages
#                                                  (mmdebstrap), where no container registry is reachable
#   scripts/build-image.sh --gpu                   GPU image cxlbench:VERSION-gpu on a CUDA base
#   scripts/build-image.sh --check                 then run `cxlbench topology` inside it
#   scripts/build-image.sh --pip-cert CA.pem       pip trusts this CA bundle during the build
#                                                  (a TLS-intercepting proxy's; it stays out of the image)
#   scripts/build-image.sh --dry-run               print the commands, run nothing
#   scripts/build-image.sh --stage-only            write the build context (WORKDIR/context) and stop,
#                                                  for a builder of your own (kaniko, buildx)
#
# Options: --base IMAGE (any Debian/Ubuntu image with python3 >= 3.11), --tag NAME,
# --engine podman|buildah|docker (default: the first one installed), --workdir DIR
# (default build/image), --rebuild-base; anything after `--` goes to the engine's build.
# The engine's own settings come from its environment: e.g. BUILDAH_ISOLATION=chroot
# and STORAGE_DRIVER=vfs for podman or buildah inside a container (docs/image.md).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "build-image: $*"; }
die() { echo "build-image: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

CPU_BASE=docker.io/library/debian:bookworm-slim
GPU_BASE=docker.io/nvidia/cuda:12.8.1-runtime-ubuntu24.04
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' cxlbench/version.py)

gpu=0 base="" tag="" engine="" wheel="" cert="" debian_base=0 rebuild_base=0 check=0 dry=0 stage_only=0
workdir=build/image
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu=1 ;;
    --base) base=${2:?--base needs an image}; shift ;;
    --debian-base) debian_base=1 ;;
    --rebuild-base) rebuild_base=1 ;;
    --torch-wheel) wheel=${2:?--torch-wheel needs a path}; shift ;;
    --pip-cert) cert=${2:?--pip-cert needs a CA bundle}; shift ;;
    --tag) tag=${2:?--tag needs a name}; shift ;;
    --engine) engine=${2:?--engine needs podman, buildah or docker}; shift ;;
    --workdir) workdir=${2:?--workdir needs a folder}; shift ;;
    --check) check=1 ;;
    --dry-run) dry=1 ;;
    --stage-only) stage_only=1 ;;
    -h|--help) usage 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "build-image: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done

[ -n "$base" ] && [ "$debian_base" = 1 ] && die "--base and --debian-base name two bases: choose one"
[ "$gpu" = 1 ] && [ "$debian_base" = 1 ] && die "--debian-base makes a plain Debian base; the GPU image needs a CUDA one (--base)"
[ -z "$wheel" ] || [ -f "$wheel" ] || die "--torch-wheel $wheel: no such file"
[ -z "$cert" ] || [ -f "$cert" ] || die "--pip-cert $cert: no such file"
case "$(basename "${wheel:-torch-x.whl}")" in torch-*.whl) ;; *) die "--torch-wheel $wheel is not a torch wheel (torch-*.whl)" ;; esac

run() {  # print each command; run it unless --dry-run
  echo "+$(printf " %q" "$@")"
  [ "$dry" = 1 ] || "$@"
}

# The build context: only what the Containerfile copies (never results/ or a
# built .so), wheels/ with the torch wheel and certs/ with pip's CA bundle when given.
stage_context() {
  local ctx="$workdir/context"
  run rm -rf "$ctx"
  run mkdir -p "$ctx/wheels" "$ctx/certs"
  if [ "$dry" = 1 ]; then echo "+ copy Containerfile pyproject.toml setup.py README.md suites cxlbench -> $ctx"
  else
    tar -c --exclude=__pycache__ --exclude='*.so' --exclude='*.egg-info' \
      Containerfile pyproject.toml setup.py README.md suites cxlbench | tar -x -C "$ctx"
  fi
  [ -z "$wheel" ] || run cp "$wheel" "$ctx/wheels/"
  [ -z "$cert" ] || run cp "$cert" "$ctx/certs/ca.pem"
}

if [ "$stage_only" = 1 ]; then
  stage_context
  say "build context in $workdir/context (Containerfile inside)"; exit 0
fi
if [ -z "$engine" ]; then
  for e in podman buildah docker; do command -v "$e" >/dev/null && { engine=$e; break; }; done
  [ -n "$engine" ] || { [ "$dry" = 1 ] && engine=podman; } \
    || die "no podman, buildah or docker here (apt-get install podman buildah)"
fi
case "$engine" in podman|buildah|docker) ;; *) die "--engine $engine: podman, buildah or docker" ;; esac

if [ "$gpu" = 1 ]; then
  base=${base:-$GPU_BASE}; tag=${tag:-cxlbench:$VERSION-gpu}
  build_args=(--build-arg "BASE=$base" --build-arg TORCH_SPEC=torch --build-arg TORCH_INDEX= --build-arg EXTRAS=gpu)
else
  [ "$debian_base" = 1 ] && base="localhost/cxlbench-base:$DEBIAN_SUITE"
  base=${base:-$CPU_BASE}; tag=${tag:-cxlbench:$VERSION}
  build_args=(--build-arg "BASE=$base" --build-arg "TORCH_SPEC=torch==2.13.0")
fi

image_exists() {
  case "$engine" in
    podman) podman image exists "$1" ;;
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
  esac
}

# A minimal Debian (minbase: dpkg, apt, bash; documentation and translations
# left out as the slim images do) imported as the base image.
make_debian_base() {
  if [ "$dry" = 0 ] && [ "$rebuild_base" = 0 ] && image_exists "$base"; then
    say "base $base exists (--rebuild-base makes it again)"; return
  fi
  [ "$dry" = 1 ] || command -v mmdebstrap >/dev/null || die "--debian-base needs mmdebstrap (apt-get install mmdebstrap)"
  local hooks=() tar="$workdir/rootfs-$DEBIAN_SUITE.tar"
  # merged /usr set up by a hook instead of the usrmerge package, which pulls in perl (~50 MB)
  [ -d /usr/share/mmdebstrap/hooks/merged-usr ] && hooks=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
  run mkdir -p "$workdir"
  run mmdebstrap --variant=minbase --include=ca-certificates "${hooks[@]}" \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$DEBIAN_SUITE" "$tar" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
    "deb ${DEBIAN_MIRROR%/debian}/debian-security $DEBIAN_SUITE-security main"
  case "$engine" in
    podman|docker) run "$engine" import "$tar" "$base" ;;
    buildah)
      if [ "$dry" = 1 ]; then echo "+ buildah from scratch; buildah add CTR $tar /; buildah commit CTR $base"
      else
        local ctr; ctr=$(buildah from scratch)
        buildah add "$ctr" "$tar" / >/dev/null && buildah commit -q "$ctr" "$base" >/dev/null
        buildah rm "$ctr" >/dev/null
      fi ;;
  esac
  run rm -f "$tar"
}

[ "$debian_base" = 1 ] && make_debian_base
stage_context
ctx="$workdir/context"
case "$engine" in
  podman|docker) build=("$engine" build) ;;
  buildah) build=(buildah build --layers) ;;   # podman and docker keep layers by default
esac
run "${build[@]}" -f "$ctx/Containerfile" --target runtime "${build_args[@]}" -t "$tag" "${extra[@]}" "$ctx"

if [ "$dry" = 0 ]; then
  say "built $tag on $base: $("$engine" images --format '{{.Size}}' "$tag" | head -1)"
fi
if [ "$check" = 1 ]; then
  case "$engine" in
    podman|docker) run "$engine" run --rm "$tag" cxlbench topology ;;
    buildah)
      if [ "$dry" = 1 ]; then echo "+ buildah run \$(buildah from $tag) -- cxlbench topology"
      else ctr=$(buildah from "$tag"); buildah run "$ctr" -- cxlbench topology; buildah rm "$ctr" >/dev/null; fi ;;
  esac
fi
# podman and buildah push to a destination; docker pushes a tag, so it tags first
if [ "$engine" = docker ]; then
  say "push it where the nodes pull from: docker tag $tag REGISTRY/${tag#localhost/} && docker push REGISTRY/${tag#localhost/}"
else
  say "push it where the nodes pull from: $engine push $tag REGISTRY/${tag#localhost/}"
fi
say "then: cxlbench fleet manifests --image REGISTRY/${tag#localhost/} ..."
