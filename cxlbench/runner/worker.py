"""Measure one case in a child process, so a crash, an OOM kill or a hang costs
one case and never the run (pyperf's design). The child sends one message back
over a pipe: the samples, a skip reason, or the error.

A case can also be measured by another cxlbench installation (an A/B of two C
builds, or of two versions): then the child is a plain subprocess of that
installation's interpreter, `python -m cxlbench.runner.worker JOB OUT`, with its
source tree first on its path — a spawned multiprocessing child would import the
runner's own cxlbench, since spawn hands the child the parent's sys.path.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cxlbench.benchmarks import family
from cxlbench.benchmarks.base import Env, Skip, check_metrics
from cxlbench.results.schema import FAILED, OK, SKIPPED, TIMED_OUT, Case, CaseResult, Sample

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


@dataclass(frozen=True)
class Installation:
    """Another cxlbench to measure with: its interpreter, and a source tree (with its
    C core built in place) put first on that interpreter's path."""
    python: str = ""
    pythonpath: str = ""

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.pythonpath:
            mine = os.pathsep.join(os.path.abspath(p) for p in self.pythonpath.split(os.pathsep))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (mine, env.get("PYTHONPATH"))))
        return env

    def command(self) -> list[str]:
        return [self.python or sys.executable, "-m", "cxlbench.runner.worker"]

    def check(self) -> str | None:
        """Why this installation can't measure (None when it can), in one line."""
        probe = "import cxlbench, cxlbench._native, cxlbench.runner.worker; print(cxlbench.__file__)"
        try:
            r = subprocess.run([self.python or sys.executable, "-c", probe], env=self.environ(),
                               capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir())
        except OSError as e:
            return f"cannot start {self.python}: {e.strerror}"
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            return f"cannot import its cxlbench ({lines[-1] if lines else f'exit {r.returncode}'})"
        return None


def run_case(case: Case, ref: str, env: Env, timeout_s: float,
             installation: Installation | None = None) -> CaseResult:
    """Measure a case in a fresh worker, with the family found by `ref` (its registry
    key or module path) — in another installation's interpreter when given; never
    raises for what the case does."""
    start = time.monotonic()
    if installation is not None:
        outcome = _run_elsewhere(case, ref, env, timeout_s, installation)
        return CaseResult(case, outcome.status, outcome.reason, outcome.samples,
                          time.monotonic() - start, outcome.info)
    try:
        proc, recv = _start(case, ref, env)
    except OSError as e:
        return CaseResult(case, FAILED, why_not_started(e), [], time.monotonic() - start)
    try:
        outcome = _wait(proc, recv, timeout_s)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()
    return CaseResult(case, outcome.status, outcome.reason, outcome.samples,
                      time.monotonic() - start, outcome.info)


def _start(case: Case, ref: str, env: Env):
    """The case's worker started, and the end of its pipe to read."""
    recv, send = _CTX.Pipe(duplex=False)
    try:
        proc = _CTX.Process(target=_child, args=(case, ref, env, send), daemon=True)
        proc.start()
    except OSError:
        recv.close()
        raise
    finally:
        send.close()
    return proc, recv


def why_not_started(e: OSError) -> str:
    """Why a worker (or the sentinels' probe) could not be started: a limit, not the
    case, and not the run's files."""
    return (f"its process could not be started ({e.strerror or e}): a limit on open files (ulimit -n), "
            f"processes (ulimit -u) or memory was reached")


def _wait(proc, recv, timeout_s: float) -> Outcome:
    if recv.poll(timeout_s):
        try:
            return recv.recv()
        except EOFError:                          # the pipe closed: the worker died
            proc.join(10)
            return Outcome(FAILED, reason=death(proc.exitcode))
    proc.kill()
    proc.join()
    return Outcome(FAILED, reason=f"{TIMED_OUT} {timeout_s:.0f} s")


class _FileConn:
    """The child's end when it is a plain subprocess: one pickled message to a file."""

    def __init__(self, path: str):
        self.path = path

    def send(self, outcome: Outcome) -> None:
        Path(self.path).write_bytes(pickle.dumps(outcome))

    def close(self) -> None:
        pass


def _run_elsewhere(case: Case, ref: str, env: Env, timeout_s: float, inst: Installation) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="cxlbench-job-") as d:
        job, out = Path(d, "job.pickle"), Path(d, "outcome.pickle")
        job.write_bytes(pickle.dumps((case, ref, env)))
        # run from the job's folder: python puts its working directory first on the
        # path, and the runner's may hold the runner's own cxlbench
        try:
            proc = subprocess.Popen(inst.command() + [str(job), str(out)], env=inst.environ(), cwd=d,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            return Outcome(FAILED, reason=why_not_started(e))
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return Outcome(FAILED, reason=f"{TIMED_OUT} {timeout_s:.0f} s")
        if not out.exists():
            last = err.decode(errors="replace").strip().splitlines()
            return Outcome(FAILED, reason=death(proc.returncode) + (f": {last[-1]}" if last else ""))
        try:
            return pickle.loads(out.read_bytes())
        except Exception as e:                      # another version's records
            return Outcome(FAILED, reason=f"the other installation's result is unreadable here ({e})")


def main(argv: list[str]) -> int:
    """`python -m cxlbench.runner.worker JOB OUT`: measure the pickled (case, ref, env)
    in JOB and pickle the Outcome to OUT (the child of another installation)."""
    job, out = argv
    conn = _FileConn(out)
    try:
        case, ref, env = pickle.loads(Path(job).read_bytes())
    except Exception as e:
        conn.send(Outcome(FAILED, reason=f"this installation cannot read the case ({type(e).__name__}: {e})"))
        return 0
    _child(case, ref, env, conn)
    return 0


def death(code: int | None, who: str = "worker") -> str:
    """Why a child ended without a result, in words; SIGKILL with the likeliest sender."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""
        return f"{who} killed by {name}{hint}"
    return f"{who} exited with code {code} without a result"


if __name__ == "__main__":
    # the module again by its name, so what it pickles reads as cxlbench.runner.worker's
    from cxlbench.runner.worker import main as _main
    sys.exit(_main(sys.argv[1:]))
