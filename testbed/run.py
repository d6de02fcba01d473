#!/usr/bin/env python3
"""Boot the test bed guest in one or more configurations, run the guest test suite in
each, bring the results back, and exit non-zero if any configuration fails.

    testbed/run.py [--config numa|cxl|all] [--timeout S] [--retries N] [--out DIR]
                   [--shell] [-v] [--pytest "ARGS"] [--print-cmdline]

Configurations (the topology below is the single source of truth: the QEMU command
line and the guest tests' expectations, written to expect.json, both come from it):
  numa  2 nodes with one CPU and DRAM each + 1 CPU-less DRAM node + 1 node with a CPU
        and no memory, a SLIT distance table, and HMAT latency/bandwidth for every
        initiator x target pair
  cxl   the same plus a CXL type 3 volatile memory device behind a CXL host bridge
        and root port, with a fixed memory window; the guest's init creates a RAM
        region on it and onlines it as a CPU-less node (testbed/guest/setup.sh)

The guest runs under single-threaded TCG (no KVM needed). Only the Python standard
library is used.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("TESTBED_CACHE", "/var/cache/cxlbench-testbed"))

# ---------------------------------------------------------------- the topology
# Node ids are the ACPI proximity domains; Linux numbers nodes in the order SRAT lists
# them (CPU entries first, then memory), so the CPU-less node comes last to keep the
# two numberings the same.
NODES = [  # id, CPUs, MiB of RAM
    {"id": 0, "cpus": [0], "mem_mib": 1792},
    {"id": 1, "cpus": [1], "mem_mib": 1792},
    {"id": 2, "cpus": [2], "mem_mib": 0},      # CPUs, no memory (a socket without DIMMs)
    {"id": 3, "cpus": [], "mem_mib": 640, "initiator": 0},   # CPU-less DRAM, near node 0
]
# The memory-less node is close to node 0 (distance 12): Linux gives the CXL
# region's node distance 20 to every node, and a memory-less node whose nearest
# memory were the CXL node would take all its processes' memory from it (slow
# under TCG, and QEMU 10.0 then crashes).
DISTANCES = [  # SLIT
    [10, 21, 12, 17],
    [21, 10, 16, 28],
    [12, 16, 10, 28],
    [17, 28, 28, 10],
]
# HMAT: (initiator, target) -> (latency ns, bandwidth MiB/s). Figures of a made-up
# machine, chosen so that every pair differs and the CPU-less node is the slowest.
HMAT = {
    (0, 0): (90, 20480), (0, 1): (140, 10240), (0, 3): (240, 8192),
    (1, 0): (140, 10240), (1, 1): (90, 20480), (1, 3): (300, 4096),
    (2, 0): (110, 16384), (2, 1): (130, 12288), (2, 3): (310, 4096),
}
# Every memory node is big enough for cxlbench's placement margin (it keeps at
# least 512 MiB free on a node) plus a few MiB of test buffers; the CPU nodes also
# hold the root image (~300 MiB of tmpfs, on node 0 or 1, whichever CPU unpacked
# it) and the processes: at 1280 MiB node 0 was down to 505 MiB free by the quick
# run's bandwidth cases (2026-12-04), under the margin, and they were skipped. Memory
# the guest never touches costs the host nothing.
CXL_MIB = 1024          # the type 3 device's volatile capacity
CXL_WINDOW_GIB = 4       # the fixed memory window (CFMWS) it is decoded through

CONFIGS = ("numa", "cxl")


def expectations(config: str) -> dict:
    """What the guest must find, derived from the same data as the QEMU command line."""
    return {
        "config": config,
        "nodes": NODES,
        "distances": DISTANCES,
        "hmat": [{"initiator": i, "target": t, "latency_ns": lat, "bandwidth_MiBps": bw}
                 for (i, t), (lat, bw) in sorted(HMAT.items())],
        "cxl": {"memdevs": 1, "ram_mib": CXL_MIB, "window_gib": CXL_WINDOW_GIB}
        if config == "cxl" else None,
    }


def qemu_args(config: str, out: Path, initrd: Path, kernel: Path, extra_cmdline: str) -> list[str]:
    machine = "q35,hmat=on" + (",cxl=on" if config == "cxl" else "")
    total = sum(n["mem_mib"] for n in NODES)
    cpus = sum(len(n["cpus"]) for n in NODES)
    args = [
        # one host thread for all vCPUs: with multi-threaded TCG a halted vCPU sometimes
        # missed its timer wake-up for good (RCU stalls, then a hung test); the tests
        # run one process at a time anyway, and the other host core stays free
        "-machine", machine, "-accel", os.environ.get("TESTBED_ACCEL", "tcg,thread=single"),
        # hypervisor=off: with the hypervisor bit the CXL region commit fails in the guest
        "-cpu", "max,hypervisor=off",
        "-smp", f"{cpus},sockets={cpus},cores=1,threads=1",
        "-m", f"{total}M",
        # -nodefaults: no NIC/VGA/floppy; else the firmware waits ~30 s on option ROMs
        "-nodefaults", "-no-reboot", "-display", "none", "-vga", "none",
        "-serial", "stdio", "-monitor", "none",
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-virtfs", f"local,path={out},mount_tag=results,security_model=none,id=results",
    ]
    for n in NODES:
        spec = f"node,nodeid={n['id']}"
        if n["mem_mib"]:
            args += ["-object", f"memory-backend-ram,id=mem{n['id']},size={n['mem_mib']}M"]
            spec += f",memdev=mem{n['id']}"
        spec += "".join(f",cpus={c}" for c in n["cpus"])
        if not n["cpus"]:
            spec += f",initiator={n['initiator']}"
        args += ["-numa", spec]
    for src, row in enumerate(DISTANCES):
        for dst, val in enumerate(row):
            if src < dst:
                args += ["-numa", f"dist,src={src},dst={dst},val={val}"]
    for (i, t), (lat, bw) in sorted(HMAT.items()):
        args += ["-numa", f"hmat-lb,initiator={i},target={t},hierarchy=memory,"
                          f"data-type=access-latency,latency={lat}",
                 "-numa", f"hmat-lb,initiator={i},target={t},hierarchy=memory,"
                          f"data-type=access-bandwidth,bandwidth={bw}M"]
    if config == "cxl":
        args += [
            "-object", f"memory-backend-ram,id=cxlmem0,share=off,size={CXL_MIB}M",
            "-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
            "-device", "cxl-rp,port=0,bus=cxl.1,id=cxl_rp0,chassis=0,slot=2",
            "-device", "cxl-type3,bus=cxl_rp0,volatile-memdev=cxlmem0,id=cxl-vmem0,sn=0xc0ffee",
            "-machine", f"cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size={CXL_WINDOW_GIB}G",
        ]
    cmdline = ("console=ttyS0 panic=-1 loglevel=4 mitigations=off "
               # else the kernel onlines the region's memory itself and daxctl refuses
               "memhp_default_state=offline "
               f"testbed.config={config} {extra_cmdline}").strip()
    return args + ["-append", cmdline]


# ---------------------------------------------------------------- running one
def junit_summary(path: Path) -> tuple[dict, list[str]]:
    """Test counts and failed test names; ({}, []) when the guest wrote no report."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[str] = []
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}, failed
    for suite in root.iter("testsuite"):
        for k in counts:
            counts[k] += int(suite.get(k, 0))
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}")
    return counts, failed


def run_config(config: str, args) -> tuple[bool, dict]:
    qemu = CACHE / "qemu" / "qemu-system-x86_64"
    kernel, initrd = CACHE / "guest" / "vmlinuz", CACHE / "initrd.cpio"
    for p in (qemu, kernel, initrd):
        if not p.exists():
            print(f"testbed: {p} is missing: run `make testbed` first", file=sys.stderr)
            return False, {}
    out = (Path(args.out) / config).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "expect.json").write_text(json.dumps(expectations(config), indent=1))
    extra = "testbed.shell=1" if args.shell else ""
    if args.pytest:
        extra += f' testbed.pytest="{args.pytest}"'
    cmd = [str(qemu)] + qemu_args(config, out, initrd, kernel, extra)
    (out / "qemu-cmdline.sh").write_text(shlex.join(cmd) + "\n")
    if args.print_cmdline:
        print(shlex.join(cmd))
        return True, {}

    print(f"testbed: [{config}] booting (timeout {args.timeout} s, results in {out})", flush=True)
    start = time.monotonic()
    if args.shell:  # interactive: the console is this terminal
        subprocess.run(cmd, check=False)
        return True, {}
    console = open(out / "console.log", "wb")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)

    def pump():
        for line in proc.stdout:
            console.write(line)
            console.flush()
            if args.verbose:
                sys.stdout.write(f"  [{config}] " + line.decode(errors="replace"))
                sys.stdout.flush()
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    console.close()
    elapsed = time.monotonic() - start

    rc_file = out / "rc"
    counts, failed = junit_summary(out / "junit.xml")
    if timed_out:
        verdict = f"FAILED: no answer within {args.timeout} s (hung or too slow)"
    elif not rc_file.exists():
        verdict = f"FAILED: the guest stopped without running its tests (QEMU exit {proc.returncode})"
    elif rc_file.read_text().strip() != "0":
        verdict = f"FAILED: guest tests exit code {rc_file.read_text().strip()}"
    elif counts["tests"] == 0:
        verdict = "FAILED: the guest ran no test"
    else:
        verdict = "ok"
    ok = verdict == "ok"
    c = counts or {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    summary = (f"{c['tests'] - c['failures'] - c['errors'] - c['skipped']} passed, "
               f"{c['failures'] + c['errors']} failed, {c['skipped']} skipped")
    print(f"testbed: [{config}] {verdict} -- {summary} in {elapsed:.0f} s", flush=True)
    for name in failed:
        print(f"testbed: [{config}]   failed: {name}")
    if not ok:
        tail = (out / "console.log").read_bytes().decode(errors="replace").splitlines()[-60:]
        print(f"testbed: [{config}] last console lines ({out / 'console.log'}):")
        for line in tail:
            print(f"  | {line}")
    return ok, counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="all", choices=CONFIGS + ("all",))
    p.add_argument("--timeout", type=int, default=int(os.environ.get("TESTBED_TIMEOUT", 420)),
                   help="seconds per configuration, boot to power-off (default 420)")
    p.add_argument("--out", default=os.environ.get("TESTBED_OUT", str(CACHE / "out")),
                   help="results folder; each configuration writes a subfolder")
    p.add_argument("--shell", action="store_true",
                   help="after setup, a shell on this terminal instead of the tests")
    p.add_argument("--pytest", default="", help="extra arguments for the guest's pytest")
    p.add_argument("--retries", type=int, default=int(os.environ.get("TESTBED_RETRIES", 1)),
                   help="boot again when a guest hangs or dies before reporting (default 1; "
                        "never when a test failed)")
    p.add_argument("--print-cmdline", action="store_true", help="print the QEMU command line only")
    p.add_argument("-v", "--verbose", action="store_true", help="stream the guest console")
    args = p.parse_args(argv)
    configs = CONFIGS if args.config == "all" else (args.config,)
    results = {}
    for c in configs:                     # one guest at a time: 2 cores
        results[c] = run_config(c, args)
        for attempt in range(args.retries):
            ok, counts = results[c]
            if ok or counts or args.print_cmdline or args.shell:
                break
            # no junit at all: the guest never got to report (hang, crash, no boot).
            # Emulator trouble gets one more boot; a failing test never does.
            out = Path(args.out) / c
            kept = out.with_name(f"{c}.attempt{attempt + 1}")
            shutil.rmtree(kept, ignore_errors=True)
            out.rename(kept)
            print(f"testbed: [{c}] RETRY {attempt + 1}/{args.retries}: the guest did not report "
                  f"(its console is kept in {kept}); booting it again", flush=True)
            results[c] = run_config(c, args)
    if args.print_cmdline or args.shell:
        return 0
    failed = [c for c, (ok, _) in results.items() if not ok]
    # the closing line counts guest tests over all configurations; a configuration
    # that failed without a failing test (no boot, hang, setup) counts as one failure
    passed = fails = skipped = 0
    for ok, counts in results.values():
        bad = counts.get("failures", 0) + counts.get("errors", 0)
        passed += counts.get("tests", 0) - bad - counts.get("skipped", 0)
        skipped += counts.get("skipped", 0)
        fails += bad or (0 if ok else 1)
    if failed:
        print(f"testbed: configurations failed: {', '.join(failed)}")
    print(f"testbed: {passed} passed, {fails} failed, {skipped} skipped")
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
