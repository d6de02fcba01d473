"""A benchmark family (a plugin, by dotted name) for testing the runner: each case does what its `mode` says."""
import os
import random
import signal
import time
from dataclasses import dataclass

from cxlbench.benchmarks.base import Planned, Show, Skip, metrics
from cxlbench.benchmarks.spec import Spec as BaseSpec
from cxlbench.results.schema import Case, Metric, Sample

NAME = "fakes.family"
METRICS = metrics(Metric("latency_ns", "ns", "lower"))
SHOW = Show("Fake", "A family whose cases do what their mode says.")


@dataclass(kw_only=True)
class Spec(BaseSpec):
    modes: tuple[str, ...] = ("ok",)
    level: float = 1.0             # what an ok case measures (plus its repetition)
    repetitions: int = 3
    scratch: str = ""               # where second_crashes leaves its mark
    pause_s: float = 0.0            # each process past the first 4 repetitions takes this long
                                    # (a budget test's clock: the planned pass stays quick)


def plan(spec, env):
    return [Planned(Case(NAME, "cpu:node0", "ddr0", "ddr", {"mode": m, "i": i, "level": spec.level,
                                                            **({"pause_s": spec.pause_s} if spec.pause_s else {})},
                         spec.repetitions, 0), estimate_s=0.1)
            for i, m in enumerate(spec.modes)]


def measure(case, env, info):
    mode = case.params["mode"]
    if case.first_repetition >= 4:
        time.sleep(case.params.get("pause_s", 0.0))
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
    if mode == "env":                              # what its worker's environment says
        contiguity = os.environ.get("CXLBENCH_FAKE_CONTIG")
        found = {"phys_contiguity": float(contiguity)} if contiguity else {}
        return [Sample("latency_ns", float(os.environ.get("CXLBENCH_FAKE", "1")), r, found)
                for r in range(case.repetitions)]
    if mode == "extra_dies":                       # converges, but every process past 4 repetitions is killed
        if case.first_repetition >= 4:
            os.kill(os.getpid(), signal.SIGKILL)
        mode = "converge"
    if mode == "converge":                         # repetition g (of the whole case): ever closer to level
        return [Sample("latency_ns", case.params["level"] * (1 + 0.5 * (-1) ** g / (g + 1)), r)
                for r in range(case.repetitions) for g in [case.seed(r) - 1]]
    if mode == "first4":                           # from its 5th repetition on, every point dropped
        return [Sample("latency_ns", case.params["level"] * (1 + 0.5 * (-1) ** g / (g + 1)), r)
                for r in range(case.repetitions) for g in [case.seed(r) - 1] if g < 4]
    if mode == "jitter":                           # each repetition 3% off level, as drawn for its side
        side = os.environ.get("CXLBENCH_FAKE_SIDE", "")
        return [Sample("latency_ns", case.params["level"] * (1 + random.Random(f"{side}-{g}").gauss(0, 0.03)), r)
                for r in range(case.repetitions) for g in [case.seed(r)]]
    if mode == "crowded":                          # another process had the CPU most of the time
        return [Sample("latency_ns", 1.0, r, {"cpu_held": 0.5}) for r in range(case.repetitions)]
    if mode == "undeclared":                       # a metric the family never declared
        return [Sample("furlongs", 1.0, 0)]
    if mode == "stamp":                            # which process, and when
        stamp = {"pid": os.getpid(), "t_ns": time.monotonic_ns()}
        info["histograms"] = [{"repetition": r, "kind": "chase", "point": "", "k": 8, "overhead_ns": 19.0,
                               "lower_ns": [2400], "width_ns": [32], "count": [10]} for r in range(case.repetitions)]
        info["distribution"] = [{"repetition": r, "seed": case.seed(r)} for r in range(case.repetitions)]
        return [Sample("latency_ns", 1.0 + r, r, {**stamp, "seed": case.seed(r)})
                for r in range(case.repetitions)]

    if mode == "second_crashes":                   # the first process leaves a mark
        mark = os.path.join(env.spec.scratch, f"mark-{case.params['i']}")
        if os.path.exists(mark):
            os.kill(os.getpid(), signal.SIGKILL)
        open(mark, "w").close()
    if mode == "interrupt":
        os.kill(os.getppid(), signal.SIGINT)        # Ctrl-C reaches the runner mid-case
        time.sleep(0.5)
    return [Sample("latency_ns", case.params["level"] + r, r) for r in range(case.repetitions)]
