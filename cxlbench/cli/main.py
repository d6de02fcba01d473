"""`cxlbench` commands: a thin argparse layer over functions that tests call directly.

Bad input (unknown suite or tier, unusable results directory, a refusal from
the placement layer) ends with one line on stderr and exit status 2 — never a
traceback. Measured work is already on disk when such an error is printed.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

# numpy's and scipy's OpenBLAS start a thread per CPU at import: idle beside a timed
# loop, and where threads run short one it cannot start is raised as SIGINT.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from cxlbench.version import __version__
from cxlbench.cli import commands
from cxlbench.cli.argtypes import (fraction, machine_root, named, out_file, prose, results_dir, seconds, whole,
                                   words)
from cxlbench.cli.commands import UserError
from cxlbench.cli.preflight import REPORT_ONLY, cannot_start
from cxlbench.cli.streams import ENDING, prepare_streams, standing


DESCRIPTION = "cxlbench commands: measure memory tiers, report, compare and gate"   # -OO strips __doc__


def _known_errors() -> tuple[type[BaseException], ...]:
    """The errors a command reports in one line. Their modules are imported here, while
    an error is being handled, so a failure to import them (the very error, short of
    memory) leaves the ones that need no import."""
    errors: list[type[BaseException]] = [UserError]
    try:
        from cxlbench.results.store import ResultsError
        from cxlbench.runner.lock import Busy
        from cxlbench.runner.suite import SuiteError
        from cxlbench.topology.read import MachineReadError
        errors += [ResultsError, SuiteError, Busy, MachineReadError]
        from cxlbench.memory import PlacementError
        errors.append(PlacementError)
    except (ImportError, MemoryError, OSError):     # OSError: no file left to import with (ulimit -n)
        pass
    return tuple(errors)


def _short_of_memory(e: BaseException | None) -> bool:
    """A MemoryError, or a library that could not be mapped (ulimit -v, a cgroup limit),
    here or under the error raised from it (pandas re-raises numpy's failed import)."""
    while e is not None:
        if isinstance(e, MemoryError) or (isinstance(e, ImportError) and "failed to map segment" in str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line and exit 2, like every other bad input (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cxlbench", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"cxlbench {__version__}")
    p.add_argument("--root", default="/", type=machine_root,
                   help="read sysfs/procfs under this root (fixture trees)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def tiers(sp):
        sp.add_argument("--tier", action="append", default=[], metavar="KIND=SPEC",
                        help="declare a tier: cxl=node:1, ddr=node:0, nvme=/mnt/scratch (repeatable)")

    def normalize(sp):
        sp.add_argument("--normalize", metavar="sentinel|PROBES",
                        help="judge cases relative to their drift sentinel at their time: 'sentinel' "
                             "(every probe) or probes by name, e.g. dram_chase,triad (docs/gating.md "
                             "says where that is quieter than the raw value)")

    def no_wait(sp):
        sp.add_argument("--no-wait", action="store_true",
                        help="when another measurement holds the machine, exit 2 at once instead of "
                             "waiting for it (one measurement at a time: runner/lock.py)")

    t = sub.add_parser("topology", help="what memory tiers this machine has")
    t.add_argument("--json", action="store_true", help="the full machine record as JSON")
    tiers(t)
    t.set_defaults(func=lambda a: commands.topology(a.root, a.tier, a.json))

    d = sub.add_parser("doctor", help="check what moves figures (THP, governor, VM, ...); exit 0/1/2")
    d.set_defaults(func=lambda a: commands.doctor(a.root))

    r = sub.add_parser("run", help="measure a suite on this machine")
    r.add_argument("--suite", default="quick", help="suite name (suites/NAME.toml) or a .toml path")
    r.add_argument("--label", type=words, help="a name for this run, kept in run.json")
    r.add_argument("--out", type=results_dir, default="results", help="results directory (default: results/)")
    r.add_argument("--budget", type=seconds, help="time budget in seconds (overrides the suite's)")
    r.add_argument("--list", action="store_true", help="print the plan and exit")
    r.add_argument("--precision", metavar="FRACTION", type=fraction,
                   help="add repetitions until each median's confidence interval is within this "
                        "(e.g. 5%%), or the time budget ends")
    r.add_argument("--find-max", action="store_true",
                   help="training: the largest model config that fits each placement")
    tiers(r)
    r.add_argument("--no-report", action="store_true", help="don't render the HTML report")
    no_wait(r)
    r.add_argument("--config", metavar="NAME",
                   help="the hardware configuration's name, a folder above the machine's in the store "
                        "(auto: derived from the machine; a store URL derives one when not named)")
    r.set_defaults(func=lambda a: commands.run(
        a.suite, a.tier, a.label, a.out, a.root, a.budget, a.list, sys.argv, not a.no_report,
        a.find_max, a.precision, a.config, not a.no_wait))

    rp = sub.add_parser("report", help="render runs as one self-contained HTML file")
    rp.add_argument("runs", nargs="*", help="run directories (default: the newest under results/)")
    rp.add_argument("-o", "--out", type=out_file, help="output file (default: reports/<run_id>.html)")
    rp.add_argument("--thresholds", help="per-benchmark thresholds file (TOML)")
    rp.set_defaults(func=lambda a: commands.report(a.runs, a.out, a.thresholds))

    c = sub.add_parser("compare", help="runs side by side: ratios with confidence intervals, verdicts")
    c.add_argument("runs", nargs="+", help="run directories; the first is the baseline")
    c.add_argument("-o", "--out", type=out_file, help="also write the comparison as HTML")
    c.add_argument("--threshold", type=fraction, help="smallest change that matters, e.g. 5%% (default: 5%%)")
    c.add_argument("--thresholds", help="per-benchmark thresholds file (TOML)")
    normalize(c)
    c.set_defaults(func=lambda a: commands.compare(a.runs, a.out, a.threshold, a.thresholds, a.normalize))

    ab = sub.add_parser("ab", help="configurations measured interleaved in one session, judged round by round")
    ab.add_argument("file", nargs="?", help="the A/B file: suite, rounds, [[config]] tables")
    ab.add_argument("--judge", metavar="SESSION", help="judge a session measured before (its directory)")
    ab.add_argument("--out", type=results_dir, default="results", help="results directory (default: results/)")
    ab.add_argument("--label", type=words, help="a name for the session's runs")
    ab.add_argument("--threshold", type=fraction,
                    help="smallest change that matters (default: the file's, else 10%%)")
    no_wait(ab)
    ab.set_defaults(func=lambda a: commands.ab(a.file, a.judge, a.out, a.root, a.label, a.threshold, sys.argv,
                                               not a.no_wait))

    g = sub.add_parser("gate", help="exit 1 when a case regressed, 2 when the inputs are unusable")
    against = g.add_mutually_exclusive_group(required=True)
    against.add_argument("--baseline", type=named, help="the run to compare with")
    against.add_argument("--history", nargs="+", metavar="RESULTS", type=named,
                         help="the machine's history instead: its runs of the current run's suite; "
                              "exit 3 when a point is suspect and needs confirmation runs")
    g.add_argument("--current", type=named,
                   help="the run to judge (with --history: a run id, or latest, the default)")
    g.add_argument("--threshold", type=fraction, help="e.g. 5%% (default: the thresholds file's, else 5%%)")
    g.add_argument("--thresholds", help="per-benchmark thresholds file (TOML)")
    g.add_argument("--allow-missing", action="store_true",
                   help="cases missing from one side (with --history: points of the history missing from "
                        "the run) don't exit 2")
    g.add_argument("--confirm", nargs="*", metavar="RUN",
                   help="re-run flagged cases and fail only if they regress again; with --history: "
                        "the confirmation runs (directories, run ids, or `later`: every run after --current)")
    g.add_argument("--window", type=whole(10, "(runs of history the gate needs)"),
                   help="--history: runs in the reference (default 25, at least 10)")
    g.add_argument("--spacing", type=seconds, help="--history: seconds between confirmation runs (default 600)")
    g.add_argument("--ignore-identity", action="append", default=[], metavar="FIELD",
                   help="an identity field allowed to differ (e.g. kernel)")
    g.add_argument("--markdown", type=out_file, help="write a markdown summary here (for a CI job page)")
    g.add_argument("--json", type=out_file, help="write the machine-readable verdict here")
    g.add_argument("--junit", type=out_file, help="write JUnit XML here")
    g.add_argument("--exit-undecided", action="store_true",
                   help="--baseline: exit 3 when nothing was slower but some case could not have shown its "
                        "threshold (default: exit 0, and the summary says undecided)")
    normalize(g)
    g.set_defaults(func=_gate)

    h = sub.add_parser("history", help="a machine's runs over time: trends, change points, environment changes")
    h.add_argument("results", nargs="*", type=named, help="results directories (default: results/)")
    h.add_argument("--machine", help="the machine's name, where the runs hold several")
    h.add_argument("--suite", help="the suite, where the runs hold several")
    h.add_argument("-o", "--out", type=out_file, help="write the trend report (HTML) here")
    h.add_argument("--min-change", type=fraction, help="the smallest step called a change point (default 5%%)")
    h.add_argument("--accept", metavar="RUN", help="mark RUN (a run id or latest) as the first of a new normal")
    h.add_argument("--reason", type=prose, help="why the change is accepted (with --accept)")
    normalize(h)
    h.set_defaults(func=lambda a: commands.history(a.results, a.machine, a.suite, a.out, a.accept, a.reason,
                                                   a.min_change, a.normalize))

    cal = sub.add_parser("calibrate", help="an A/A pair of runs: noise floor per case, gate false-positive rate")
    cal.add_argument("run_a")
    cal.add_argument("run_b")
    cal.add_argument("--write-thresholds", type=out_file, help="write suggested thresholds (TOML) to this new file (an existing one, "
                                                               "perhaps tuned by hand, is never overwritten)")
    cal.set_defaults(func=lambda a: commands.calibrate(a.run_a, a.run_b, a.write_thresholds))

    e = sub.add_parser("export", help="write a run in another tool's format")
    e.add_argument("run")
    e.add_argument("--format", default="pytest-benchmark",
                   help="pytest-benchmark (default), customBiggerIsBetter or customSmallerIsBetter "
                        "(github-action-benchmark: the points of that direction)")
    e.add_argument("-o", "--out", type=out_file, required=True, help="the file to write; - for standard output")
    e.set_defaults(func=lambda a: commands.export(a.run, a.out, a.format))

    from cxlbench.cli import advise as advise_cli
    advise_cli.add_parser(sub)

    from cxlbench.cli import publish as publish_cli; publish_cli.add_parser(sub)  # noqa: E702
    from cxlbench.cli import fleet_cli
    fleet_cli.add_parser(sub)
    for command in (r, rp, c, g, h):       # these read or write a store, which may be a URL
        fleet_cli.store_options(command)
    return p


#: gate options that one way of gating uses and the other would ignore
_GATE_ONLY = {"history": {"window": "--window", "spacing": "--spacing"},
              "baseline": {"thresholds": "--thresholds", "ignore_identity": "--ignore-identity", "exit_undecided": "--exit-undecided"}}


def _gate(a: argparse.Namespace) -> int:
    mode, other = ("history", "baseline") if a.history else ("baseline", "history")
    given = [flag for name, flag in _GATE_ONLY[other].items() if getattr(a, name) not in (None, False, [])]
    if given:
        raise commands.UserError(f"{given[0]} applies to gate --{other}, not --{mode}")
    if a.history:
        return commands.gate_history(a.history, a.current, a.confirm, a.threshold, a.window, a.spacing, a.json,
                                     a.normalize, a.markdown, a.junit, a.allow_missing)
    if a.current is None:
        raise commands.UserError("gate --baseline needs --current")
    if a.confirm:
        raise commands.UserError("gate --baseline: --confirm takes no runs (it re-measures the flagged cases)")
    return commands.gate(a.baseline, a.current, a.threshold, a.thresholds, a.allow_missing, a.confirm is not None,
                         a.ignore_identity, a.markdown, a.json, a.junit, a.root, a.normalize, a.exit_undecided)


def main(argv: list[str] | None = None) -> int:
    prepare_streams()
    cannot = cannot_start()        # before the parser: its path types resolve against the cwd
    if cannot:
        print(f"cxlbench: error: {cannot}", file=sys.stderr)
        return 2
    with standing() as stop:
        try:
            code = _command(parser().parse_args(argv))     # argument types import the store
            # a run stopped by SIGTERM keeps what finished and ends as the signal says
            return 128 + stop.signal if stop.signal else code
        except _known_errors() as e:
            print(f"cxlbench: error: {e}", file=sys.stderr)
            return 2
        except OSError as e:                    # a file named on the command line that cannot be
            print(f"cxlbench: error: {e.filename or ''}{': ' if e.filename else ''}"   # read or written
                  f"{e.strerror or e}", file=sys.stderr)
            return 2
        except (MemoryError, ImportError) as e:
            if isinstance(e, ModuleNotFoundError) and e.name in REPORT_ONLY:
                print(f"cxlbench: error: a report needs {e.name}, not installed for {sys.executable}: "
                      f"`pip install {e.name}`, or pass --no-report; runs finished so far are on disk",
                      file=sys.stderr)
                return 2
            if not _short_of_memory(e):
                raise
            print(f"cxlbench: error: out of memory ({type(e).__name__}{': ' if str(e) else ''}{e}): the address "
                  "space or memory limit of this process (ulimit -v, the container's) is too small; runs "
                  "finished so far are on disk", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            name = f" by {signal.Signals(stop.signal).name}" if stop.signal not in (None, signal.SIGINT) else ""
            print(f"cxlbench: interrupted{name}", file=sys.stderr)
            return 128 + (stop.signal or signal.SIGINT)


def _command(args: argparse.Namespace) -> int:
    if getattr(args, "store_option", None):
        from cxlbench.results.location import configure, is_url
        named = [v for key, value in vars(args).items() if key != "store_option"
                 for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]
        if not any(is_url(v) for v in named):
            raise UserError("--store-option configures a store named by URL (s3://...), and this command "
                            "names none: it would be ignored")
        configure(args.store_option)
    return int(args.func(args) or 0)


def entry() -> None:
    """The console script: main(), then the exit. A command stopped by a signal ends
    with that signal's status, and ignores the ones after it from here: the
    interpreter's exit resets Python's handlers to the default, and a last Ctrl-C had
    killed it there (status -2, not 130). Only the exiting process does this: main()
    called in another program leaves its dispositions as they were."""
    try:
        code = main()
    except KeyboardInterrupt:          # one that came as main() put its handlers back
        code = 128 + signal.SIGINT
    if code > 128:
        for s in ENDING:
            signal.signal(s, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    entry()
