"""`cxlbench` commands: a thin argparse layer over functions that tests call directly.

Bad input (unknown suite or tier, unusable results directory, a refusal from
the placement layer) ends with one line on stderr and exit status 2 — never a
traceback. Measured work is already on disk when such an error is printed.
"""
from __future__ import annotations

import argparse
import sys

from cxlbench import __version__
from cxlbench.cli import commands
from cxlbench.cli.commands import UserError


def _known_errors() -> tuple[type[BaseException], ...]:
    from cxlbench.results.store import ResultsError
    from cxlbench.runner.suite import SuiteError
    errors: list[type[BaseException]] = [UserError, ResultsError, SuiteError]
    try:
        from cxlbench.memory import PlacementError
        errors.append(PlacementError)
    except ImportError:
        pass
    return tuple(errors)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cxlbench", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"cxlbench {__version__}")
    p.add_argument("--root", default="/", help="read sysfs/procfs under this root (fixture trees)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def tiers(sp):
        sp.add_argument("--tier", action="append", default=[], metavar="KIND=SPEC",
                        help="declare a tier: cxl=node:1, ddr=node:0, nvme=/mnt/scratch (repeatable)")

    t = sub.add_parser("topology", help="what memory tiers this machine has")
    t.add_argument("--json", action="store_true", help="the full machine record as JSON")
    tiers(t)
    t.set_defaults(func=lambda a: commands.topology(a.root, a.tier, a.json))

    d = sub.add_parser("doctor", help="check what moves figures (THP, governor, VM, ...); exit 0/1/2")
    d.set_defaults(func=lambda a: commands.doctor(a.root))

    r = sub.add_parser("run", help="measure a suite on this machine")
    r.add_argument("--suite", default="quick", help="suite name (suites/NAME.toml) or a .toml path")
    r.add_argument("--label", help="a name for this run, kept in run.json")
    r.add_argument("--out", default="results", help="results directory (default: results/)")
    r.add_argument("--budget", type=float, help="time budget in seconds (overrides the suite's)")
    r.add_argument("--list", action="store_true", help="print the plan and exit")
    tiers(r)
    r.set_defaults(func=lambda a: commands.run(
        a.suite, a.tier, a.label, a.out, a.root, a.budget, a.list, sys.argv))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except _known_errors() as e:
        print(f"cxlbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cxlbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
