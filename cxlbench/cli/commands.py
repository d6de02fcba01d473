"""Each command is a function with explicit parameters (asv's style): the
argument parser calls them, and so do the tests."""
from __future__ import annotations

import json
import re
import sys
from functools import partial
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
        if not env.machine.nodes:
            from cxlbench.topology.nodes import NO_NODES
            print(f"\nno host tiers: {NO_NODES}")
    return 0


def doctor(root: str = "/") -> int:
    from cxlbench.topology import doctor_exit_code, read_machine, run_checks
    checks = run_checks(read_machine(root))
    for check in checks:
        print(check.show())
    return doctor_exit_code(checks)


def run(suite: str = "quick", declarations: list[str] = (), label: str | None = None,
        out: str = "results", root: str = "/", budget: float | None = None,
        list_only: bool = False, command: list[str] = (), with_report: bool = True,
        find_max: bool = False, precision: str | None = None, configuration: str | None = None,
        wait: bool = True) -> int:
    from cxlbench.cli.tier_table import tier_summary, warning_lines
    from cxlbench.results.schema import OK
    from cxlbench.results.store import load_run
    from cxlbench.runner.run import RunConfig, prepare, run as run_suite

    from cxlbench.fleet.configuration import derive
    out_path = Path(out)
    if out_path.exists() and not out_path.is_dir():
        raise UserError(f"--out {out} is a file, not a results directory")
    if with_report and not list_only:
        _report_writable()
    from cxlbench.analysis import ThresholdError
    from cxlbench.analysis.reduction import case_precision
    from cxlbench.analysis.thresholds import parse_fraction
    from cxlbench.benchmarks.tails import FAR_TAIL
    try:
        target = parse_fraction(precision, "--precision") if precision is not None else None
    except ThresholdError as e:
        raise UserError(str(e)) from None
    config = RunConfig(suite, list(declarations), label, out, root, command=list(command),
                       time_budget_s=budget, find_max=find_max, precision=target,
                       precision_of=partial(case_precision, skip=FAR_TAIL), configuration=configuration,
                       configuration_of=derive, wait=wait)
    try:
        if list_only:                 # the plan `run` would measure, planned the same way
            shown = set()
            env, planned = prepare(config)
            for p in planned:
                if id(p.spec) not in shown:   # each table's settings, defaults filled in
                    shown.add(id(p.spec))
                    print(f"# {p.family}: {p.spec.text()}")
                print(f"{'skip' if p.skip else 'run ':4}  ~{p.estimate_s:5.1f}s  {p.case.case_id}"
                      + (f"  ({p.skip})" if p.skip else ""))
            print(sentinel_plan(config))
            if env.machine.environment.allowed_cpus:
                print(_restricted(env.machine.environment.allowed_cpus))
            return 0
        outcome = run_suite(config)
    except ValueError as e:           # a tier declaration the machine cannot honour
        raise UserError(str(e)) from None
    run_ = load_run(outcome.path)
    print(tier_summary(run_.samples, run_.meta))
    cases = run_.cases()
    cases = cases[cases.benchmark != "sentinel"]          # the drift probes are not the suite's cases
    for status in ("skipped", "failed"):
        n = int((cases.status == status).sum())
        if n:
            print(f"{n} case(s) {status}; reasons are in run.json and the report")
    for line in warning_lines(run_.meta):
        print(line)
    allowed = (run_.meta.get("environment") or {}).get("allowed_cpus")
    if allowed:
        print(_restricted(allowed))
    nothing = outcome.status == "complete" and not any(r.status == OK for r in outcome.results)
    print(f"run {outcome.status}{', nothing measured' if nothing else ''}: {outcome.path}")
    if outcome.stored:
        print(f"stored: {outcome.stored}")
    if with_report:
        from cxlbench.report import render
        print(f"report: {render([outcome.path])}")
    if outcome.stored and outcome.status == "complete":
        _remove_staging(Path(outcome.path))
    if nothing:      # every case failed or was skipped: a CI job must not pass on a run that measured nothing
        from cxlbench.results.schema import why_none_measured
        ended = why_none_measured([(r.status, r.reason) for r in outcome.results])
        print(f"cxlbench: error: the run measured no case: {ended}", file=sys.stderr)
        return 1
    return 0 if outcome.status == "complete" else 130


def _restricted(allowed: str) -> str:
    from cxlbench.analysis.machine import restricted
    return f"warning: {restricted(allowed)}"


def _report_writable() -> None:
    """Refused before measuring: the report is written after the run, which would end
    with a bare 'File exists' minutes later."""
    from cxlbench.report import DEFAULT_DIR
    from cxlbench.results.store import unwritable
    if DEFAULT_DIR.exists() and not DEFAULT_DIR.is_dir():
        raise UserError(f"{DEFAULT_DIR} is a file here, and the report goes in {DEFAULT_DIR}/: move it, run from "
                        "another folder, or pass --no-report")
    cannot = unwritable(DEFAULT_DIR / "report.html")
    if cannot:
        raise UserError(f"the report cannot be written: {cannot}; run from another folder, or pass --no-report")


def _remove_staging(run_dir: Path) -> None:
    """A run stored at a URL was written in a local staging folder first; once the store
    holds it whole, the folder goes (every run had left a copy in /tmp). A partial run's
    stays: it may hold what the store could not take."""
    import shutil
    from cxlbench.results.store import STAGING_PREFIX
    root = run_dir.parents[2]                       # staging/<configuration>/<machine>/<run>
    if root.name.startswith(STAGING_PREFIX):
        shutil.rmtree(root, ignore_errors=True)
        print(f"(the local copy in {root} is removed: the store holds the run)")


def sentinel_plan(config) -> str:
    """run --list's last line: the drift sentinels the run would visit, or why none."""
    from cxlbench.runner import sentinels
    from cxlbench.runner.run import prepare
    from cxlbench.units import format_size
    env, planned = prepare(config)
    plan = sentinels.plan(env.suite, env, planned)
    if not plan.planned:
        return f"sentinels: none ({plan.off})"
    probes = ", ".join(f"{p.case.params['probe']} " + (
        f"3 x {format_size(p.case.params['array_bytes'])}" if "array_bytes" in p.case.params
        else format_size(p.case.params["working_set_bytes"])) for p in plan.planned)
    skip = next((p.skip for p in plan.planned if p.skip), None)
    return (f"sentinels: {'skip' if skip else 'run'} at the start, every {plan.interval_s:g} s between "
            f"cases and at the end on {plan.planned[0].case.target}: {probes}" + (f" ({skip})" if skip else ""))


def _newest_run(results: str = "results") -> str:
    from cxlbench.results.store import find_runs
    runs = find_runs(results)
    return str(max(runs, key=lambda p: p.stat().st_mtime))


def report(runs: list[str], out: str | None = None, thresholds_file: str | None = None) -> int:
    from cxlbench.analysis import ThresholdError
    from cxlbench.report import render
    if thresholds_file and len(runs) < 2:
        raise UserError("--thresholds judges a comparison: give report two runs or more (the first the "
                        "baseline), or drop it")
    try:
        path = render(runs or [_newest_run()], out, thresholds_file=thresholds_file)
    except ThresholdError as e:
        raise UserError(str(e)) from None
    print(f"report: {path}")
    return 0


def compare(runs: list[str], out: str | None = None, threshold: str | None = None,
            thresholds_file: str | None = None, normalize: str | None = None) -> int:
    from cxlbench.analysis import ThresholdError, compare as compare_runs, format_comparison
    if len(runs) < 2:
        raise UserError("compare needs at least two runs (the first is the baseline)")
    try:
        comparison = compare_runs(runs, threshold=threshold, thresholds_file=thresholds_file,
                                  normalize=normalize)
        print(format_comparison(comparison))
        if out:
            from cxlbench.report import render
            print(f"report: {render(runs, out, threshold=threshold, thresholds_file=thresholds_file, normalize=normalize)}")
    except ThresholdError as e:
        raise UserError(str(e)) from None
    return 0


def ab(file: str | None = None, judge: str | None = None, out: str = "results", root: str = "/",
       label: str | None = None, threshold: str | None = None, command: list[str] = (),
       wait: bool = True) -> int:
    """Measure the configurations of an A/B file interleaved (or judge a session
    measured before), and print each case's verdict on its per-round ratios."""
    import json

    from cxlbench.analysis import ThresholdError
    from cxlbench.analysis.paired import format_verdicts, imprecise_pairs, judge_session, load_session as record_of
    from cxlbench.runner.ab import load_session, run_session
    if file is None and judge is None:
        raise UserError("ab needs an A/B file to measure, or --judge SESSION to judge one measured before")
    if file is not None and judge is not None:
        raise UserError("ab takes an A/B file to measure or --judge SESSION to judge one measured before, "
                        "not both")
    if file is not None:
        session = load_session(file)
        try:
            judge = str(run_session(session, out, root, label, list(command), imprecise_pairs, wait))
        except ValueError as e:
            raise UserError(str(e)) from None
    try:
        verdicts = judge_session(judge, threshold)
    except ThresholdError as e:
        raise UserError(str(e)) from None
    record = record_of(judge)
    stopped = file is not None and record.get("interrupted")
    if not verdicts.verdicts and stopped:          # Ctrl-C before a pair finished: still Ctrl-C's exit
        print(f"interrupted before a round finished: nothing to judge; the session is {judge}", file=sys.stderr)
        return 130
    if not verdicts.verdicts:
        raise UserError(f"nothing to judge in {judge}: {verdicts.why_none}")
    print(format_verdicts(verdicts))
    if record.get("interrupted"):
        print(interrupted_line(record))
    where = Path(judge)
    write_out((where if where.is_dir() else where.parent) / "verdicts.json",
              json.dumps([v.to_dict() for v in verdicts.verdicts], indent=1))
    print(f"session: {where}")
    return 130 if stopped else 0                    # as run's Ctrl-C


def interrupted_line(record: dict) -> str:
    """A session stopped part-way says so beside its verdicts, which are of the rounds
    that finished (the data is kept; the verdicts are true of less than was planned)."""
    turns = len(record.get("configs") or []) * len(record.get("pairs") or [])
    per_round: dict[int, int] = {}
    for t in record.get("order") or []:
        if isinstance(t, dict) and isinstance(t.get("round"), int):
            per_round[t["round"]] = per_round.get(t["round"], 0) + 1
    whole = sum(1 for n in per_round.values() if turns and n >= turns)
    return (f"interrupted: these verdicts are of the {whole} of {record.get('rounds', '?')} planned rounds that "
            "finished (the session's runs keep every turn measured)")


def write_out(path: str | Path, text: str) -> None:
    """A file a command was asked for (-o, --json, ...): its folder made, written whole
    or not at all, through a link or into a device (/dev/stdout) as the path names."""
    from cxlbench.results.store import atomic_write
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode("utf-8", "backslashreplace"))


def _say(text: str, exit_code: int) -> None:
    """A verdict to stdout; unusable inputs (exit 2) to stderr, like every bad input."""
    print(text, file=sys.stderr if exit_code == 2 else sys.stdout)


def gate(baseline: str, current: str, threshold: str | None = None, thresholds_file: str | None = None,
         allow_missing: bool = False, confirm: bool = False, ignore_identity: list[str] = (),
         markdown: str | None = None, json_out: str | None = None, junit: str | None = None,
         root: str = "/", normalize: str | None = None, exit_undecided: bool = False) -> int:
    from cxlbench.analysis import gate as run_gate
    rerun = _rerunner(current, root) if confirm else None
    result = run_gate(baseline, current, threshold=threshold, thresholds_file=thresholds_file,
                      allow_missing=allow_missing, confirm=rerun, ignore_identity=tuple(ignore_identity),
                      normalize=normalize)
    result.exit_undecided = exit_undecided
    # its warnings too (an unfinished run, a setting that differs): docs/gating.md promises
    # them with the verdict, and a CI log is where the verdict is read
    warnings = [f"warning: {w}" for w in result.warnings] if result.exit_code != 2 else []
    _say("\n".join([result.summary()] + warnings), result.exit_code)
    for path, text in ((markdown, result.markdown), (json_out, result.to_json),
                       (junit, result.junit_xml)):
        if path:
            write_out(path, text())
    return result.exit_code


def history(paths: list[str], machine: str | None = None, suite: str | None = None, out: str | None = None,
            accept: str | None = None, reason: str | None = None, min_magnitude: str | None = None,
            normalize: str | None = None) -> int:
    """The trend of a machine's runs: figures over time, change points, environment changes."""
    from cxlbench.analysis import history as hist
    from cxlbench.cli.history_view import history_text
    from cxlbench.units import parse_fraction
    if reason and not accept:
        raise UserError("--reason goes with --accept RUN (the reason a change is accepted)")
    if accept:
        runs, _ = hist.read_runs(paths or ["results"])
        key, mine = hist.choose(runs, machine, suite)
        where = ", ".join(paths or ["results"])
        run = _resolve(mine, accept, where)
        if run.run_id not in {r.run_id for r in mine}:    # a marker beside another machine's runs
            if run.status != "complete":
                raise UserError(f"{accept} is {run.status}, not complete: a history holds complete runs only; "
                                f"accept the first complete run at the new level")
            raise UserError(f"{accept} is not a run of the history in {where} ({key[0]}/{key[1]}): "
                            f"accept one of its runs")
        m = hist.accept(run.path, reason or "")
        print(f"accepted {m.run_id} ({m.suite}): the gate's history starts there — {m.reason}")
        return 0
    h = hist.history(paths or ["results"], machine, suite, _probes(normalize))
    try:
        magnitude = parse_fraction(min_magnitude, "--min-change") if min_magnitude else 0.05
    except ValueError as e:
        raise UserError(str(e)) from None
    changes = hist.point_changes(h, min_magnitude=magnitude)
    print(history_text(h, changes))
    if out:
        from cxlbench.report.trend import render_trend
        print(f"trend report: {render_trend(h, changes, out)}")
    return 0


def _resolve(runs: list, ref: str, where: str):
    """A run named by its directory, its run id, or `latest` (the newest of `runs`,
    which are in time order)."""
    from cxlbench.results.store import load_run
    by_id = {r.run_id: r for r in runs}
    if ref == "latest" and runs:
        return runs[-1]
    if ref in by_id:
        return by_id[ref]
    if Path(ref).exists():
        return load_run(ref)
    raise UserError(f"{ref}: neither a run directory nor a run of {where}")


def _probes(normalize: str | None) -> str | None:
    """--normalize checked here, so a wrong probe name is one line."""
    if normalize:
        from cxlbench.analysis.drift import probes_asked
        try:
            probes_asked(normalize)
        except ValueError as e:
            raise UserError(str(e)) from None
    return normalize


def gate_history(paths: list[str], current: str | None, confirm: list[str] | None, threshold: str | None,
                 window: int | None, spacing: float | None, json_out: str | None,
                 normalize: str | None = None, markdown: str | None = None, junit: str | None = None,
                 allow_missing: bool = False) -> int:
    """The current run against the machine's history (see analysis.history_gate);
    `markdown` and `junit` are for a CI job's page and test report."""
    from cxlbench.analysis import history as hist
    from cxlbench.analysis.history_gate import Rule, judge
    from cxlbench.cli.history_view import left_out_line, verdict_json, verdict_junit, verdict_markdown, verdict_text
    from cxlbench.units import parse_fraction
    runs, left = hist.read_runs(paths)
    if not runs:
        raise UserError(hist.no_runs(paths, left))
    cur = _resolve(runs, current or "latest", ", ".join(paths))
    if (current or "latest") == "latest":
        _newest_is_complete(cur, left)
    key, chosen = hist.choose(runs, like=cur)
    h = hist.build(chosen, key, left, _probes(normalize))
    if normalize and not hist.has_sentinels(cur):
        raise UserError(f"{cur.run_id} has no drift sentinels to normalise by: judge it without --normalize")
    later = h.runs["run_id"].tolist()[h.runs["run_id"].tolist().index(cur.run_id) + 1:] \
        if cur.run_id in h.paths else []
    refs = later if confirm == ["later"] else (confirm or [])
    rule = Rule(**{k: v for k, v in (("threshold", parse_fraction(threshold) if threshold else None),
                                     ("window", window), ("spacing_s", spacing)) if v is not None})
    verdict = judge(h, cur, [_resolve(chosen, r, f"{h.machine}/{h.suite}") for r in refs], rule,
                    allow_missing=allow_missing)
    if not chosen:         # a first night of this suite, or a job pointed at another machine's history
        have = ", ".join(sorted({f"{k[0]}/{k[1]}" for k in hist.groups(runs)}))
        verdict.notes.append(f"{', '.join(paths)} holds runs of {have} only, and not the run judged: if this is "
                             f"not the first night of {key[0]}/{key[1]}, --history names another machine's or "
                             f"suite's history")
    left_line = f"\n{left_out_line(h.left_out)}" if h.left_out and not verdict.errors else ""
    _say(verdict_text(verdict) + left_line, verdict.exit_code)
    for path, render in ((json_out, verdict_json), (markdown, verdict_markdown), (junit, verdict_junit)):
        if path:
            write_out(path, render(verdict))
    return verdict.exit_code


def _newest_is_complete(latest, left: list[str]) -> None:
    """`gate --history` judges the newest run unless told which: where a newer run of the
    same machine's folder is partial or damaged, judging the complete one before it would
    pass a CI job on an older run's figures, so it is refused in one line. Only folders
    the runner named (by their start time) are compared; one still being measured is
    not in the way."""
    from cxlbench.results import location
    if location.is_url(str(latest.path)):
        return
    mine = Path(latest.path)
    newer = sorted(d for d in mine.parent.iterdir()
                   if d.is_dir() and _made(d) and _made(d) > (_made(mine) or "") and d.name != mine.name)
    for d in reversed(newer):
        why = next((line for line in left if line.startswith(str(d))), None)
        if why is None or why.endswith("running, not complete"):
            continue
        raise UserError(f"the newest run cannot be judged ({why}); the newest complete one is {latest.run_id}: "
                        "name the run to judge with --current")


def _made(run_dir: Path) -> str | None:
    """When the runner made a run, from the UTC time its folder's name starts with."""
    stamp = re.match(r"\d{8}T\d{6}Z", run_dir.name)
    return stamp.group(0) if stamp else None


def _rerunner(current: str, root: str):
    """gate --confirm: re-measure only the flagged cases, with the current run's suite."""
    from cxlbench.results.store import load_run
    from cxlbench.runner.run import RunConfig, run as run_suite
    meta = load_run(current).meta

    def rerun(case_ids: list[str]):
        suite = meta.get("suite", {}).get("path") or meta.get("suite", {}).get("name", "quick")
        declared = [t["declared"] for t in meta.get("tiers", []) if t.get("declared")]
        config = RunConfig(suite, declared, f"confirm-{meta['run_id']}", str(Path(current).parents[1]),
                           root, only=list(case_ids), command=["gate --confirm"])
        return run_suite(config).path
    return rerun


def calibrate(run_a: str, run_b: str, thresholds_out: str | None = None) -> int:
    from cxlbench.analysis import calibrate as run_calibrate
    if Path(run_a).resolve() == Path(run_b).resolve():
        raise UserError("calibrate needs two runs of the same suite (an A/A pair), not one run twice")
    if thresholds_out and Path(thresholds_out).is_file():
        raise UserError(f"--write-thresholds {thresholds_out}: the file exists, and a thresholds file may be "
                        "tuned by hand: name a new file (and merge what you want to keep)")
    cal = run_calibrate(run_a, run_b)
    print(cal.format())
    if thresholds_out:
        write_out(thresholds_out, cal.thresholds_toml())
        print(f"thresholds: {thresholds_out}")
    return 0


def export(run_path: str, out: str, fmt: str = "pytest-benchmark") -> int:
    """A run in another tool's format: pytest-benchmark, or github-action-benchmark's
    customBiggerIsBetter / customSmallerIsBetter (the points of that direction).
    `out` "-" is standard output, for a pipe (`| jq`), with nothing else printed there."""
    from cxlbench import export as exp
    from cxlbench.results.store import load_run
    if fmt not in exp.FORMATS:
        raise UserError(f"unknown export format {fmt!r} (supported: {', '.join(exp.FORMATS)})")
    run = load_run(run_path)
    if run.status != "complete":
        print(f"cxlbench: note: {run_path} is {run.status}: the export holds the cases it finished",
              file=sys.stderr)
    data = exp.format_data(run, fmt)
    if out == "-":
        print(exp.dumps(data))
    else:
        print(f"wrote {exp.write(data, out)}")
    return 0
