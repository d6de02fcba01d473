"""One measurement at a time on a machine: an advisory lock held while anything measures.

Two runs started together (two terminals, two CI jobs on one runner) pin their
timed threads to the same CPUs and each measures half a CPU: every figure of both
is wrong and neither knows. So whatever measures — `cxlbench run`, an `ab`
session, a fleet job's run on its node, `gate --confirm`'s re-runs — holds this
lock from its first timed case to its last. A second one waits, saying for whom
(the holder's pid, command and start, written into the lock file), or with
`--no-wait` exits 2 with that line. Planning, `--list` and the commands that only
read results never take it, so they never wait.

The lock is flock(2) on a file: it belongs to the open file, so it is released
when the holder exits *or crashes* (the kernel closes its files) — no stale lock
to clean up, no pid to check. The file lives in /run/lock, the directory the FHS
sets aside for lock files: a tmpfs that every process of the machine sees. /tmp
is not that everywhere: a systemd service with PrivateTmp=yes (a CI runner, say)
has its own /tmp, and a lock there would not keep it from measuring beside a
terminal's run. But /run/lock is not every user's either: systemd makes it root's
alone (0755; Debian makes it 1777), so a user could not make the file there, and
a lock only in /tmp for users and only in /run/lock for root let root's run and a
user's measure at once. So a measurement holds the file in each of /run/lock,
/dev/shm and /tmp that it can open, always in that order (no two can deadlock):
root makes and holds all three, a user the ones in /dev/shm and /tmp (both 1777)
and /run/lock's once root has made it (0666). Two processes share one of them
unless neither sees the other's: a PrivateTmp service and a terminal share
/dev/shm, which PrivateTmp leaves alone; containers with a /dev/shm and /tmp of
their own share only /run/lock, once root made it there, or a CXLBENCH_LOCK on a
shared mount. CXLBENCH_LOCK names one file instead (the tests give each
session its own, so they never wait on a real run of the machine).
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ENV = "CXLBENCH_LOCK"
NAME = "cxlbench.lock"
DIRS = ("/run/lock", "/dev/shm", "/tmp")

_held = 0          # nesting depth in this process: a run inside a held lock does not wait on itself


class Busy(Exception):
    """Another measurement holds the lock and this one was told not to wait."""


def paths() -> list[Path]:
    """The lock files to hold, in the order to take them: $CXLBENCH_LOCK alone, else
    each of DIRS's that is there or that this process could make."""
    named = os.environ.get(ENV, "").strip()
    if named:
        if not os.path.isabs(named):     # each folder it is run from would have its own lock
            raise OSError(f"{ENV}={os.environ[ENV]!r} is not an absolute path: every measurement "
                          "must name the same file")
        return [Path(named)]
    return [Path(d) / NAME for d in DIRS
            if os.path.exists(Path(d) / NAME) or (os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK))]


def command_text(argv: list[str], fallback: str) -> str:
    """How the holder names itself: "cxlbench run --suite quick" for the console script
    or `python -m cxlbench.cli.main` (whose argv[0] is a path), else argv as given."""
    if not argv:
        return fallback
    if Path(argv[0]).name in ("cxlbench", "main.py", "__main__.py"):
        return " ".join(["cxlbench", *argv[1:]])
    return " ".join(argv)


def holder_text(fd: int) -> str:
    """Who holds the lock, as its holder wrote it: "pid 4242 (cxlbench run --suite
    quick) since 2026-12-02 17:40:01 UTC"."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {info['pid']} ({info['command']}) since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it did not say which)"


def _open(p: Path) -> tuple[int, bool] | None:
    """The lock file open for writing (to say who holds it) when we may, else read-only
    (flock works on either), None where neither; made readable and writable by every user."""
    try:
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:                 # another user's file, a read-only mount: lock it, say nothing in it
        try:
            return (os.open(p, os.O_RDONLY), False) if not os.path.isdir(p) else None
        except OSError:
            return None
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o666)     # umask took the others' write bit: give it back
    except OSError:
        pass
    return fd, True


def _say_who(fd: int, command: str) -> None:
    info = {"pid": os.getpid(), "command": command,
            "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)


@contextmanager
def measuring(command: str, wait: bool = True,
              say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> Iterator[None]:
    """Hold the machine's measurement lock inside; wait for it (saying for whom), or
    raise Busy at once when `wait` is False."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    held: list[tuple[int, bool]] = []
    waited = False
    wanted = paths()
    try:
        for p in wanted:
            opened = _open(p)
            if opened is not None:
                held.append(opened)
                waited = _take(opened[0], p, wait, say) or waited
        if not held:
            where = f"{ENV}={wanted[0]}" if os.environ.get(ENV, "").strip() else " or ".join(DIRS)
            raise OSError(f"no measurement lock file could be opened ({where}): set {ENV} to a file "
                          "every measuring user can open")
        if waited:
            say("cxlbench: the other measurement finished; measuring")
        for fd, writable in held:
            if writable:
                _say_who(fd, command)
        _held = 1
        try:
            yield
        finally:
            _held = 0
            for fd, writable in held:
                if writable:
                    os.ftruncate(fd, 0)     # nobody holds it: a later reader finds no name
    finally:
        for fd, _ in held:
            os.close(fd)                    # the lock goes with the file (and with a crash)


def _take(fd: int, p: Path, wait: bool, say: Callable[[str], None]) -> bool:
    """flock one file, saying whom we wait for (True: we waited); Busy when told not
    to wait."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        pass
    who = holder_text(fd)
    if not wait:
        raise Busy(f"another measurement is running on this machine: {who} (lock {p}); "
                   f"without --no-wait this waits for it")
    say(f"cxlbench: waiting for {who} to finish: one measurement at a time (lock {p})")
    fcntl.flock(fd, fcntl.LOCK_EX)
    return True
