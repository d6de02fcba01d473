"""What the fuzz tests share: writing TOML (the tests write suites the way a person
would, nan and inf included), calling a command in-process the way the console
script does, and judging how it ended.

A command may end in exactly two ways on bad input: exit 0 having done its job
(for `run --list`: a plan whose every estimate is a finite number ≥ 0), or exit 2
with one line on stderr saying what is wrong. A traceback, any other exception, a
second line, or a NaN or negative estimate is a finding: its input goes into
tests/fuzz_corpus so it is tried on every run from then on.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cxlbench.cli.main import main

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
FIXTURE = str(REPO / "tests" / "fixtures" / "two_socket_cxl")
ESTIMATE = re.compile(r"^(?:run |skip)  ~\s*(\S+)s  ", re.M)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)          # a TOML basic string is JSON's, for what we write
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def suite_text(top: dict[str, Any], tables: list[dict[str, Any]]) -> str:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in top.items()]
    for t in tables:
        lines.append("\n[[benchmark]]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in t.items()]
    return "\n".join(lines) + "\n"


@dataclass
class Ending:
    code: int | None
    out: str
    err: str
    raised: BaseException | None = None

    def lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def call(argv: list[str], cwd: Path | None = None) -> Ending:
    """main(argv) in this process (the console script's own path, without the cost of a
    new interpreter), stdout and stderr caught, any exception kept."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:            # argparse: --help, or a bad argument
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
            except BaseException as e:         # noqa: BLE001 — a traceback is the finding
                return Ending(None, out.getvalue(), err.getvalue(), e)
    finally:
        os.chdir(here)
    return Ending(code, out.getvalue(), err.getvalue())


def problems(end: Ending, allowed: tuple[int, ...] = (0, 2)) -> list[str]:
    """What is wrong with how a command ended (empty: nothing)."""
    if end.raised is not None:
        return [f"raised {type(end.raised).__name__}: {end.raised}"]
    found = []
    if end.code not in allowed:
        found.append(f"exit {end.code}, not one of {allowed}")
    if end.code == 2 and len(end.lines()) != 1:
        found.append(f"exit 2 with {len(end.lines())} lines on stderr: {end.err!r}")
    if "Traceback" in end.err:
        found.append("a traceback on stderr")
    for text in ESTIMATE.findall(end.out):
        value = float(text)
        if not (math.isfinite(value) and value >= 0):
            found.append(f"estimate {text}s")
    return found
