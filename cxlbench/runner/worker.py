"""Measure one case in a child process, so a crash, an OOM kill or a hang costs
one case and never the run (pyperf's design). The child sends one message back
over a pipe: the samples, a skip reason, or the error."""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from cxlbench.benchmarks import family
from cxlbench.benchmarks.base import Env, Skip, check_metrics
from cxlbench.results.schema import FAILED, OK, SKIPPED, Case, CaseResult, Sample

# spawn: each worker is a fresh interpreter, a direct child of the runner (so it
# can die with it), inheriting no pyarrow or torch threads from it. Start-up
# costs ~0.2 s a case, outside anything timed.
_CTX = mp.get_context("spawn")


@dataclass
class Outcome:
    status: str
    reason: str = ""
    samples: list[Sample] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def _die_with_parent() -> None:
    """If the runner is killed, take this worker down with it rather than leave a
    measurement running on a machine nobody is watching."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:                 # the runner died before we could ask
        os._exit(1)


def _child(case: Case, ref: str, env: Env, conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the runner decides about Ctrl-C
    _die_with_parent()
    try:
        module = family(ref)
        info: dict[str, Any] = {}
        samples = check_metrics(list(module.measure(case, env, info)), module)
        conn.send(Outcome(OK, samples=samples, info=info))
    except Skip as e:
        conn.send(Outcome(SKIPPED, reason=str(e)))
    except BaseException as e:                   # anything else is this case's failure
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        at = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
        conn.send(Outcome(FAILED, reason=f"{type(e).__name__}: {e}{at}"))
    finally:
        conn.close()


def run_case(case: Case, ref: str, env: Env, timeout_s: float) -> CaseResult:
    """Measure a case in a fresh worker, with the family found by `ref` (its registry
    key or module path); never raises for what the case does."""
    start = time.monotonic()
    recv, send = _CTX.Pipe(duplex=False)
    proc = _CTX.Process(target=_child, args=(case, ref, env, send), daemon=True)
    proc.start()
    send.close()
    try:
        outcome = _wait(proc, recv, timeout_s)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()
    return CaseResult(case, outcome.status, outcome.reason, outcome.samples,
                      time.monotonic() - start, outcome.info)


def _wait(proc, recv, timeout_s: float) -> Outcome:
    if recv.poll(timeout_s):
        try:
            return recv.recv()
        except EOFError:                          # the pipe closed: the worker died
            proc.join(10)
            return Outcome(FAILED, reason=_death(proc.exitcode))
    proc.kill()
    proc.join()
    return Outcome(FAILED, reason=f"timed out after {timeout_s:.0f} s")


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""
        return f"worker killed by {name}{hint}"
    return f"worker exited with code {code} without a result"
