"""The run's drift sentinels: one probe process, visited between cases, never beside one.

The probe process (benchmarks.sentinel.Sentinels) builds the sentinel buffers once,
when the run starts, and then waits on its pipe while the cases run; the runner
asks it for a visit at the start, whenever `interval_s` of run time has passed
since the last one (between two processes of the suite, so nothing else is
measuring), and at the end. A visit's samples are stored at once as rows of the
sentinel family, repetition = visit number, with their t_s.

A suite turns them off with `sentinels = false`, or sets them with a table
(`[sentinels]`, the sentinel family's keys: interval_s, probes, samples ...).
Without either, a suite gets them when one of its families declares which
sentinel moves with its figures (`DRIFT`): the host memory families. A probe
that cannot be built (too little free memory) leaves its cases skipped with the
reason, and the run goes on without them; one that dies keeps what it measured.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

from cxlbench.benchmarks import family
from cxlbench.benchmarks.base import Env, Planned, Skip
from cxlbench.benchmarks.spec import SpecError, parse
from cxlbench.results.schema import FAILED, OK, SKIPPED, CaseResult
from cxlbench.runner.suite import SuiteError
from cxlbench.runner.worker import death, why_not_started

KEY = "sentinels"
_CTX = mp.get_context("spawn")
#: Seconds a visit may take before the probe is given up (a visit is ~0.5 s).
VISIT_TIMEOUT_S = 60


@dataclass
class Plan:
    """What the run will visit, or why it visits nothing."""
    planned: list[Planned] = field(default_factory=list)
    interval_s: float = 30
    off: str = ""                      # why there are none, when there are none


def plan(suite: dict[str, Any], env: Env, planned: list[Planned]) -> Plan:
    """The sentinel cases a suite gets (see the module's docstring)."""
    setting = suite.get(KEY)
    where = f"{suite.get('path', 'suite')}, {KEY}"
    if setting is False:
        return Plan(off="the suite turns them off (sentinels = false)")
    if setting is None:
        if not any(getattr(family(p.family), "DRIFT", None) for p in planned if p.family):
            return Plan(off="no family of this suite declares a sentinel (DRIFT)")
        setting = {}
    elif setting is True:
        setting = {}
    if not isinstance(setting, dict):
        raise SuiteError(f"{where} = {setting!r}: expected true, false or a table of the sentinel "
                         f"family's keys")
    module = family("sentinel")
    shared = {k: suite[k] for k in ("min_sample_s", "case_timeout_s") if k in suite}
    try:
        spec = parse(module.Spec, {**shared, **setting, "name": module.NAME}, where)
    except SpecError as e:
        raise SuiteError(str(e)) from None
    cases = module.plan(spec, env)
    for p in cases:
        p.family, p.spec = module.NAME, spec
    if not cases:
        return Plan(off="no DDR tier with CPUs to measure them on", interval_s=spec.interval_s)
    return Plan(cases, spec.interval_s)


def stamp(part: CaseResult, began_s: float) -> None:
    """Each sample's time since the run started, t_s: the middle of its repetition's
    share of the process's wall time (a process's repetitions run one after another).
    A comparison relative to the sentinels finds the visits around it by this."""
    reps = sorted({s.repetition for s in part.samples})
    share = part.seconds / max(len(reps), 1)
    at = {r: round(began_s + share * (k + 0.5), 3) for k, r in enumerate(reps)}
    for s in part.samples:
        s.params.setdefault("t_s", at[s.repetition])


class Watch:
    """The probe process of one run and the sentinel cases' results so far."""

    def __init__(self, sentinels: Plan, env: Env, writer, start: float):
        self.plan, self.env, self.writer, self.start = sentinels, env, writer, start
        self.results: dict[str, CaseResult] = {}
        self.visits, self.last = 0, None
        self.proc = self.conn = None
        self.stopped = ""
        self.info: dict[str, Any] = {}

    @property
    def cases(self):
        return [p.case for p in self.plan.planned]

    def open(self) -> None:
        """Start the probe process and take the first visit; a probe that cannot be
        built records its cases as skipped (or failed) and the run goes on."""
        skipped = next((p.skip for p in self.plan.planned if p.skip), None)
        if skipped:
            return self._end(SKIPPED, skipped)
        spec = self.plan.planned[0].spec
        try:            # the process is kept only once started: an unstarted one can't be joined
            self.conn, child = _CTX.Pipe()
            try:
                proc = _CTX.Process(target=_probe, args=(self.cases, replace(self.env, spec=spec),
                                                         self.start, child), daemon=True)
                proc.start()
            finally:
                child.close()
        except OSError as e:
            if self.conn is not None:
                self.conn.close()
            return self._end(FAILED, f"the probe: {why_not_started(e)}")
        self.proc = proc
        status, payload = self._receive(max(spec.case_timeout_s, VISIT_TIMEOUT_S))
        if status != OK:
            return self._end(status, payload)
        self.info = payload
        self.visit()

    def due(self) -> bool:
        return self.proc is not None and self.last is not None and \
            time.monotonic() - self.last >= self.plan.interval_s

    def visit(self) -> None:
        if self.proc is None:
            return
        self.conn.send(self.visits)
        status, payload = self._receive(VISIT_TIMEOUT_S)
        if status != OK:
            return self._end(FAILED, f"visit {self.visits + 1}: {payload}")
        for case in self.cases:
            part = CaseResult(case, OK, samples=payload[case.case_id])
            prev = self.results.get(case.case_id)
            merged = CaseResult(case, OK, samples=(prev.samples if prev else []) + part.samples,
                                info={**self.info, "visits": self.visits + 1,
                                      "interval_s": self.plan.interval_s})
            self.results[case.case_id] = merged
            self.writer.add(merged, part)
        self.visits += 1
        self.last = time.monotonic()

    def close(self, last_visit: bool = True) -> None:
        """The last visit (unless the run was interrupted), then the probe's end."""
        if last_visit:
            self.visit()
        if self.proc is not None:
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(5)
            self._stop()
        self.writer.note(KEY, {"interval_s": self.plan.interval_s, "visits": self.visits,
                               "probes": [c.case_id for c in self.cases],
                               **({"stopped": self.stopped} if self.stopped else {})})

    def _receive(self, timeout_s: float) -> tuple[str, Any]:
        try:
            if self.conn.poll(timeout_s):
                return self.conn.recv()
            return FAILED, f"the probe did not answer within {timeout_s:g} s"
        except (EOFError, OSError):
            self.proc.join(5)
            return FAILED, death(self.proc.exitcode, "the probe process")

    def _end(self, status: str, reason: str) -> None:
        """No more visits: what was measured stays; cases never measured get the reason."""
        self.stopped = reason
        for case in self.cases:
            if case.case_id in self.results:
                r = self.results[case.case_id]
                r.info["stopped"] = reason
                self.writer.record(r)
            else:
                self.results[case.case_id] = r = CaseResult(case, status, reason)
                self.writer.record(r)
        self._stop()

    def _stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join()
            self.conn.close()
        self.proc = None


def _probe(cases, env: Env, start: float, conn) -> None:
    """The probe process: build the sentinels, then one visit per message until None."""
    from cxlbench.benchmarks.sentinel import Sentinels
    from cxlbench.runner.worker import _die_with_parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the runner decides about Ctrl-C
    _die_with_parent()
    info: dict[str, Any] = {}
    try:
        probe = Sentinels(cases, env, start, info)
    except Skip as e:
        conn.send((SKIPPED, str(e)))
        return
    except BaseException as e:
        conn.send((FAILED, _why(e)))
        return
    conn.send((OK, info))
    with probe:
        while (number := conn.recv()) is not None:
            try:
                conn.send((OK, probe.visit(number)))
            except BaseException as e:
                conn.send((FAILED, _why(e)))
                return


def _why(e: BaseException) -> str:
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    return f"{type(e).__name__}: {e}" + (f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
                                         if where else "")
