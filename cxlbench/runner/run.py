"""Plan a suite on this machine, measure each case in a worker, stream results to the store."""
from __future__ import annotations

import platform
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cxlbench import __version__
from cxlbench.benchmarks import UnknownBenchmark, family
from cxlbench.benchmarks.base import Env, Planned
from cxlbench.results.schema import COMPLETE, FAILED, PARTIAL, SKIPPED, CaseResult
from cxlbench.results.store import RunWriter
from cxlbench.runner import ecc
from cxlbench.runner.progress import Progress
from cxlbench.runner.suite import SuiteError, benchmark_specs, load_suite
from cxlbench.runner.worker import run_case
from cxlbench.topology import classify_tiers, initiators, read_machine


@dataclass
class RunConfig:
    suite: str = "quick"
    declarations: list[str] = field(default_factory=list)   # --tier KIND=SPEC
    label: str | None = None
    out: str = "results"
    root: str = "/"
    only: list[str] | None = None        # case ids (gate --confirm re-runs just these)
    command: list[str] = field(default_factory=list)
    time_budget_s: float | None = None   # overrides the suite's


@dataclass
class RunOutcome:
    path: Path
    status: str
    results: list[CaseResult]


def build_env(root: str, declarations: list[str], suite: dict | None = None) -> Env:
    machine = read_machine(root)
    tiers = classify_tiers(machine, declarations)
    inits = initiators(machine)
    return Env(machine, {t.name: t for t in tiers}, {i.name: i for i in inits}, suite or {}, root)


def plan_suite(suite: dict, env: Env) -> list[Planned]:
    planned: list[Planned] = []
    for spec in benchmark_specs(suite):
        try:
            module = family(spec["name"])
        except UnknownBenchmark as e:
            raise SuiteError(f"{suite['path']}: {e}") from None
        planned.extend(module.plan(spec, env))
    seen: set[str] = set()
    for p in planned:
        if p.case.case_id in seen:
            raise SuiteError(f"{suite['path']}: case {p.case.case_id} is planned twice; "
                             f"two [[benchmark]] tables overlap")
        seen.add(p.case.case_id)
    return planned


def versions() -> dict[str, str]:
    found = {"cxlbench": __version__, "python": platform.python_version(),
             "kernel": platform.release(), "compiler": platform.python_compiler()}
    for name in ("numpy", "pandas", "pyarrow", "torch", "cupy"):
        module = sys.modules.get(name)
        if module is None and name in ("numpy", "pandas", "pyarrow"):
            module = __import__(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "?")
    return found


def run(config: RunConfig) -> RunOutcome:
    suite = load_suite(config.suite)
    if config.time_budget_s is not None:
        suite["time_budget_s"] = config.time_budget_s
    env = build_env(config.root, config.declarations, suite)
    planned = plan_suite(suite, env)
    if config.only is not None:
        planned = [p for p in planned if p.case.case_id in set(config.only)]
    writer = RunWriter(config.out, env.machine.hostname, {
        "label": config.label, "machine_name": env.machine.hostname, "hostname": socket.gethostname(),
        "command": config.command, "suite": {k: v for k, v in suite.items() if k != "benchmark"} |
        {"benchmark": suite["benchmark"]}, "versions": versions(),
        "machine": asdict(env.machine), "environment": asdict(env.machine.environment),
        "tiers": [asdict(t) for t in env.tiers.values()], "warnings": [],
    })
    ecc_before = ecc.start(config.root)             # EDAC / CXL health counts around the run
    results = _run_planned(planned, env, writer)
    ecc.finish(writer, ecc_before, config.root)     # a count that moved is a run warning
    status = COMPLETE if len(results) == len(planned) else PARTIAL
    writer.finish(status)
    return RunOutcome(writer.path, status, results)


def _run_planned(planned: list[Planned], env: Env, writer: RunWriter) -> list[CaseResult]:
    """Measure in order; Ctrl-C stops after recording what finished."""
    progress = Progress([0.0 if p.skip else p.estimate_s for p in planned])
    budget = env.suite.get("time_budget_s") or 0
    start = time.monotonic()
    results: list[CaseResult] = []
    try:
        for p in planned:
            label = p.case.case_id
            progress.begin(label)
            result = _one(p, env, budget - (time.monotonic() - start) if budget else None)
            writer.add(result)
            results.append(result)
            progress.end(label, result.status, result.seconds, result.reason)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted: keeping the cases that finished\n")
        writer.note("interrupted", True)
    finally:
        progress.close()
    return results


def _one(p: Planned, env: Env, budget_left: float | None) -> CaseResult:
    if p.skip:
        return CaseResult(p.case, SKIPPED, p.skip)
    if budget_left is not None and budget_left < p.estimate_s:
        return CaseResult(p.case, SKIPPED, f"time budget of {env.suite['time_budget_s']} s spent")
    timeout = max(env.suite.get("case_timeout_s", 600), 10 * p.estimate_s)
    result = run_case(p.case, env, timeout)
    if result.status == FAILED:
        result.reason = result.reason or "failed without a reason"
    return result

