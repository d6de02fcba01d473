#!/bin/sh
# Bring the guest's memory up the way a CXL-aware distribution would, with the
# kernel's own CXL stack and the project-independent tools (cxl, daxctl):
#   numa  nothing to do: the firmware (QEMU's SRAT/SLIT/HMAT) made the nodes
#   cxl   load the CXL and DAX drivers, create a RAM region on the type 3 device,
#         and online it as system RAM: a new CPU-less NUMA node
# Prints what it finds; exits non-zero when a step fails.
CONFIG=${1:-numa}

step() { echo "== $*"; }
fail() { echo "SETUP FAILED: $*"; dump; exit 1; }
wait_for() {  # PATH SECONDS
    i=0
    while [ ! -e "$1" ]; do
        i=$((i + 1)); [ "$i" -gt $(($2 * 10)) ] && return 1
        sleep 0.1
    done
}
dump() {
    step "numactl -H"; numactl -H
    step "memory tiers"
    for t in /sys/devices/virtual/memory_tiering/memory_tier*; do
        [ -e "$t/nodelist" ] && echo "$(basename "$t"): nodes $(cat "$t/nodelist")"
    done
    step "HMAT (access0 of each node)"
    for n in /sys/devices/system/node/node*; do
        a=$n/access0/initiators
        [ -e "$a/read_latency" ] || continue
        echo "$(basename "$n"): read_latency $(cat "$a/read_latency") ns," \
             "read_bandwidth $(cat "$a/read_bandwidth") MB/s," \
             "initiators $(ls "$a" | grep '^node' | tr '\n' ' ')"
    done
    if [ -d /sys/bus/cxl/devices ]; then
        step "cxl list"; cxl list -M -R -D -u 2>&1
        step "daxctl list"; daxctl list -u 2>&1
    fi
}

case "$CONFIG" in
numa) ;;
cxl)
    step "loading the CXL and DAX drivers"
    for m in cxl_acpi cxl_pci cxl_mem dax_cxl device_dax kmem; do
        modprobe "$m" || fail "modprobe $m"
    done
    wait_for /sys/bus/cxl/devices/mem0 30 || fail "no CXL memdev mem0 appeared"
    wait_for /sys/bus/cxl/devices/endpoint2 30 || ls /sys/bus/cxl/devices
    # the root decoder of the fixed memory window that can hold volatile memory
    decoder=""
    for d in /sys/bus/cxl/devices/decoder0.*; do
        if [ "$(cat "$d/cap_ram" 2>/dev/null)" = 1 ]; then decoder=$(basename "$d"); break; fi
    done
    [ -n "$decoder" ] || fail "no root decoder able to hold RAM"
    step "cxl create-region -m -t ram -d $decoder -w 1 mem0"
    cxl create-region -m -t ram -d "$decoder" -w 1 mem0 || fail "cxl create-region"
    wait_for /sys/bus/dax/devices/dax0.0 30 || fail "the region made no DAX device"
    step "daxctl reconfigure-device --mode=system-ram dax0.0"
    daxctl reconfigure-device --mode=system-ram dax0.0 || fail "daxctl reconfigure-device"
    ;;
*) fail "unknown configuration $CONFIG" ;;
esac
dump
