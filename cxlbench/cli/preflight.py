"""What a command checks of its process before it parses its arguments: conditions
under which it could only fail later, deep in an import or after its work, with a
traceback or a hang — each found here in one line instead."""
from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
import time


# What measuring and reading results import (pyproject's dependencies, less torch,
# whose families record a skip without it, and less what only a report draws with:
# the test bed's guest measures with --no-report and has neither).
REQUIRED = ("numpy", "pandas", "pyarrow", "scipy")
#: imported only to render a report: missing, a report is refused when asked for
REPORT_ONLY = ("jinja2", "matplotlib")

# Threads a command may start at once: pyarrow's two pools, OpenBLAS, the sentinel's
# probe, a worker's pipe reader. Below this pyarrow hung while reading a run (holding
# the machine's lock) and OpenBLAS raised SIGINT into the import of scipy.
THREADS = 16


def missing_directory() -> str | None:
    """The current directory deleted under the shell: every relative path, and the
    workers' start, would fail."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return "the current directory no longer exists (deleted under this shell): cd into one that does"
    return None


def missing_requirements() -> str | None:
    """A bare interpreter (no `make setup`): the import of the results store failed
    with a traceback, raised again while naming the errors to catch."""
    missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed for {sys.executable}: "
            "run `make setup` and use .venv/bin/cxlbench, or `pip install -e .` in this checkout")


def too_few_threads() -> str | None:
    """A limit too low to start THREADS threads: on processes (ulimit -u, a container's
    pids.max), or an address space (ulimit -v) too small for their stacks. Probed in a
    child process that exits after: each thread's malloc arena outlives it (16 took the
    process from 13 MiB to 1 GiB of address space), and a thread that fails inside its
    start can leave start() waiting forever."""
    try:
        started = _in_child(_threads_started, PROBE_S)
    except OSError as e:
        return f"this process cannot start another ({e.strerror}): {_RAISE}"
    if started is None:
        return f"starting {THREADS} threads did not finish within {PROBE_S:g} s: {_RAISE}"
    return None if started == THREADS else f"this process cannot start {THREADS} threads ({started} started): {_RAISE}"


def _in_child(work, seconds: float) -> int | None:
    """work() in a forked child, its return (an exit status, so 0-255; 1 where it
    raised); None where it had not ended after `seconds` and was killed. OSError where
    no child can be started. A probe of what could hang or leave the process larger
    stays out of the command's own process."""
    pid = os.fork()
    if pid == 0:
        try:
            code = work()
        except BaseException:
            code = 1
        os._exit(code)
    deadline = time.monotonic() + seconds
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.001)
    return os.waitstatus_to_exitcode(done[1])


_RAISE = ("raise the limit on processes for this user (ulimit -u, a container's pids limit) or on its "
          "address space (ulimit -v)")
PROBE_S = 10.0


def _threads_started() -> int:
    """In the probe's child: how many of THREADS threads could be started at once.
    Small stacks: the count is what is probed, not the room for 16 default stacks
    (128 MiB), which a command that works at ulimit -v 1 GiB may never need."""
    threading.stack_size(1 << 20)
    release = threading.Event()
    started = []
    try:
        for _ in range(THREADS):
            t = threading.Thread(target=release.wait, daemon=True)
            t.start()
            started.append(t)
    except RuntimeError:                            # "can't start new thread"
        pass
    release.set()
    return len(started)


def imports_hang() -> str | None:
    """Under an address-space limit (ulimit -v), whether what every command imports
    loads: at about 370 MiB scipy's OpenBLAS retried a failed 32 MiB buffer forever at
    import, deaf to SIGTERM (just above or below, the import failed and said so). Tried
    in a child that is killed past IMPORT_S; nothing is probed without such a limit."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        ended = _in_child(_import_required, IMPORT_S)
    except OSError as e:
        return f"this process cannot start another ({e.strerror}): {_RAISE}"
    if ended is None:
        return (f"importing numpy, pandas, pyarrow and scipy did not finish within {IMPORT_S:g} s under this "
                f"address-space limit (ulimit -v {soft // 1024} KiB; OpenBLAS retries a buffer it cannot map "
                "forever): raise the limit, or lift it (ulimit -v unlimited)")
    return None        # loaded, or failed: the command's own import then says why, in one line


def _import_required() -> int:
    for name in (*REQUIRED, "scipy.stats"):
        importlib.import_module(name)
    return 0


IMPORT_S = 20.0


def cannot_start() -> str | None:
    """Why no command can start here, in one line (None when one can)."""
    return missing_directory() or missing_requirements() or too_few_threads() or imports_hang()
