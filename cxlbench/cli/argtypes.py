"""What a command-line value may be, as argparse types: a bad one is one line and
exit 2 before the command starts (argparse turns ArgumentTypeError into that line,
naming the option), the same rule a suite's values follow (benchmarks.spec)."""
from __future__ import annotations

import argparse
import math
from typing import Callable


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def fraction(text: str) -> str:
    """A fraction as the analysis takes it ("5%" or 0.05, within (0, 1)); kept as the
    text written, so the command says it back as the user wrote it."""
    from cxlbench.units import parse_fraction
    try:
        parse_fraction(text, "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction between 0 and 100% "
                                         f"(write 0.05 or 5%)") from None
    return text


def words(text: str) -> str:
    """A label kept in a run: UTF-8 on one line, without control characters but tabs.
    A byte the terminal could not decode (a Latin-1 é in a UTF-8 shell) was stored as
    a lone surrogate, and every report, page and JSON file written from that run after
    it ended in a traceback; a control character or a line end broke the TOML that
    calibrate writes with the label in a comment. A label is repeated in every table
    and chart of every page that shows the run: 200 kB of it made a 16 MB compare page."""
    text = _text(text, "\t")
    if len(text) > LABEL_MAX:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is {len(text):,} characters: a label names a run in "
                                         f"every table; give at most {LABEL_MAX} (a longer story goes in "
                                         "history --accept --reason)")
    return text


#: the longest label: a commit subject and a machine name with room to spare
LABEL_MAX = 200


def prose(text: str) -> str:
    """A reason kept in a marker: words() that may run over lines (a commit message)."""
    return _text(text, "\t\n\r")


def _text(text: str, allowed: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{_shown(text.encode('utf-8', 'backslashreplace').decode())} is not UTF-8 "
                                         f"text (a byte the terminal's encoding cannot read)") from None
    if any((ord(c) < 32 and c not in allowed) or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"{_shown(text)} holds a control character")
    return text


def _shown(text: str, most: int = 60) -> str:
    """The text quoted for an error line, cut short: the line stays one line a reader sees."""
    return repr(text if len(text) <= most else text[:most] + "…")


def named(text: str) -> str:
    """A run, path or name that is not empty: `--current "$SUSPECT"` with SUSPECT unset
    had judged the newest run instead, silently, and a CI job's verdict with it."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset shell variable?)")
    return text


def whole(least: int, why: str = "", most: int | None = None) -> Callable[[str], int]:
    """A whole number ≥ least (and ≤ most, past which a value is a typo, not a machine)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{text!r}: at least {least}{' ' + why if why else ''}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"{text!r}: at most {most:,}{' ' + why if why else ''}")
        return value
    parse.__name__ = "whole number"
    return parse


def out_file(text: str) -> str:
    """A file to write: not empty, not a folder (the command would fail after its work)."""
    import os
    if not text.strip() or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a file to write (a folder or nothing)")
    folder = os.path.dirname(text)
    while folder and not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if folder and not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {folder} is a file, not a folder")
    if text == "-":                                 # standard output
        from cxlbench.cli.streams import stdout_closed
        if stdout_closed():
            raise argparse.ArgumentTypeError("'-' is standard output, which is closed here: name a file")
        return text
    from cxlbench.results.store import unwritable
    cannot = unwritable(text)
    if cannot:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {cannot}")
    real = os.path.realpath(text)        # a link into a run writes into the run
    run = run_above(real)
    if run:
        raise argparse.ArgumentTypeError(f"{text!r} is inside the run {run}: write elsewhere (a run's folder "
                                         f"holds what was measured, never a command's output)")
    record = store_record(real)
    if record:
        raise argparse.ArgumentTypeError(f"{text!r} is {record}: write elsewhere (it cannot be measured again)")
    return text


def store_record(path: str) -> str | None:
    """What a results store keeps beside its runs that `path` would overwrite: an A/B
    session's pairing, the accepted-change markers, a fleet's scheduler record."""
    from pathlib import Path
    from cxlbench.results.store import AB_JSON, FLEET_FOLDER, MARKERS
    p = Path(path)
    # only where a store keeps one: a report a user names ab.json elsewhere is theirs to write
    if p.name == AB_JSON and p.exists():
        return f"an A/B session's record ({AB_JSON})"
    if p.name == MARKERS and p.exists():
        return f"a history's accepted changes ({MARKERS})"
    if p.parent.name == FLEET_FOLDER and p.suffix == ".json" and p.exists():
        return f"a fleet's record ({FLEET_FOLDER}/)"
    return None


def results_dir(text: str) -> str:
    """Where runs are written: a folder (made if missing), never inside another run."""
    import os
    if not text.strip():
        raise argparse.ArgumentTypeError("'' is not a folder for results (give one, e.g. results)")
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a results directory")
    run = run_above(os.path.join(os.path.abspath(text), "x"))
    if run:
        raise argparse.ArgumentTypeError(f"{text!r} is inside the run {run}: runs go in a results folder "
                                         "of their own (history would never find one nested in a run)")
    return text


def run_above(path: str) -> str | None:
    """The run folder (one holding run.json) that `path` would be written into, if any."""
    import os
    from cxlbench.results.store import RUN_JSON
    folder = os.path.dirname(path)
    while True:
        if os.path.isfile(os.path.join(folder, RUN_JSON)):
            return folder
        up = os.path.dirname(folder)
        if up == folder:
            return None
        folder = up


def machine_root(text: str) -> str:
    """Where sysfs and procfs are read: / or a fixture tree holding sys/. Anything
    else would read as a machine with nothing in it, and every command would say so
    with exit 0. "/" (the default, which argparse passes through here too) is this
    machine, read as it is: report, compare and the rest need no sysfs at all."""
    import os
    if text == "/":
        return text
    if not os.path.isdir(os.path.join(text or "", "sys")):
        raise argparse.ArgumentTypeError(f"{text!r} holds no sys/ tree (give / or a fixture tree "
                                         f"with sys/ and proc/)")
    return text


_SLURM_TIME = __import__("re").compile(r"^(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2})$")


def slurm_time(text: str) -> str:
    """A Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS), checked
    here rather than by sbatch on every node's job."""
    if not _SLURM_TIME.match(text.strip()) or not any(c in "123456789" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm time limit (e.g. 30, 01:00:00, 1-00:00:00)")
    return text.strip()
