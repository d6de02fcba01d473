#!/usr/bin/env bash
# Build, or reuse from the cache, everything the test bed boots:
#   qemu/     QEMU 10 from bookworm-backports, its whole library closure extracted
#             (dpkg -x) and run through its own ld.so: nothing installed on the host
#   guest/    the trixie 6.12 kernel and a root image (a cpio initramfs) holding
#             python3.13, numpy, pandas, scipy, pyarrow, pytest, numactl, cxl, daxctl, the
#             kernel modules of the CXL/DAX/9p stacks
#   overlay   (every run, small) the project from this working tree with its C core
#             built for the guest's Python, the guest init and the guest tests
#
# Packages come only from the Debian mirror this machine's apt already uses, through
# a private apt configuration under the cache: the host's apt sources are never
# touched. The cache lives outside the repository: TESTBED_CACHE (default
# /var/cache/cxlbench-testbed). TESTBED_REFRESH=1 re-reads the package lists.
#
# Usage: testbed/build.sh [all|base|overlay]      (default: all)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CACHE=${TESTBED_CACHE:-/var/cache/cxlbench-testbed}
KEYRING=${TESTBED_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
PYTHON=${TESTBED_HOST_PYTHON:-python3}
PYARROW_SPEC=${PYARROW_SPEC:-pyarrow==21.0.0}

GUEST_SUITES="trixie"
GUEST_PACKAGES="libc-bin busybox kmod python3 python3-numpy python3-pandas python3-scipy python3-pytest
                numactl ndctl cxl daxctl"
KERNEL_META="linux-image-amd64"
HEADERS_PACKAGES="libpython3.13-dev"       # Python.h for building the C core
QEMU_SUITES="bookworm bookworm-backports"
QEMU_TARGET="bookworm-backports"
QEMU_PACKAGES="qemu-system-x86"
# The guest's modules: the CXL and DAX stacks, and 9p for the results share.
GUEST_MODULE_DIRS="drivers/cxl drivers/dax fs/9p fs/netfs net/9p/9pnet.ko.xz
                   net/9p/9pnet_virtio.ko.xz drivers/nvdimm drivers/acpi/nfit"

# Bump when the way a part is put together changes (its package list is in its stamp).
QEMU_RECIPE=2
GUEST_RECIPE=1

log() { printf '[testbed %(%T)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (dpkg -x keeps ownership; chroot to finish the guest root)"
for tool in apt-get dpkg-deb gcc sha256sum "$PYTHON"; do
    command -v "$tool" >/dev/null || die "missing host tool: $tool"
done
[ -r "$KEYRING" ] || die "no Debian archive keyring at $KEYRING"

# ---------------------------------------------------------------- private apt
# apt_setup NAME SUITE...: an apt configuration of its own under $CACHE/apt/NAME,
# whose sources are this machine's Debian mirror with the given suites.
apt_setup() {
    local name=$1; shift
    local d=$CACHE/apt/$name mirror want
    mirror=${DEBIAN_MIRROR:-$("$PYTHON" "$HERE/lib/aptsrc.py")}
    mkdir -p "$d"/etc/{sources.list.d,preferences.d,apt.conf.d} \
             "$d"/state/lists/partial "$d"/cache/archives/partial
    touch "$d/state/status"          # empty: apt resolves the whole closure
    want=$(for s in "$@"; do echo "deb [signed-by=$KEYRING] $mirror $s main"; done)
    if [ "$want" != "$(cat "$d/etc/sources.list" 2>/dev/null)" ]; then
        echo "$want" > "$d/etc/sources.list"
        rm -f "$d/state/updated"
    fi
    cat > "$d/apt.conf" <<EOF
Dir::Etc "$d/etc";
Dir::Etc::SourceList "$d/etc/sources.list";
Dir::Etc::SourceParts "$d/etc/sources.list.d";
Dir::Etc::Preferences "$d/etc/preferences";
Dir::Etc::PreferencesParts "$d/etc/preferences.d";
Dir::Etc::Parts "$d/etc/apt.conf.d";
Dir::State "$d/state";
Dir::State::status "$d/state/status";
Dir::Cache "$d/cache";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
APT::Install-Recommends "false";
APT::Sandbox::User "root";
Debug::NoLocking "true";
Acquire::Languages "none";
EOF
    if [ ! -e "$d/state/updated" ] || [ -n "${TESTBED_REFRESH:-}" ]; then
        apt_update "$name"
    fi
}

apt_update() {
    log "apt: reading the $1 package lists"
    APT_CONFIG=$CACHE/apt/$1/apt.conf apt-get update -qq >&2 || die "apt-get update ($1) failed"
    touch "$CACHE/apt/$1/state/updated"
}

# apt_closure NAME [-t SUITE] PKG...: download PKG and everything it depends on into
# the archive cache; print the paths of the .deb files, one a line.
apt_closure() {
    local name=$1; shift
    local conf=$CACHE/apt/$name/apt.conf archives=$CACHE/apt/$name/cache/archives
    local files try
    for try in 1 2; do
        # "Inst NAME (VERSION ORIGIN [ARCH])" -> the file name apt keeps in its archive cache
        if files=$(APT_CONFIG=$conf apt-get install -s -qq -y "$@" \
                   | awk '$1 == "Inst" { v = $3; sub(/^\(/, "", v); gsub(/:/, "%3a", v);
                                        a = $0; sub(/\]\).*/, "", a); sub(/.*\[/, "", a); print $2 "_" v "_" a ".deb" }') \
           && [ -n "$files" ] && APT_CONFIG=$conf apt-get install --download-only -qq -y "$@" >&2; then
            for f in $files; do
                [ -e "$archives/$f" ] || die "apt did not leave $f in $archives"
                echo "$archives/$f"
            done
            return 0
        fi
        [ $try = 1 ] && apt_update "$name"     # stale lists: the mirror moved on
    done
    die "could not download: $*"
}

# apt_single NAME PKG...: download PKG alone (no dependencies); print the .deb paths.
apt_single() {
    local name=$1; shift
    local dir=$CACHE/apt/$name/single pkg try
    mkdir -p "$dir"
    for pkg in "$@"; do
        for try in 1 2; do
            local ver; ver=$(APT_CONFIG=$CACHE/apt/$name/apt.conf apt-cache policy "$pkg" | awk '/Candidate:/{print $2}')
            local f; f=$(ls "$dir/${pkg}_${ver#*:}"_*.deb 2>/dev/null | head -1 || true)
            if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then f=""
            elif [ -z "$f" ]; then
                (cd "$dir" && APT_CONFIG=$CACHE/apt/$name/apt.conf apt-get download -qq "$pkg" >&2) || true
                f=$(ls "$dir/${pkg}_${ver#*:}"_*.deb 2>/dev/null | head -1 || true)
            fi
            if [ -n "$f" ]; then echo "$f"; break; fi
            [ $try = 1 ] && apt_update "$name" || die "could not download $pkg"
        done
    done
}

extract_debs() {  # DIR DEB...
    local dir=$1; shift
    local deb
    for deb in "$@"; do dpkg-deb -x "$deb" "$dir"; done
}

stamp_of() { sha256sum | cut -c1-16; }

# ---------------------------------------------------------------- QEMU
build_qemu() {
    apt_setup host $QEMU_SUITES
    local debs stamp dir=$CACHE/qemu
    debs=$(apt_closure host -t "$QEMU_TARGET" $QEMU_PACKAGES)
    stamp=$( { echo "$debs" | xargs -n1 basename; echo "$QEMU_RECIPE"; } | stamp_of)
    if [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ]; then
        log "qemu: cached ($("$dir/qemu-system-x86_64" --version | head -1))"
        return
    fi
    log "qemu: extracting $(echo "$debs" | wc -l) packages"
    rm -rf "$dir" && mkdir -p "$dir/root"
    extract_debs "$dir/root" $debs
    relink_absolute "$dir/root"
    local ldso="" cand
    for cand in lib64/ld-linux-x86-64.so.2 usr/lib64/ld-linux-x86-64.so.2; do
        [ -e "$dir/root/$cand" ] && { ldso=$cand; break; }
    done
    [ -n "$ldso" ] || die "qemu: no ld.so in the extracted closure"
    cat > "$dir/qemu-system-x86_64" <<EOF
#!/bin/sh
# QEMU from $QEMU_TARGET, run with its own libraries (written by testbed/build.sh)
R=\$(dirname "\$(readlink -f "\$0")")/root
export QEMU_MODULE_DIR=\$R/usr/lib/x86_64-linux-gnu/qemu
exec "\$R/$ldso" --library-path "\$R/lib/x86_64-linux-gnu:\$R/usr/lib/x86_64-linux-gnu" \\
    "\$R/usr/bin/qemu-system-x86_64" -L "\$R/usr/share/qemu" -L "\$R/usr/share/seabios" \\
    -L "\$R/usr/lib/ipxe/qemu" "\$@"
EOF
    chmod +x "$dir/qemu-system-x86_64"
    "$dir/qemu-system-x86_64" --version | head -1 >&2 || die "qemu does not run"
    echo "$stamp" > "$dir/stamp"
}

# Absolute symlinks inside an extracted tree point at the host: make them relative.
relink_absolute() {
    local root=$1 link target
    find "$root" -type l -lname '/*' -print0 | while IFS= read -r -d '' link; do
        target=$(readlink "$link")
        ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$root$target")" "$link"
    done
}

# ---------------------------------------------------------------- guest base image
build_base() {
    apt_setup guest $GUEST_SUITES
    local debs kdeb kver hdebs wheel stamp dir=$CACHE/guest root
    debs=$(apt_closure guest $GUEST_PACKAGES)
    local kpkg; kpkg=$(APT_CONFIG=$CACHE/apt/guest/apt.conf apt-cache depends "$KERNEL_META" \
                      | awk '/Depends: linux-image-/{print $2; exit}')
    [ -n "$kpkg" ] || die "cannot resolve $KERNEL_META"
    kdeb=$(apt_single guest "$kpkg")
    hdebs=$(apt_single guest $HEADERS_PACKAGES)
    mkdir -p "$CACHE/wheels"
    wheel=$(ls "$CACHE"/wheels/pyarrow-"${PYARROW_SPEC#*==}"-cp313-*.whl 2>/dev/null | head -1 || true)
    if [ -z "$wheel" ]; then
        log "pip: downloading $PYARROW_SPEC for cp313"
        "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.13 \
            --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
            -d "$CACHE/wheels" "$PYARROW_SPEC" >&2 || die "pip download $PYARROW_SPEC failed"
        wheel=$(ls "$CACHE"/wheels/pyarrow-*-cp313-*.whl | head -1)
    fi
    stamp=$( { echo "$debs $kdeb $hdebs $wheel" | xargs -n1 basename;
               echo "$GUEST_RECIPE $GUEST_MODULE_DIRS"; sha256sum < "$HERE/lib/mkcpio.py"; } | stamp_of)
    if [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ] && [ -s "$dir/base.cpio" ]; then
        log "guest: cached ($(cat "$dir/kernel-version"), $(du -h "$dir/base.cpio" | cut -f1) root image)"
        return
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    root=$dir/root
    # merged /usr, as trixie's base-files would have made it
    mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
    for l in bin sbin lib lib64; do ln -s "usr/$l" "$root/$l"; done
    log "guest: extracting $(echo "$debs" | wc -l) packages"
    extract_debs "$root" $debs
    for l in bin sbin lib lib64; do [ -L "$root/$l" ] || die "guest: /$l lost its usr-merge link"; done

    # What maintainer scripts would have done.
    ln -sf busybox "$root/usr/bin/sh"
    local mad=$root/usr/lib/x86_64-linux-gnu
    ln -sf blas/libblas.so.3 "$mad/libblas.so.3"
    ln -sf lapack/liblapack.so.3 "$mad/liblapack.so.3"
    mkdir -p "$root"/{proc,sys,dev,tmp,run,root,results,etc}
    echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
    echo "root:x:0:" > "$root/etc/group"
    echo testbed > "$root/etc/hostname"

    # pyarrow (not packaged in trixie) from its cp313 wheel, minus what is never imported
    local site=$root/usr/local/lib/python3.13/dist-packages
    mkdir -p "$site"
    "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$site"
    rm -rf "$site"/pyarrow/{tests,include,src,includes} "$site"/pyarrow/*.{pyx,pxd,pxi}
    # test suites of the big libraries: never run here, and big
    rm -rf "$root"/usr/lib/python3/dist-packages/{pandas,numpy}/tests \
           "$root"/usr/lib/python3/dist-packages/pandas/tests \
           "$root"/usr/share/{doc,man,info,locale,lintian}

    # kernel: vmlinuz, and the modules the guest loads, with their index
    local kroot=$dir/kernel-pkg
    mkdir -p "$kroot" && dpkg-deb -x "$kdeb" "$kroot"
    kver=$(ls "$kroot/usr/lib/modules" | head -1)
    echo "$kver" > "$dir/kernel-version"
    cp "$kroot/boot/vmlinuz-$kver" "$dir/vmlinuz"
    local mdir=$root/usr/lib/modules/$kver
    mkdir -p "$mdir/kernel"
    cp "$kroot/usr/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$mdir/"
    for m in $GUEST_MODULE_DIRS; do
        mkdir -p "$mdir/kernel/$(dirname "$m")"
        cp -a "$kroot/usr/lib/modules/$kver/kernel/$m" "$mdir/kernel/$(dirname "$m")/"
    done
    # (Debian's System.map is a stub, so no unknown-symbol check here: the guest's
    # init loads every module it needs and fails loudly when one does not load.)
    chroot "$root" /usr/sbin/depmod -a "$kver"
    rm -rf "$kroot"

    # the dynamic linker's cache, and bytecode so the guest never compiles under TCG
    chroot "$root" /usr/sbin/ldconfig
    log "guest: byte-compiling the Python libraries"
    chroot "$root" /usr/bin/python3 -m compileall -q \
        /usr/lib/python3.13 /usr/lib/python3/dist-packages /usr/local/lib/python3.13/dist-packages \
        >/dev/null || log "guest: some files did not byte-compile (they compile at import)"
    chroot "$root" /usr/bin/python3 -c 'import numpy, pandas, scipy.stats, pyarrow.parquet, pytest' \
        || die "guest: python3 cannot import its libraries"

    # C headers of the guest's Python, for building the C core on the host
    rm -rf "$CACHE/headers" && mkdir -p "$CACHE/headers"
    extract_debs "$CACHE/headers" $hdebs

    log "guest: writing the root image"
    "$PYTHON" "$HERE/lib/mkcpio.py" "$root" "$dir/base.cpio"
    echo "$stamp" > "$dir/stamp"
    log "guest: $kver, $(du -h "$dir/base.cpio" | cut -f1) root image"
}

# ---------------------------------------------------------------- per-run overlay
# The project from this working tree, its C core built against the guest's Python
# headers, the guest init and the guest tests: a small cpio unpacked over the base.
build_overlay() {
    local dir=$CACHE/overlay site inc
    rm -rf "$dir" && mkdir -p "$dir"
    site=$dir/usr/local/lib/python3.13/dist-packages
    mkdir -p "$site" "$dir/usr/local/bin" "$dir/opt/testbed"
    (cd "$REPO" && tar --exclude=__pycache__ --exclude='*.so' --exclude='*.pyc' -cf - cxlbench) \
        | tar -xf - -C "$site"
    local version; version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$REPO/pyproject.toml" | head -1)
    mkdir -p "$site/cxlbench-$version.dist-info"
    printf 'Metadata-Version: 2.1\nName: cxlbench\nVersion: %s\n' "$version" \
        > "$site/cxlbench-$version.dist-info/METADATA"
    printf '[console_scripts]\ncxlbench = cxlbench.cli.main:main\n' \
        > "$site/cxlbench-$version.dist-info/entry_points.txt"
    cat > "$dir/usr/local/bin/cxlbench" <<'EOF'
#!/usr/bin/python3
# what pip writes for the console script (the guard matters: the runner's worker
# processes are spawned, and spawn re-imports the main script)
import sys
from cxlbench.cli.main import main
if __name__ == "__main__":
    sys.exit(main())
EOF
    chmod +x "$dir/usr/local/bin/cxlbench"

    local sources; sources=$(ls "$REPO"/cxlbench/_native/*.c 2>/dev/null || true)
    if [ -n "$sources" ]; then
        inc=$CACHE/headers/usr/include
        [ -e "$inc/python3.13/Python.h" ] || die "no Python 3.13 headers: run testbed/build.sh base"
        # the flags setup.py uses, against trixie's python3.13 headers
        gcc -shared -fPIC -O2 -std=gnu11 -Wall -Wextra -Wno-unused-parameter -pthread \
            -I "$REPO/cxlbench/_native" -I "$inc/python3.13" -idirafter "$inc" \
            $sources -o "$site/cxlbench/_native.cpython-313-x86_64-linux-gnu.so" \
            || die "the C core does not build for the guest's Python"
    else
        log "overlay: no C sources in cxlbench/_native yet"
    fi
    cp "$HERE/guest/init" "$dir/init" && chmod +x "$dir/init"
    cp -r "$HERE/guest" "$HERE/guest_tests" "$dir/opt/testbed/"
    find "$dir/opt/testbed" -name __pycache__ -prune -exec rm -rf {} +
    "$PYTHON" "$HERE/lib/mkcpio.py" "$dir" "$CACHE/overlay.cpio"
    rm -rf "$dir"
    # the kernel unpacks concatenated archives in turn: the overlay lands over the base
    [ -s "$CACHE/guest/base.cpio" ] || die "no guest base image: run testbed/build.sh base"
    cat "$CACHE/guest/base.cpio" "$CACHE/overlay.cpio" > "$CACHE/initrd.cpio.tmp"
    mv "$CACHE/initrd.cpio.tmp" "$CACHE/initrd.cpio"
    log "overlay: project $(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$REPO" && git diff --quiet HEAD -- cxlbench 2>/dev/null || echo '+changes')"
}

main() {
    mkdir -p "$CACHE"
    case "${1:-all}" in
        base) build_qemu; build_base ;;
        overlay) build_overlay ;;
        all) build_qemu; build_base; build_overlay ;;
        *) die "usage: $0 [all|base|overlay]" ;;
    esac
}

main "$@"
