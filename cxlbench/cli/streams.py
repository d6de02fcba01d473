"""What a command stands on besides its arguments: its standard streams, its current
directory, and the signals that stop it. A CI job's log reader may leave (`| head`),
its disk may fill, a scheduler may send SIGTERM: none of these should lose what the
command measured or turn its verdict into another exit status.

    with standing() as stop:      # in main(): the streams kept, SIGTERM/SIGHUP as Ctrl-C
        ...
    stop.signal                   # the signal that stopped the command, if one did
"""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from dataclasses import dataclass


#: what ends a stream for good besides its reader leaving (a non-blocking pipe's EAGAIN
#: does not): a full disk, an I/O error
GONE_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EDQUOT)


class ReaderMayLeave:
    """A stream whose reader may go: what is written after that is dropped, and the
    command goes on to write the files it was asked for and to exit with its verdict.
    With `notes_only` (stderr, which carries progress and notes) a full disk drops it too
    (2>/dev/full), since no note is worth the measurement; stdout's output is what the
    user asked for, so only a reader leaving drops it."""

    def __init__(self, stream, notes_only: bool = False, name: str = "standard output"):
        self._stream = stream
        self._notes_only = notes_only
        self._name = name
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except OSError as e:
                self._leave_or_raise(e)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except OSError as e:
                self._leave_or_raise(e)

    def _leave_or_raise(self, e: OSError) -> None:
        ends = isinstance(e, BrokenPipeError) or (self._notes_only and e.errno in GONE_ERRNOS)
        if not ends:       # named: "No space left on device" alone reads as the results' disk
            raise OSError(e.errno, e.strerror, self._name) if e.filename is None else e
        self._leave()

    def _leave(self) -> None:
        self.gone = True
        try:      # what is still buffered is flushed at exit: into nothing, not a closed pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
        except (OSError, ValueError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _any_encoding(*streams) -> None:
    """A character the terminal's encoding lacks (·, ≥, × under LANG=C or
    PYTHONIOENCODING=ascii) is printed as '?', not a traceback."""
    for stream in streams:
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def prepare_streams() -> None:
    """Before the arguments are parsed (argparse prints too): a stream the shell closed
    (`>&-`) writes into nothing, and any stream prints any character."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))
    _any_encoding(sys.stdout, sys.stderr)


def stdout_closed() -> bool:
    """Whether the shell closed stdout (prepare_streams put /dev/null in its place; a
    `> /dev/null` of the user's own is named '<stdout>'): a command whose output is the
    point (`export -o -`) refuses to write it into nothing."""
    return getattr(sys.stdout, "name", None) == os.devnull


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taken the way Ctrl-C is: what finished is kept, the run marked
    partial."""


@dataclass
class Stop:
    signal: int | None = None


#: the signals a scheduler, a CI runner, a closed terminal or Ctrl-C send to end a command;
#: a second one while the first is handled is let go (a second Ctrl-C had broken off the
#: run's closing and left it 'running', its samples unmerged)
ENDING = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@contextlib.contextmanager
def standing():
    """stdout and stderr kept going when their reader leaves, and SIGTERM and SIGHUP
    raised as Ctrl-C is (KeyboardInterrupt), so the run's interrupt path keeps what
    finished; everything put back after."""
    stop = Stop()
    streams = sys.stdout, sys.stderr
    sys.stdout = ReaderMayLeave(streams[0])
    sys.stderr = ReaderMayLeave(streams[1], notes_only=True, name="standard error")

    def stopped(signum, _frame):
        if stop.signal is not None:     # a second one (a second Ctrl-C, TERM then HUP): the first is
            os.write(2, b"cxlbench: still writing what finished; Ctrl-\\ abandons it\n")   # being handled
            return
        stop.signal = signum
        raise Stopped()

    before = {}
    try:
        for s in ENDING:
            if signal.getsignal(s) is not signal.SIG_IGN:     # nohup means nohup
                before[s] = signal.signal(s, stopped)
    except ValueError:                  # not the main thread (a test's): no handlers to set
        pass
    try:
        yield stop
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        sys.stdout, sys.stderr = streams
