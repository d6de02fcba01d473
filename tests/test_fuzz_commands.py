"""A fuzzer for command lines: every command and subcommand the parser knows, its own
options (read from the parser, so a new option is fuzzed the day it is added) with
values a person might type — negative, zero, NaN, 300%, words, paths that do not
exist, a real run, a suite — called in-process. Each must exit 0 (or the command's
own verdict codes: doctor 1, gate 1 and 3, fleet 1) or 2 with one line; never a
traceback. Nothing here measures: `run` is always `run --list`, no valid A/B file is
ever offered, gate never gets --confirm, and PATH is empty, so no scheduler is found.
The corpus (tests/fuzz_corpus/commands.txt) holds the issue's bad command lines and
every one found, each with its expected exit and words of its line."""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from cxlbench.cli.main import parser
from cxlbench.runner.run import RunConfig, run
from fuzzing import CORPUS, REPO, call, problems

VERDICTS = {"doctor": (0, 1, 2), "gate": (0, 1, 2, 3), "fleet status": (0, 1, 2), "fleet run": (0, 1, 2)}
NEVER = {"--confirm", "-h", "--help", "--version"}        # measures, or only prints help
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def commands(p: argparse.ArgumentParser | None = None, prefix: tuple[str, ...] = ()) -> dict[tuple, argparse.ArgumentParser]:
    """Every (sub)command path and its parser: ("run",), ("fleet", "report") ..."""
    p = p or parser()
    out = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = commands(sub, prefix + (name,))
                out.update(nested or {prefix + (name,): sub})
    return out


COMMANDS = commands()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Paths worth typing: a real (tiny) run, a suite, a bad suite, a file, a folder."""
    top = tmp_path_factory.mktemp("world")
    suite = top / "tiny.toml"
    suite.write_text('repetitions = 2\n[[benchmark]]\nname = "fakes.family"\n')
    outcome = run(RunConfig(str(suite), out=str(top / "results"), command=["fuzz"]))
    (top / "file.txt").write_text("not a run\n")
    (top / "binary.toml").write_bytes(b"\xe4\x00\xff" * 64)            # an upload gone wrong
    (top / "thresholds-flat.toml").write_text("benchmarks = 3\n")
    (top / "session-list.json").write_text("[]")
    (top / "session-nothing.json").write_text("{}")
    (top / "empty").mkdir()
    (top / "bin").mkdir()                    # PATH: no sbatch, kubectl or anything else
    return {"RUN": str(outcome.path), "RESULTS": str(top / "results"), "SUITE": str(suite),
            "BAD_SUITE": str(CORPUS / "01-bandwidth-threads-zero.toml"), "FILE": str(top / "file.txt"),
            "DIR": str(top / "empty"), "BIN": str(top / "bin"), "TOP": str(top),
            "BINARY": str(top / "binary.toml"), "FLAT_THRESHOLDS": str(top / "thresholds-flat.toml"),
            "SESSION_LIST": str(top / "session-list.json"), "SESSION_NOTHING": str(top / "session-nothing.json")}


WORDS = ["", "x", "-1", "0", "1", "2", "3", "10", "25", "nan", "inf", "-inf", "5%", "300%", "-5%", "abc",
         "1e999", "0.5", "-0.5", "1.5", " ", "quick", "latest", "a=b", "cxl=node:1", "nvme=/nonexistent",
         "ddr=node:7", "node[01-02]", "=", "x=0", "2Mi=2Gi", "01:00:00", "sentinel", "dram_chase", "bogus",
         "tiny", "h100-sxm", "/nonexistent/path", "s3://", "http://", "kernel"]
PATHS = ["RUN", "RESULTS", "SUITE", "BAD_SUITE", "FILE", "DIR"]


def value(data, world) -> str:
    v = data.draw(st.sampled_from(WORDS + PATHS))
    return world[v] if v in world else v


def argv_for(data, world) -> tuple[tuple, list[str]]:
    path = data.draw(st.sampled_from(sorted(COMMANDS)))
    sub = COMMANDS[path]
    args: list[str] = []
    if data.draw(st.booleans()):
        args += ["--root", data.draw(st.sampled_from(["/", "/nonexistent", world["FILE"], world["DIR"],
                                                      str(REPO / "tests/fixtures/two_socket_cxl")]))]
    args += list(path)
    options = [a for a in sub._actions if a.option_strings and not NEVER & set(a.option_strings)]
    for action in data.draw(st.lists(st.sampled_from(options), max_size=4, unique_by=id)) if options else []:
        flag = action.option_strings[-1]
        if action.nargs == 0:
            args.append(flag)
        elif action.nargs in ("+", "*") or isinstance(action.nargs, int):
            n = action.nargs if isinstance(action.nargs, int) else data.draw(st.integers(1 if action.nargs == "+" else 0, 2))
            args += [flag] + [value(data, world) for _ in range(n)]
        else:
            args += [flag, value(data, world)]
    for action in sub._actions:
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            n = {"?": data.draw(st.integers(0, 1)), "*": data.draw(st.integers(0, 2)),
                 "+": data.draw(st.integers(1, 2)), None: 1}.get(action.nargs, action.nargs)
            args += [value(data, world) for _ in range(n)]
    if path == ("run",):
        args.append("--list")                 # never measure
    return path, args


@settings(max_examples=500, **SETTINGS)
@given(data=st.data())
def test_any_command_line_ends_with_its_exit_code_and_at_most_one_line(data, world, monkeypatch):
    monkeypatch.setenv("PATH", world["BIN"])
    path, argv = argv_for(data, world)
    end = call(argv, cwd=Path(world["TOP"]))
    event(f"{' '.join(path)}: exit {end.code}")
    found = problems(end, VERDICTS.get(" ".join(path), (0, 2)))
    assert not found, f"{found}\n$ cxlbench {shlex.join(argv)}"


def _corpus() -> list[tuple[int, str, str]]:
    rows = []
    for line in (CORPUS / "commands.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            code, args, words = (x.strip() for x in line.split("|"))
            rows.append((int(code), args, words))
    return rows


@pytest.mark.parametrize("code, args, words", _corpus(), ids=lambda x: str(x)[:40])
def test_the_corpus_of_bad_command_lines_each_ends_as_it_says(code, args, words, world, monkeypatch):
    monkeypatch.setenv("PATH", world["BIN"])
    argv = [world.get(a, a) for a in shlex.split(args)]
    end = call(argv, cwd=Path(world["TOP"]))
    assert not problems(end, (code,)), (args, problems(end, (code,)), end.err)
    assert words in end.err, (args, end.err)


def test_a_real_invocation_prints_one_line_and_exits_2(tmp_path):
    """The console script itself, once: what the in-process calls stand for."""
    r = subprocess.run([sys.executable, "-m", "cxlbench.cli.main", "history", "--min-change", "xyz"],
                       cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "--min-change" in r.stderr and "Traceback" not in r.stderr


def test_a_real_invocation_of_a_bad_suite_names_file_table_and_key(tmp_path):
    r = subprocess.run([sys.executable, "-m", "cxlbench.cli.main", "run", "--list", "--suite",
                        str(CORPUS / "01-bandwidth-threads-zero.toml")],
                       cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "01-bandwidth-threads-zero.toml, [[benchmark]] 1 (bandwidth): threads = [0]" in r.stderr
