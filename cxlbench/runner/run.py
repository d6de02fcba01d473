"""Plan a suite on this machine, measure each case in a worker, stream results to the store."""
from __future__ import annotations

import contextlib
import itertools
import os
import platform
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from cxlbench.version import __version__
from cxlbench.benchmarks import family
from cxlbench.benchmarks.base import Env, Planned, describe
from cxlbench.results.schema import COMPLETE, CORE_COLUMNS, FAILED, PARTIAL, SKIPPED, CaseResult
from cxlbench.results.location import is_url
from cxlbench.results.store import RUN_JSON, ResultsError, RunWriter, StoreWriter, machine_folder, unwritable
from cxlbench.runner import ecc, lock, processes, sentinels
from cxlbench.runner.progress import Progress
from cxlbench.runner.suite import SuiteError, families, load_suite, with_find_max
from cxlbench.runner.worker import Installation, run_case
from cxlbench.topology import allowed_cpus, classify_tiers, initiators, read_machine
from cxlbench.topology.nodes import NO_NODES
from cxlbench.settings import refused


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
    find_max: bool = False               # training: the largest config that fits, per placement
    precision: float | None = None       # overrides the suite's (a fraction: 0.05)
    # How precise a case's figures are so far (the relative half-width of the
    # confidence interval of its medians, the worst of its points; NaN when it
    # cannot say): adaptive repetitions ask it, and each case records it. The
    # statistics live above the runner (analysis), so the caller hands them in.
    precision_of: Callable[[CaseResult], float] | None = None
    # The hardware configuration's name (--config): a folder above the machine's in
    # the store. "auto", or a store at a URL with none named: the name
    # `configuration_of` derives from the run's machine record (it lives in the
    # analysis layer, above the runner, so the caller hands it in, like precision_of).
    configuration: str | None = None
    configuration_of: Callable[[dict], str] | None = None
    # Another measurement holds the machine (runner.lock): wait for it (True), or
    # raise lock.Busy at once.
    wait: bool = True


@dataclass
class RunOutcome:
    path: Path
    status: str
    results: list[CaseResult]
    sentinels: list[CaseResult] = field(default_factory=list)   # the drift sentinels' cases
    stored: str | None = None            # the run's URL, when the store is one


#: What a scheduler tells the job it started (Slurm's variables, an Indexed Job's
#: index, the node name a pod gets from the downward API): recorded with the run, so a
#: fleet's report can say which job measured what.
SCHEDULER_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_CLUSTER_NAME", "SLURMD_NODENAME",
                       "SLURM_JOB_PARTITION", "JOB_COMPLETION_INDEX", "NODE_NAME", "POD_NAME",
                       "CXLBENCH_FLEET_ID")


def build_env(root: str, declarations: list[str], suite: dict | None = None) -> Env:
    """The machine at `root` as this process may use it: on the live machine ("/"),
    each node's initiator holds only the CPUs its affinity allows (a fixture tree's
    CPUs are not this process's to check)."""
    machine = read_machine(root)
    tiers = classify_tiers(machine, declarations)
    inits = initiators(machine, allowed_cpus(machine) if root == "/" else None)
    return Env(machine, {t.name: t for t in tiers}, {i.name: i for i in inits}, suite or {}, root)


def plan_suite(suite: dict, env: Env) -> list[Planned]:
    """Every table of the suite checked against its family's Spec, then planned."""
    planned: list[Planned] = []
    table: dict[int, int] = {}                 # id(planned) -> its [[benchmark]] table's number
    for number, (ref, module, spec) in enumerate(families(suite), 1):
        one = bool(getattr(module, "ONE_PROCESS", False))
        for p in module.plan(spec, env):
            table[id(p)] = number
            p.processes, p.family, p.spec, p.one_process = 1 if one else max(1, spec.processes), ref, spec, one
            taken = sorted(set(p.case.params) & set(CORE_COLUMNS))
            if taken:                  # its rows would lose the value, or the case id, to the parameter
                raise SuiteError(f"{ref} plans a case with parameter {taken[0]!r}, a name the results' "
                                 f"own columns have; a family names its parameters otherwise")
            planned.append(p)
    for p in planned:
        init = env.initiators.get(p.case.initiator)
        if init is not None and init.not_allowed and not p.skip:
            p.skip = (f"{init.not_allowed} (it may run on CPUs {env.machine.environment.allowed_cpus}: "
                      f"its affinity); measured from elsewhere, it would not be {init.name}'s figure")
    seen: dict[str, Planned] = {}
    for p in planned:
        first = seen.setdefault(p.case.case_id, p)
        if first is p:
            continue
        if table[id(first)] == table[id(p)]:   # one table: a value listed twice (4KiB and 4096, say)
            raise SuiteError(f"{suite['path']}, [[benchmark]] {table[id(p)]} ({p.family}): case "
                             f"{p.case.case_id} is planned twice: a value is listed twice in one of its axes")
        raise SuiteError(f"{suite['path']}: case {p.case.case_id} is planned twice; "
                         f"[[benchmark]] tables {table[id(first)]} and {table[id(p)]} overlap")
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


def native_built() -> None:
    """Without the compiled C core every case would fail on a missing attribute, and
    with a setting it ignores it would measure what was not asked: say so once,
    before anything runs."""
    from cxlbench.memory import native_missing
    if native_missing():
        raise SuiteError("the C core (cxlbench._native) is not built: run `make setup`, "
                         "or `pip install -e .` in this checkout")
    setting = refused(os.environ)
    if setting:
        raise SuiteError(setting)


def prepare(config: RunConfig) -> tuple[Env, list[Planned]]:
    """The suite as the config asks for it (--find-max, --budget), the machine it
    runs on, and the plan: what `run` measures and `run --list` prints."""
    suite = load_suite(config.suite)
    if config.find_max:
        suite = with_find_max(suite)
    if config.time_budget_s is not None:
        suite["time_budget_s"] = config.time_budget_s
    if config.precision is not None:
        suite["precision"] = config.precision
    env = build_env(config.root, config.declarations, suite)
    planned = plan_suite(suite, env)
    if config.only is not None:
        planned = [p for p in planned if p.case.case_id in set(config.only)]
    return env, planned


def open_writer(config: RunConfig, env: Env, planned: list[Planned], **extra) -> RunWriter:
    """A new run directory for `planned`, its run.json saying what, where and how:
    the machine, the suite, the versions, and each family's self-description."""
    suite = env.suite
    meta = {
        "label": config.label, "machine_name": env.machine.hostname, "hostname": socket.gethostname(),
        "command": config.command, "suite": {k: v for k, v in suite.items() if k != "benchmark"} |
        {"benchmark": suite["benchmark"]}, "versions": versions(),
        "machine": asdict(env.machine), "environment": asdict(env.machine.environment),
        "tiers": [asdict(t) for t in env.tiers.values()], "warnings": [],
        "families": {p.case.benchmark: describe(family(p.family)) for p in planned}, **extra,
    }
    name, source = configuration_name(config, meta)
    meta["configuration"] = {"name": name, "source": source}
    scheduler = {k: os.environ[k] for k in SCHEDULER_VARIABLES if os.environ.get(k)}
    if scheduler:
        meta["scheduler"] = scheduler
    if is_url(config.out):
        return StoreWriter(config.out, env.machine.hostname, meta, name)
    return RunWriter(config.out, env.machine.hostname, meta, name if source == "label" or
                     config.configuration == "auto" else None)


def configuration_name(config: RunConfig, meta: dict) -> tuple[str, str]:
    """(name, source): the name given (source "label"), else the one derived from
    the machine record ("derived"). A local store keeps today's layout unless a
    name is given or "auto" asked for; a store at a URL always has the level."""
    if config.configuration and config.configuration != "auto":
        return config.configuration, "label"
    if config.configuration_of is None:
        if config.configuration == "auto" or is_url(config.out):
            raise SuiteError("a derived configuration name needs configuration_of "
                             "(cxlbench run passes fleet.configuration.derive)")
        return "", "none"
    return config.configuration_of(meta), "derived"


def run(config: RunConfig) -> RunOutcome:
    native_built()
    env, planned = prepare(config)
    if not planned:               # else 'run complete' with nothing measured, and exit 0
        raise SuiteError(f"{config.suite} plans no case on this machine"
                         + (f": {NO_NODES}" if not env.machine.nodes else ""))
    if config.precision_of is None and any(p.spec.precision for p in planned):
        raise SuiteError("adaptive repetitions (precision) need a precision_of function "
                         "(cxlbench run passes analysis.reduction.case_precision)")
    watching = sentinels.plan(env.suite, env, planned)
    if not is_url(config.out):
        named = config.configuration if config.configuration not in (None, "", "auto") else None
        writable(machine_folder(config.out, env.machine.hostname, named))
    with lock.measuring(lock.command_text(config.command, f"cxlbench run --suite {config.suite}"), config.wait):
        return _measure(config, env, planned, watching)


def writable(folder: Path) -> None:
    """Refused before the lock is waited for: a user could wait out another's whole
    run and then fail to make the run's folder (in a checkout where root ran first)."""
    cannot = unwritable(folder / RUN_JSON)
    if cannot:
        raise SuiteError(f"the run's folder cannot be made: {cannot}; give --out a folder of yours")


def _measure(config: RunConfig, env: Env, planned: list[Planned], watching: sentinels.Plan) -> RunOutcome:
    """The planned run, measured: under the machine's measurement lock (see run())."""
    writer = open_writer(config, env, planned + watching.planned)
    try:
        if watching.off:
            writer.note(sentinels.KEY, {"off": watching.off})
        ecc_before = ecc.start(config.root)             # EDAC / CXL health counts around the run
        watch = sentinels.Watch(watching, env, writer, time.monotonic()) if watching.planned else None
        results = _run_planned(planned, env, writer, config.precision_of, watch)
        ecc.finish(writer, ecc_before, config.root)     # a count that moved is a run warning
        finished = len(results) == len(planned) and not writer.meta.get("interrupted")
        status = COMPLETE if finished else PARTIAL
        writer.finish(status)
    except OSError as e:          # its disk full or made read-only under it: say where the run is
        with contextlib.suppress(OSError):        # marked partial where the disk still takes that
            writer.finish(PARTIAL)
        raise ResultsError(f"{writer.path}: {e.strerror or e} while writing the run; the cases measured "
                           "before it are kept there (the run reads as partial)") from None
    except MemoryError:           # the cases measured so far read as a partial run, not one still running
        with contextlib.suppress(OSError, MemoryError):
            writer.finish(PARTIAL)
        raise
    return RunOutcome(writer.path, status, results, list(watch.results.values()) if watch else [],
                      getattr(writer, "url", None))


def _run_planned(planned: list[Planned], env: Env, writer: RunWriter,
                 precision_of: Callable[[CaseResult], float] | None = None,
                 watch: sentinels.Watch | None = None) -> list[CaseResult]:
    """Measure pass by pass (see runner.processes), then, for cases whose target
    precision is not reached, more passes of one process each; Ctrl-C stops after
    recording what finished. Returns the cases measured, each with all its processes.
    With a `watch`, the drift sentinels are visited at the start, between processes
    whenever their interval has passed, and at the end; every sample gets its t_s."""
    order = processes.slices([(0 if p.skip else p.case.repetitions, p.processes) for p in planned])
    estimates = [0.0 if planned[s.index].skip else processes.estimate(planned[s.index].estimate_s, s)
                 for s in order]
    progress = Progress(list(estimates))
    budget = env.suite.get("time_budget_s") or 0
    start = watch.start if watch else time.monotonic()
    results: dict[int, CaseResult] = {}
    left = lambda: budget - (time.monotonic() - start) if budget else None  # noqa: E731
    extra = processes.Extra({}, {})
    more = processes.adaptive(planned, results, precision_of, left, progress, extra) \
        if precision_of else iter(())
    interrupted = False
    try:
        if watch:
            watch.open()
        for piece, estimate in itertools.chain(zip(order, estimates), more):
            p, label = planned[piece.index], planned[piece.index].case.case_id + piece.suffix
            if piece.index in results and processes.ended(results[piece.index]):
                progress.drop()                       # the case ended in an earlier process
                continue
            if watch and watch.due():
                watch.visit()
            progress.begin(label)
            began = time.monotonic() - start
            estimate = processes.learned(estimate, results.get(piece.index), piece)
            part = measure_slice(p, env, left(), piece, estimate)
            sentinels.stamp(part, began)
            results[piece.index] = processes.merge(results.get(piece.index), part, piece)
            writer.add(results[piece.index], part)
            progress.end(label, part.status, part.seconds, part.reason)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted: keeping the cases that finished\n")
        writer.note("interrupted", True)
        extra.stopped = "an interruption (Ctrl-C)"
        interrupted = True
    finally:
        if watch:
            watch.close(last_visit=not interrupted)
        progress.close()
        if precision_of:
            processes.record_precision(planned, results, precision_of, writer, extra)
    return [results[i] for i in sorted(results)]


def measure_slice(p: Planned, env: Env, budget_left: float | None, piece: processes.Slice,
                  estimate: float, installation: Installation | None = None) -> CaseResult:
    """One worker's share of a case (or the case's skip, or the budget's), measured
    by this installation or another."""
    if p.skip:
        return CaseResult(p.case, SKIPPED, p.skip)
    if budget_left is not None and budget_left < estimate:
        return CaseResult(p.case, SKIPPED, f"time budget of {env.suite['time_budget_s']:g} s: "
                                           f"~{estimate:.3g} s estimated, {max(budget_left, 0):.3g} s left")
    # a week at most: beyond it the wait is no timeout (and overflows the OS's clock)
    timeout = min(max(env.suite.get("case_timeout_s", 600), 10 * estimate), 7 * 86400)
    result = run_case(replace(p.case, repetitions=piece.count, first_repetition=piece.first),
                      p.family, replace(env, spec=p.spec), timeout, installation)
    result.case = p.case
    if result.status == FAILED:
        result.reason = result.reason or "failed without a reason"
    return processes.renumber(result, piece.first)

