"""`cxlbench ab`: two or more configurations measured interleaved, in one session.

On a shared machine whole runs drift with the other tenants by more than the
differences worth finding, so two runs taken one after the other cannot be told
apart. Measured interleaved — each case's processes for every configuration back
to back, the configurations in a fresh random order each round (Abedi & Brecht's
randomized multiple interleaved trials) — the drift falls on both sides of each
round alike, and the per-round ratio of the two sides cancels it. Never both
sides at once: on a small machine they would share the DRAM and caches they
measure.

A configuration is a named option set, from a TOML file:

    suite = "quick"               # a suite name or a .toml path
    rounds = 5                    # default: the suite's repetitions
    repetitions = 1               # per process, i.e. per round and configuration
    threshold = "10%"
    benchmarks = ["latency"]      # optional: only these families of the suite
    precision = "4%"              # optional: more rounds for a pair until its ratio is known
    max_rounds = 20               #   to within this, at most this many rounds (default 4x),
    budget_s = 540                #   while the session's time lasts

    [[config]]
    name = "4k"
    set = { page = ["4k"] }       # settings for every table whose family has the key

    [[config]]
    name = "thp"
    set = { page = ["thp"] }
    tier = ["cxl=node:1"]         # tier declarations
    env = { OMP_NUM_THREADS = "1" }   # environment of its worker processes
    before = "echo always > /sys/kernel/mm/transparent_hugepage/enabled"   # before each turn
    python = "/opt/cxlbench-main/.venv/bin/python"   # another installation measures this side
    pythonpath = "/src/cxlbench-O3"   # ... or another source tree, its C core built in place

Each configuration's cases are paired with the other's by their place in the plan,
so both must plan the same cases but for what `set` changes. The session writes
one ordinary run per configuration (compare, report and gate read them) and
ab.json beside them: the configurations, the pairing, and the order and time of
every process. analysis.paired judges each pair on its per-round ratios.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from cxlbench.benchmarks import family
from cxlbench.benchmarks.base import Env, Planned
from cxlbench.benchmarks.spec import known_keys
from cxlbench.units import parse_fraction
from cxlbench.results.schema import COMPLETE, FAILED, PARTIAL, CaseResult
from cxlbench.results.store import AB_JSON, RunWriter, atomic_write, machine_folder, now_iso, safe_name
from cxlbench.runner import lock, processes
from cxlbench.runner.progress import Progress
from cxlbench.runner.run import (RunConfig, build_env, measure_slice, native_built, open_writer, plan_suite,
                                 writable)
from cxlbench.runner.suite import SuiteError, check_known, load_suite, read_toml
from cxlbench.runner.worker import Installation
from cxlbench.settings import refused

CONFIG_KEYS = {"name", "set", "tier", "env", "before", "python", "pythonpath"}
SESSION_KEYS = {"suite", "rounds", "repetitions", "threshold", "benchmarks", "seed", "config",
                "precision", "max_rounds", "budget_s"}


@dataclass
class Config:
    """One side of the comparison."""
    name: str
    set: dict[str, Any] = field(default_factory=dict)
    tier: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    before: str = ""
    python: str = ""               # another installation's interpreter
    pythonpath: str = ""           # another source tree, first on its path

    def installation(self) -> Installation | None:
        """Who measures this side: None for this cxlbench, else the other one."""
        return Installation(self.python, self.pythonpath) if self.python or self.pythonpath else None


@dataclass
class Session:
    suite: str
    configs: list[Config]
    rounds: int | None = None
    repetitions: int = 1
    threshold: str = "10%"
    benchmarks: list[str] | None = None
    seed: int | None = None
    path: str = ""
    precision: float = 0.0           # 0: the fixed rounds only
    max_rounds: int = 0              # 0: four times the fixed rounds
    budget_s: float = 0.0            # 0: no limit on the extra rounds


def load_session(path: str | Path) -> Session:
    """The session a file describes; SuiteError (one line) for anything it can't honour."""
    p = Path(path)
    data = read_toml(p)
    check_known(data, SESSION_KEYS, str(p))
    configs = data.get("config")
    if not isinstance(configs, list) or len(configs) < 2:
        raise SuiteError(f"{p}: an A/B needs at least two [[config]] tables")
    out = []
    for i, c in enumerate(configs):
        where = f"{p}, [[config]] {i + 1}"
        if not isinstance(c, dict):
            raise SuiteError(f"{p}: config number {i + 1} is not a table; write [[config]]")
        check_known(c, CONFIG_KEYS, where)
        if not isinstance(c.get("name"), str) or not c["name"]:
            raise SuiteError(f"{where}: a configuration needs a name")
        tier = c.get("tier", [])
        tier = [tier] if isinstance(tier, str) else tier
        if not isinstance(tier, list) or not all(isinstance(t, str) for t in tier):
            raise SuiteError(f"{where}: tier = {tier!r}: expected declarations such as [\"cxl=node:1\"]")
        if not isinstance(c.get("set", {}), dict) or not isinstance(c.get("env", {}), dict):
            raise SuiteError(f"{where}: set and env are tables (set = {{ page = [\"thp\"] }})")
        setting = refused({k: str(v) for k, v in c.get("env", {}).items()})
        if setting:
            raise SuiteError(f"{where}: env: {setting}")
        missing = [e for e in str(c.get("pythonpath", "")).split(os.pathsep) if e and not Path(e).is_dir()]
        if missing:
            raise SuiteError(f"{where}: pythonpath entry {missing[0]!r} is not a folder (a source tree "
                             f"whose cxlbench that side measures)")
        out.append(Config(c["name"], dict(c.get("set", {})), list(tier),
                          {k: str(v) for k, v in c.get("env", {}).items()}, str(c.get("before", "")),
                          str(c.get("python", "")), str(c.get("pythonpath", ""))))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise SuiteError(f"{p}: configuration names must differ: {', '.join(names)}")
    rounds = data.get("rounds")
    for key in ("max_rounds", "budget_s", "repetitions"):
        kinds = (int, float) if key == "budget_s" else (int,)
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], kinds)
                            or not 0 < data[key] < float("inf")):
            raise SuiteError(f"{p}: {key} = {data[key]!r}: must be a positive "
                             f"{'number' if key == 'budget_s' else 'whole number'}")
    if rounds is not None and (not isinstance(rounds, int) or rounds < 2):
        raise SuiteError(f"{p}: rounds = {rounds!r}: at least 2 (each round gives one paired ratio)")
    if "max_rounds" in data and data["max_rounds"] < (rounds or 2):
        raise SuiteError(f"{p}: max_rounds = {data['max_rounds']} is below "
                         + (f"the {rounds} rounds every pair runs first" if rounds else "the 2 a pair needs"))
    for c in out:
        if "repetitions" in c.set:
            raise SuiteError(f"{p}: configuration {c.name!r}: set.repetitions is the session's to choose (rounds × "
                             "repetitions, one process a round): give repetitions at the top of the file")
    try:
        precision = parse_fraction(data["precision"], f"{p}: precision") if "precision" in data else 0.0
        parse_fraction(data.get("threshold", "10%"), f"{p}: threshold")   # judged after measuring: check now
    except ValueError as e:
        raise SuiteError(str(e)) from None
    _check_types(data, p)
    return Session(str(data.get("suite", "quick")), out, rounds, int(data.get("repetitions", 1)),
                   str(data.get("threshold", "10%")), data.get("benchmarks"), data.get("seed"), str(p),
                   precision, int(data.get("max_rounds", 0)), float(data.get("budget_s", 0)))


def _check_types(data: dict[str, Any], p: Path) -> None:
    """The session's keys that are not numbers: one line each, before anything is planned."""
    if not isinstance(data.get("suite", "quick"), str):
        raise SuiteError(f"{p}: suite = {data['suite']!r}: expected a suite name or a .toml path")
    names = data.get("benchmarks")
    if names is not None and (not isinstance(names, list) or not names
                              or not all(isinstance(n, str) for n in names)):
        raise SuiteError(f"{p}: benchmarks = {names!r}: expected a non-empty list of family names")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SuiteError(f"{p}: seed = {seed!r}: expected an integer")


# ---- planning each side --------------------------------------------------------------------

@dataclass
class Side:
    config: Config
    env: Env
    planned: list[Planned]
    turn_s: list[float]                  # estimated seconds of one turn of each case
    writer: RunWriter | None = None
    results: dict[int, CaseResult] = field(default_factory=dict)


def configured_suite(session: Session, config: Config) -> dict[str, Any]:
    """The session's suite with the configuration's settings in every table whose
    family knows the key, and only the benchmarks asked for."""
    suite = load_suite(session.suite)
    tables = [t for t in suite["benchmark"] if not session.benchmarks or t["name"] in session.benchmarks]
    if not tables:
        raise SuiteError(f"{session.path}: suite {suite['name']!r} has none of the benchmarks "
                         f"{', '.join(session.benchmarks or [])}")
    used = set()
    out = []
    for t in tables:
        known = set(known_keys(family(t["name"]).Spec))
        keys = {k: v for k, v in config.set.items() if k in known}
        used |= set(keys)
        out.append({**t, **keys})
    unused = sorted(set(config.set) - used)
    if unused:
        raise SuiteError(f"{session.path}: configuration {config.name!r}: no benchmark of the suite "
                         f"has the key {unused[0]!r}")
    return {**suite, "benchmark": out}


def plan_sides(session: Session, rounds: int, root: str = "/") -> list[Side]:
    """Each configuration's plan, a case's repetitions spread one process a round;
    the plans must pair case by case."""
    sides = []
    for c in session.configs:
        suite = configured_suite(session, c)
        try:
            env = build_env(root, c.tier, suite)
        except ValueError as e:
            raise SuiteError(f"{session.path}: configuration {c.name!r}: {e}") from None
        planned = plan_suite(suite, env)
        turn_s = [p.estimate_s * session.repetitions / max(p.case.repetitions, 1) for p in planned]
        for p in planned:
            p.case = replace(p.case, repetitions=rounds * session.repetitions)
        sides.append(Side(c, env, planned, turn_s))
    first = sides[0]
    for s in sides[1:]:
        if [p.case.benchmark for p in s.planned] != [p.case.benchmark for p in first.planned]:
            raise SuiteError(f"{session.path}: configurations {first.config.name!r} and "
                             f"{s.config.name!r} plan different cases ({len(first.planned)} vs "
                             f"{len(s.planned)}); each case is paired with the one at the same place")
    return sides


# ---- measuring -----------------------------------------------------------------------------

def check_before(config: Config) -> None:
    """A before-command that fails now, or another installation that can't import its
    cxlbench, would fail every turn: refuse the session."""
    inst = config.installation()
    why = inst.check() if inst else None
    if why:
        raise SuiteError(f"configuration {config.name!r}: {why}")
    if config.before:
        r = subprocess.run(config.before, shell=True, capture_output=True, text=True)
        if r.returncode != 0:
            why = (r.stderr or r.stdout).strip().splitlines()
            raise SuiteError(f"configuration {config.name!r}: its before-command failed "
                             f"(exit {r.returncode}{': ' + why[-1] if why else ''})")


@contextmanager
def applied(config: Config):
    """The configuration's environment for the worker started inside."""
    saved = {k: os.environ.get(k) for k in config.env}
    os.environ.update(config.env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_session(session: Session, out: str = "results", root: str = "/", label: str | None = None,
                command: list[str] | None = None,
                imprecise: Callable[[Path, float, int], set[int]] | None = None, wait: bool = True) -> Path:
    """Measure every configuration interleaved; returns the session's directory.
    With a precision asked, `imprecise(session_dir, precision, max_rounds)` names
    the pairs whose ratio is not known well enough yet and can be within max_rounds (the statistics live above the
    runner; cxlbench ab hands in analysis.paired.imprecise_pairs): each gets
    another round, until none does, max_rounds, or budget_s. The whole session, its
    before-commands too (they change the machine), holds the measurement lock
    (runner.lock); `wait` False: lock.Busy at once when another measurement has it."""
    native_built()
    rounds = session.rounds or int(load_suite(session.suite)["repetitions"])
    if rounds < 2:
        raise SuiteError(f"{session.path}: {rounds} round (the suite's repetitions): at least 2 "
                         f"give a paired ratio; set rounds")
    sides = plan_sides(session, rounds, root)
    writable(machine_folder(out, sides[0].env.machine.hostname))
    with lock.measuring(lock.command_text(list(command or []), f"cxlbench ab {session.path}"), wait):
        return _measure_session(session, sides, rounds, out, root, label, command, imprecise)


def _measure_session(session: Session, sides: list[Side], rounds: int, out: str, root: str,
                     label: str | None, command: list[str] | None, imprecise) -> Path:
    """The planned session, measured (under the measurement lock: see run_session)."""
    for c in session.configs:
        check_before(c)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    tag = label or "ab"
    for s in sides:
        cfg = RunConfig(session.suite, s.config.tier, f"{tag}-{s.config.name}", out, root,
                        command=list(command or []))
        s.writer = open_writer(cfg, s.env, s.planned, ab={"session": stamp, "config": s.config.name,
                                                                **_measured_by(s.config)})
    where = Path(out) / safe_name(sides[0].env.machine.hostname) / f"ab-{stamp}-{safe_name(tag)}"
    where.mkdir(parents=True, exist_ok=False)
    record = _record(session, sides, rounds)
    rng = random.Random(session.seed)
    steps = [(r, i) for r in range(rounds) for i in range(len(sides[0].planned))]
    progress = Progress([sum(s.turn_s[i] for s in sides) for _, i in steps])
    cap = session.max_rounds or 4 * rounds
    start = time.monotonic()

    def one(r: int, i: int) -> None:
        order = rng.sample(range(len(sides)), len(sides))
        label_i = sides[0].planned[i].case.case_id + f" [round {r + 1}]"
        progress.begin(label_i)
        t0 = time.monotonic()
        for k in order:
            record["order"].append(_turn(sides[k], i, r, cap, session.repetitions))
        atomic_write(where / AB_JSON, json.dumps(record, indent=1).encode())
        progress.end(label_i, "ok", time.monotonic() - t0)

    done = False
    try:
        for r, i in steps:
            one(r, i)
        if session.precision and imprecise is not None:
            record["extra"] = {"precision": session.precision, "rounds": {}, "stopped": "not yet"}
            _extra_rounds(session, sides, where, imprecise, one, progress, rounds, cap,
                          lambda: time.monotonic() - start, record["extra"])
        done = True
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted: keeping the rounds that finished\n")
        record["interrupted"] = True
    finally:
        progress.close()
        record["ended"] = now_iso()
        for s in sides:                        # a crash, too, leaves partial runs that load
            s.writer.finish(COMPLETE if done else PARTIAL)
        atomic_write(where / AB_JSON, json.dumps(record, indent=1).encode())
    return where


def _extra_rounds(session: Session, sides: list[Side], where: Path, imprecise, one, progress,
                  first: int, cap: int, elapsed, extra: dict[str, Any]) -> None:
    """Round after round for the pairs not yet precise — and still measured on every
    side — while rounds and time last; `extra` records what was given and why it ended."""
    given = extra["rounds"]
    extra["stopped"] = f"the cap of {cap} rounds"
    for r in range(first, cap):
        due = sorted(i for i in imprecise(where, session.precision, cap)
                     if not any(processes.ended(s.results[i]) for s in sides if i in s.results))
        if not due:
            extra["stopped"] = f"every pair within ±{session.precision:.1%}, or out of reach in {cap} rounds"
            return
        served = 0
        for i in due:                  # a pair too long for the time left gives way to shorter ones
            need = sum(s.turn_s[i] for s in sides)
            if session.budget_s and elapsed() + need > session.budget_s:
                continue
            progress.add(need)
            one(r, i)
            given[str(i)] = given.get(str(i), 0) + 1
            served += 1
        if not served:
            extra["stopped"] = f"the time budget of {session.budget_s:g} s"
            return


def _measured_by(config: Config) -> dict[str, str]:
    """Which installation measured a side, for its run.json (only when not this one)."""
    return {k: v for k, v in (("python", config.python), ("pythonpath", config.pythonpath)) if v}


def _record(session: Session, sides: list[Side], rounds: int) -> dict[str, Any]:
    return {"started": now_iso(), "file": session.path, "suite": session.suite, "rounds": rounds,
            "repetitions": session.repetitions, "threshold": session.threshold, "seed": session.seed,
            "configs": [{"name": s.config.name, "set": s.config.set, "tier": s.config.tier,
                         "env": s.config.env, "before": s.config.before,
                         "python": s.config.python, "pythonpath": s.config.pythonpath,
                         "run": str(s.writer.path.resolve())} for s in sides],
            "pairs": [{"index": i, "benchmark": p.case.benchmark,
                       "cases": [s.planned[i].case.case_id for s in sides]}
                      for i, p in enumerate(sides[0].planned)],
            "order": []}


def _turn(side: Side, i: int, r: int, rounds: int, reps: int) -> dict[str, Any]:
    """Round r of case i on one side: its before-command, then one worker process."""
    p = side.planned[i]
    piece = processes.Slice(i, r, rounds, r * reps, reps, rounds * reps)
    started, t0 = now_iso("milliseconds"), time.monotonic()   # turns are under a second apart
    prev = side.results.get(i)
    if prev is not None and processes.ended(prev):
        return {"round": r, "case": i, "config": side.config.name, "started": started,
                "seconds": 0.0, "status": prev.status}            # it ended in an earlier round
    if side.config.before and subprocess.run(side.config.before, shell=True,
                                             capture_output=True).returncode != 0:
        part = CaseResult(p.case, FAILED, f"before-command failed in round {r + 1}")
    else:
        with applied(side.config):
            part = measure_slice(p, side.env, None, piece, side.turn_s[i], side.config.installation())
    side.results[i] = processes.merge(prev, part, piece)
    side.writer.add(side.results[i], part)
    return {"round": r, "case": i, "config": side.config.name, "started": started,
            "seconds": round(time.monotonic() - t0, 3), "status": part.status}
