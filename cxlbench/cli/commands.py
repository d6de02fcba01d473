"""Each command is a function with explicit parameters (asv's style): the
argument parser calls them, and so do the tests."""
from __future__ import annotations

import json
import sys
from pathlib import Path


class UserError(Exception):
    """Input a command cannot use; the message is the one line the user sees."""


def _env(root: str, declarations: list[str]):
    from cxlbench.runner.run import build_env
    try:
        return build_env(root, declarations)
    except ValueError as e:           # a tier declaration the machine cannot honour
        raise UserError(str(e)) from None


def topology(root: str = "/", declarations: list[str] = (), as_json: bool = False) -> int:
    from cxlbench.topology import format_topology, machine_to_dict
    env = _env(root, list(declarations))
    tiers = list(env.tiers.values())
    if as_json:
        from dataclasses import asdict
        doc = {"machine": machine_to_dict(env.machine), "tiers": [asdict(t) for t in tiers],
               "initiators": [asdict(i) for i in env.initiators.values()]}
        print(json.dumps(doc, indent=1))
    else:
        print(format_topology(env.machine, tiers))
    return 0


def doctor(root: str = "/") -> int:
    from cxlbench.topology import doctor_exit_code, read_machine, run_checks
    checks = run_checks(read_machine(root))
    for check in checks:
        print(check.show())
    return doctor_exit_code(checks)


def run(suite: str = "quick", declarations: list[str] = (), label: str | None = None,
        out: str = "results", root: str = "/", budget: float | None = None,
        list_only: bool = False, command: list[str] = ()) -> int:
    from cxlbench.cli.summary import tier_summary
    from cxlbench.results.store import load_run
    from cxlbench.runner.run import RunConfig, plan_suite, run as run_suite
    from cxlbench.runner.suite import load_suite

    out_path = Path(out)
    if out_path.exists() and not out_path.is_dir():
        raise UserError(f"--out {out} is a file, not a results directory")
    if list_only:
        env = _env(root, list(declarations))
        for p in plan_suite(load_suite(suite), env):
            print(f"{'skip' if p.skip else 'run ':4}  ~{p.estimate_s:5.1f}s  {p.case.case_id}"
                  + (f"  ({p.skip})" if p.skip else ""))
        return 0
    try:
        outcome = run_suite(RunConfig(suite, list(declarations), label, out, root,
                                      command=list(command)))
    except ValueError as e:
        raise UserError(str(e)) from None
    run_ = load_run(outcome.path)
    print(tier_summary(run_.samples))
    cases = run_.cases()
    for status in ("skipped", "failed"):
        n = int((cases.status == status).sum())
        if n:
            print(f"{n} case(s) {status}; reasons are in run.json and the report")
    print(f"run {outcome.status}: {outcome.path}")
    return 0 if outcome.status == "complete" else 3
