"""A case's repetitions spread over several worker processes, run in passes over the plan.

Repetitions inside one process share more than the case means them to: the
physical pages a freed buffer gives back to the next one (page colouring decides
how a working set near a cache's size fits it), the state of the host around
those few seconds. Two runs of one machine then differ by more than either run's
spread says, and a gate reads that as a change. pyperf answers with many
processes, asv with rounds; we do both: with `processes = P`, pass k runs every
case once in a fresh worker for its k-th share of the repetitions, so each
case's samples come from P processes spread over the run's whole duration.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from cxlbench.results.schema import FAILED, OK, SKIPPED, CaseResult
from cxlbench.results.store import HIST_KEY


@dataclass(frozen=True)
class Slice:
    """One worker's share of a case: repetitions first … first+count-1."""
    index: int          # the case's place in the plan
    process: int        # 0-based
    processes: int
    first: int
    count: int
    total: int = 0      # the case's repetitions, over all its processes

    @property
    def suffix(self) -> str:
        return f" [process {self.process + 1}/{self.processes}]" if self.processes > 1 else ""


def shares(repetitions: int, processes: int) -> list[int]:
    """Repetitions per process, as even as they go; never an empty process."""
    processes = max(1, min(processes, repetitions))
    base, extra = divmod(repetitions, processes)
    return [base + (1 if k < extra else 0) for k in range(processes)]


def slices(cases: list[tuple[int, int]]) -> list[Slice]:
    """Pass by pass: (repetitions, processes) per planned case → the order to run them."""
    per_case = []
    for index, (reps, procs) in enumerate(cases):
        counts = shares(reps, procs) if reps > 0 else [0]
        starts = [sum(counts[:k]) for k in range(len(counts))]
        per_case.append([Slice(index, k, len(counts), s, c, reps)
                         for k, (s, c) in enumerate(zip(starts, counts))])
    passes = max((len(s) for s in per_case), default=0)
    return [s[k] for k in range(passes) for s in per_case if k < len(s)]


#: What starting one more worker costs (a fresh interpreter, imports), untimed.
START_S = 0.2


def estimate(case_estimate_s: float, piece: Slice) -> float:
    """One process's share of its case's estimate, plus its own start-up when the
    case is split (the family's estimate has one start-up in it)."""
    share = case_estimate_s * piece.count / max(piece.total, 1)
    return share + (START_S if piece.processes > 1 else 0.0)


#: The lists of per-repetition records a family leaves in its info (benchmarks.tails'
#: histograms, latency's distribution checks), numbered by repetition as its samples are.
PER_REPETITION = (HIST_KEY, "distribution")


def renumber(result: CaseResult, first: int) -> CaseResult:
    """A worker numbers its repetitions from 0; the run numbers them across processes,
    in its samples and in the records its info keeps per repetition."""
    for s in result.samples:
        s.repetition += first
    for key in PER_REPETITION:
        for record in result.info.get(key) or []:
            if isinstance(record, dict) and "repetition" in record:
                record["repetition"] += first
    return result


def merge(prev: CaseResult | None, part: CaseResult, piece: Slice) -> CaseResult:
    """The case so far plus one more process. A process that fails ends the case as
    failed, keeping what the others measured, unless it was one past the planned
    repetitions (then only the extra passes end); one skipped after others measured (the
    time budget spent) ends it too, but as ok with `repetitions_measured` saying how
    many. The first process's findings stay the case's; each process is listed with
    its repetitions, status and its own findings."""
    record = {"process": piece.process, "repetitions": [piece.first, piece.first + piece.count - 1],
              "status": part.status, "seconds": round(part.seconds, 3)}
    if part.reason:
        record["reason"] = part.reason
    if prev is None:
        merged = replace(part, samples=list(part.samples), info=dict(part.info))
    else:
        merged = replace(prev, samples=prev.samples + part.samples, seconds=prev.seconds + part.seconds,
                         info=dict(prev.info))
        if part.info:
            record["info"] = part.info              # its own placement checks, CPUs, ...
        warnings = [w for w in part.info.get("warnings", []) if w not in merged.info.get("warnings", [])]
        if warnings:
            merged.info["warnings"] = list(merged.info.get("warnings", [])) + warnings
        if part.status == SKIPPED and prev.status == OK:
            # A budget spent (or a refusal) after some processes measured: what was
            # measured stands; the case says how much of it there is.
            merged.info["repetitions_measured"] = f"{piece.first} of {piece.total}: {part.reason}"
            # One wording for every case cut by the same cause (the reason's estimate
            # differs per case), so the terminal and the report say it once with a count.
            budget = part.reason.split(": ", 1)[0]
            merged.info["warnings"] = list(merged.info.get("warnings", [])) + [
                f"only {piece.first} of {piece.total} repetitions measured: the {budget} was spent "
                f"(run --budget SECONDS allows more)" if budget.startswith("time budget") else
                f"only {piece.first} of {piece.total} repetitions measured: {part.reason}"]
        elif part.status == FAILED and prev.status == OK and piece.first >= prev.case.repetitions:
            # A process past the planned repetitions (asked for by a precision target)
            # failed: the planned measurement is whole and stands; the extra passes end
            # for this case, and the failure is a warning on it, not its verdict.
            why = f"process {piece.process + 1} of {piece.processes} failed: {part.reason}"
            merged.info["repetitions_measured"] = merged.info["process_failed"] = \
                f"{piece.first} of {piece.total}: {why}"
            merged.info["warnings"] = list(merged.info.get("warnings", [])) + [
                f"more repetitions for precision stopped after the planned {prev.case.repetitions}: {why}"]
        elif part.status != OK:
            merged.status = part.status
            merged.reason = f"process {piece.process + 1} of {piece.processes}: {part.reason}"
    if piece.processes > 1:
        merged.info["processes"] = list(merged.info.get("processes", [])) + [record]
    return merged


def learned(estimate: float, prev: CaseResult | None, piece: Slice) -> float:
    """A process's seconds as the case's earlier processes took them, where it has
    any: the plan's guess (a fault rate, a bandwidth) can be off by half on a VM, and
    the budget check that decides whether a process starts is only as good as this."""
    reps = len(_reps(prev)) if prev is not None and prev.status == OK else 0
    return prev.seconds / reps * piece.count if reps else estimate


def ended(result: CaseResult) -> bool:
    """No more processes for this case: it failed, was skipped, or was cut short."""
    return result.status != OK or "repetitions_measured" in result.info


# ---- adaptive repetitions ------------------------------------------------------------

@dataclass
class Extra:
    """Adaptive repetitions' bookkeeping: the repetitions each case has run (kept or
    not: a repetition whose points were all dropped still used its number and
    seed), the extra processes it had, and why the extra passes ended."""
    ran: dict[int, int]
    processes: dict[int, int]
    stopped: str = "every case reached its target or its cap"


def wants_more(p, result: CaseResult | None, precision: float, ran: int) -> bool:
    """A case is given another process while it asks for a precision it has not
    reached, measured fine so far, and has repetitions left under its cap."""
    if not p.spec or not p.spec.precision or p.one_process or p.skip or result is None or ended(result):
        return False
    return not precision <= p.spec.precision and ran < cap(p)   # NaN: not known yet


def cap(p) -> int:
    return p.spec.max_repetitions or 4 * p.case.repetitions


def _reps(result: CaseResult) -> set[int]:
    return {s.repetition for s in result.samples}


def adaptive(planned: list, results: dict[int, CaseResult], precision_of: Callable[[CaseResult], float],
             left: Callable[[], float | None], progress, extra: Extra) -> Iterator[tuple[Slice, float]]:
    """After the planned passes: pass after pass, one more process for each case
    whose precision is short of its target, until none is, or the time budget has
    no room for another process. Within a pass the cases nearest their targets go
    first, and a case whose next process does not fit what is left gives way to
    cheaper ones: the last minutes go where they decide a case. Every process
    takes repetition numbers no process had, never past the cap."""
    for i, p in enumerate(planned):
        extra.ran.setdefault(i, p.case.repetitions)
        extra.processes.setdefault(i, p.processes)
    while True:
        now = {i: precision_of(r) for i, r in results.items()}
        due = [i for i, p in enumerate(planned) if i in results and wants_more(p, results[i], now[i], extra.ran[i])]
        if not due:
            return
        served = 0
        for i in sorted(due, key=lambda i: _shortfall(planned[i], now[i])):
            p, first = planned[i], extra.ran[i]
            count = min(max(1, math.ceil(p.case.repetitions / max(p.processes, 1))), cap(p) - first)
            estimate = estimate_for(p, count)
            budget = left()
            if budget is not None and budget < estimate:
                continue
            served += 1
            extra.processes[i] += 1
            extra.ran[i] = first + count
            progress.add(estimate)
            yield Slice(i, extra.processes[i] - 1, extra.processes[i], first, count, cap(p)), estimate
        if not served:
            extra.stopped = "the time budget"
            return


def _shortfall(p, precision: float) -> float:
    """How far a case's precision is from its target (1: there); unknown ones last."""
    return precision / p.spec.precision if math.isfinite(precision) else math.inf


def estimate_for(p, count: int) -> float:
    """Seconds for `count` more repetitions of a case in a new process."""
    return p.estimate_s * count / max(p.case.repetitions, 1) + START_S


def record_precision(planned: list, results: dict[int, CaseResult],
                     precision_of: Callable[[CaseResult], float], writer, extra: Extra) -> None:
    """Each measured case says how precise its figures are, and, where a target was
    asked, whether it was reached and why it stopped."""
    for i, r in results.items():
        if r.status != OK:
            continue
        p, achieved = planned[i], precision_of(r)
        record = {"achieved": None if math.isnan(achieved) else round(achieved, 5),
                  "repetitions": len(_reps(r))}
        if p.spec and p.spec.precision and not p.one_process:
            ran = extra.ran.get(i, p.case.repetitions)
            record["target"] = p.spec.precision
            record["stop"] = ("reached" if achieved <= p.spec.precision else
                              f"the cap of {cap(p)} repetitions" if ran >= cap(p) else
                              "a process that failed (its warning says why)" if "process_failed" in r.info else
                              f"a process skipped ({r.info['repetitions_measured'].split(': ', 1)[-1]})"
                              if "repetitions_measured" in r.info else extra.stopped)
        r.info["precision"] = record
        writer.record(r)
