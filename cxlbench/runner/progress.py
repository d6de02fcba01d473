"""A progress line with the time left, estimated from the plan and corrected by
how the cases so far compared with their estimates."""
from __future__ import annotations

import os
import shutil
import sys
import time


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _columns(stream) -> int:
    """The width of the terminal the stream writes to (stderr's, with stdout piped to tee)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size((120, 24)).columns


class Progress:
    def __init__(self, estimates: list[float], stream=None):
        self.estimates = estimates
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.done_est = 0.0
        self.index = 0

    def eta(self) -> float:
        elapsed = time.monotonic() - self.start
        left_est = sum(self.estimates[self.index:])
        speed = elapsed / self.done_est if self.done_est > 0 else 1.0
        return left_est * speed

    def begin(self, label: str) -> None:
        if self.tty:
            n = len(self.estimates)
            width = 24
            filled = int(width * self.index / max(n, 1))
            bar = "#" * filled + "." * (width - filled)
            line = f"[{bar}] {self.index}/{n}  {label[:60]:<60}  left ~{_clock(self.eta())}"
            # one terminal line at most: a line that wraps is not redrawn by \r, it piles up
            cols = _columns(self.stream)
            self.stream.write("\r\033[K" + line[:max(cols - 1, 20)])
            self.stream.flush()

    def end(self, label: str, status: str, seconds: float, reason: str = "") -> None:
        self.done_est += self.estimates[self.index]
        self.index += 1
        if not self.tty:
            tail = f" ({reason})" if reason else ""
            self.stream.write(f"[{self.index}/{len(self.estimates)}] {status:7} {seconds:6.1f}s  {label}{tail}\n")
        elif status != "ok":
            self.stream.write(f"\r\033[K{status}: {label}: {reason}\n")
        self.stream.flush()

    def add(self, estimate: float) -> None:
        """One more step than planned (an adaptive repetition)."""
        self.estimates.append(estimate)

    def drop(self) -> None:
        """A planned step that will not run (its case ended in an earlier process)."""
        self.estimates[self.index] = 0.0
        self.index += 1

    def close(self) -> None:
        if self.tty:
            self.stream.write(f"\r\033[Kdone in {_clock(time.monotonic() - self.start)}\n")
            self.stream.flush()
