"""A benchmark family (a plugin, by dotted name) for testing the runner: each case does what its `mode` says."""
import os
import signal
import time

from cxlbench.benchmarks.base import Planned, Skip
from cxlbench.results.schema import Case, Sample

NAME = "fakes.family"


def plan(spec, env):
    return [Planned(Case(NAME, "cpu:node0", "ddr0", "ddr", {"mode": m, "i": i, "value": spec.get("value", 1.0)},
                         spec.get("repetitions", 3), 0), estimate_s=0.1)
            for i, m in enumerate(spec["modes"])]


def measure(case, env):
    mode = case.params["mode"]
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGKILL)       # what the OOM killer does
    if mode == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "raise":
        raise RuntimeError("the kernel refused")
    if mode == "skip":
        raise Skip("needs a CXL node")
    if mode == "hang":
        time.sleep(60)
    if mode == "stamp":                            # which process, and when
        stamp = {"pid": os.getpid(), "t_ns": time.monotonic_ns()}
        return [Sample("latency_ns", 1.0 + r, r, {**stamp, "seed": case.seed(r)})
                for r in range(case.repetitions)]

    if mode == "second_crashes":                   # the first process leaves a mark
        mark = os.path.join(env.suite["scratch"], f"mark-{case.params['i']}")
        if os.path.exists(mark):
            os.kill(os.getpid(), signal.SIGKILL)
        open(mark, "w").close()
    if mode == "interrupt":
        os.kill(os.getppid(), signal.SIGINT)        # Ctrl-C reaches the runner mid-case
        time.sleep(0.5)
    return [Sample("latency_ns", case.params["value"] + r, r) for r in range(case.repetitions)]
