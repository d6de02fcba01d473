"""The regression gate: exit 0 (nothing regressed), 1 (something did), 2 (inputs unusable).

A case regresses only when the confidence interval of its ratio current/baseline
lies wholly beyond its threshold in the bad direction (see stats.judge). The
inputs are unusable when a run can't be read, the machines' identities differ
(the gate compares one machine with itself over time; `compare` is for across
machines), or cases are missing from the current run or failed in the baseline (unless allowed).
With a `confirm` callable the gate re-runs only the flagged cases and fails only
if they regress again.
"""
from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from cxlbench.analysis.compare import (Comparison, RunLike, as_run, cases_by_key, compare, fmt_change, fmt_ci_change,
                                       fmt_num, fmt_pct)
from cxlbench.analysis.history import suite_name as suite_of
from cxlbench.analysis.stats import CONFIDENCE, FASTER, INCONCLUSIVE, SAME, SLOWER
from cxlbench.analysis.thresholds import ThresholdError, Thresholds, load_thresholds
from cxlbench.results.schema import FAILED, timed_out_cases, unmeasured_reason
from cxlbench.results.store import ResultsError, Run

PASS, FAIL, ERROR = "pass", "fail", "error"
EXIT = {PASS: 0, FAIL: 1, ERROR: 2}
#: The exit status of an undecided pass for jobs that ask for it (--exit-undecided):
#: the history gate's "suspect", take more evidence before calling it either way.
UNDECIDED_EXIT = 3

Rerun = Callable[[list[str]], Run | str | Path]


@dataclass
class GateResult:
    status: str                                   # pass / fail / error
    errors: list[str] = field(default_factory=list)      # why the inputs are unusable
    warnings: list[str] = field(default_factory=list)
    comparison: Comparison | None = None
    thresholds: Thresholds | None = None
    missing: pd.DataFrame | None = None            # baseline points not in the current run
    new: pd.DataFrame | None = None                # current points not in the baseline
    confirm: dict[str, Any] | None = None          # what --confirm did
    confidence: float = CONFIDENCE
    exit_undecided: bool = False                   # an undecided pass exits 3 instead of 0

    @property
    def exit_code(self) -> int:
        if self.status == PASS and self.exit_undecided and self.undecided:
            return UNDECIDED_EXIT
        return EXIT[self.status]

    @property
    def undecided(self) -> bool:
        """A pass that could not have seen a regression of its threshold in some case:
        none was slower, but their intervals were too wide to say they were not."""
        return self.status == PASS and self.counts()[INCONCLUSIVE] > 0

    def undecided_line(self) -> str:
        """What the pass could not see, and what would decide it."""
        rows = self.rows[self.rows["verdict"] == INCONCLUSIVE]
        mde = rows["mde"].replace([math.inf], math.nan).median()
        thresholds = sorted(set(rows["threshold"].round(6)))
        thr = f"a {fmt_pct(thresholds[0])} change" if len(thresholds) == 1 else "a change of their thresholds"
        return (f"{len(rows)} of {len(self.rows)} cases could not have detected {thr} "
                f"(median minimum detectable effect {fmt_pct(mde) if math.isfinite(mde) else 'unbounded'}); "
                "decide them against the machine's history (`cxlbench gate --history`) or with an interleaved "
                "A/B (`cxlbench ab`)")

    @property
    def rows(self) -> pd.DataFrame:
        if self.comparison is None:
            return pd.DataFrame(columns=["key", "verdict"])
        return self.comparison.rows

    @property
    def regressions(self) -> pd.DataFrame:
        """Cases that fail the gate (after confirmation, when it ran)."""
        rows = self.rows
        flagged = rows[rows["verdict"] == SLOWER]
        if self.confirm and self.confirm.get("ran"):
            flagged = flagged[flagged["key"].isin(self.confirm["confirmed"])]
        return flagged

    def counts(self) -> dict[str, int]:
        return {v: int((self.rows["verdict"] == v).sum()) for v in (SLOWER, INCONCLUSIVE, SAME, FASTER)}

    def summary(self) -> str:
        """One line for a terminal or a CI log."""
        if self.status == ERROR:
            return "cxlbench gate: inputs unusable — " + "; ".join(self.errors)
        c = self.counts()
        head = ("cxlbench gate: REGRESSION" if self.status == FAIL else
                "cxlbench gate: UNDECIDED, no case slower" if self.undecided else "cxlbench gate: pass")
        text = (f"{head} — {len(self.regressions)} slower, {c[INCONCLUSIVE]} inconclusive, "
                f"{c[SAME]} same, {c[FASTER]} faster")
        if self.undecided:
            text += f"; {self.undecided_line()}"
        if self.confirm and self.confirm.get("ran"):
            text += (f" (re-ran {len(self.confirm['case_ids'])} flagged cases: "
                     f"{len(self.confirm['confirmed'])} confirmed)")
        return text

    # -------------------------------------------------------------- outputs

    def to_dict(self) -> dict[str, Any]:
        cmp = self.comparison
        def clean(v):
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if hasattr(v, "item"):
                return clean(v.item())
            return v
        cases = []
        if cmp is not None:
            confirmed = set(self.confirm["confirmed"]) if self.confirm and self.confirm.get("ran") else None
            for r in cmp.rows.to_dict("records"):
                item = {k: clean(r[k]) for k in ("benchmark", "metric", "unit", "better", "label", "case_id",
                                                 "point", "target", "base_median", "median", "ratio", "lo",
                                                 "hi", "verdict", "mde", "threshold", "base_n", "n", "note")}
                if confirmed is not None and r["verdict"] == SLOWER:
                    item["confirmed"] = r["key"] in confirmed
                cases.append(item)
        return {
            "tool": "cxlbench gate", "status": self.status, "exit_code": self.exit_code,
            "decided": not self.undecided, "undecided": self.undecided_line() if self.undecided else None,
            "summary": self.summary(), "errors": self.errors, "warnings": self.warnings,
            "confidence": self.confidence, "normalized": cmp.normalized if cmp else "",
            "thresholds": None if self.thresholds is None else {
                "default": self.thresholds.default, "benchmarks": self.thresholds.benchmarks,
                "metrics": {f"{b}.{m}": v for (b, m), v in self.thresholds.metrics.items()},
                "source": self.thresholds.source},
            "baseline": cmp.runs[0].to_dict() if cmp else None,
            "current": cmp.runs[1].to_dict() if cmp and len(cmp.runs) > 1 else None,
            "differences": [{"field": d.field, "kind": d.kind, "values": d.values}
                            for d in (cmp.differences if cmp else [])],
            "counts": self.counts(),
            "regressions": [c for c in cases if c["verdict"] == SLOWER and c.get("confirmed", True)],
            "cases": cases,
            "missing": [] if self.missing is None else self.missing.to_dict("records"),
            "new": [] if self.new is None else self.new.to_dict("records"),
            "confirm": self.confirm,
        }

    def to_json(self, indent: int = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str, allow_nan=False)

    def markdown(self, limit: int = 50) -> str:
        """A summary for a CI job page."""
        icon = {PASS: "✅", FAIL: "❌", ERROR: "⚠️"}[self.status]
        title = {PASS: "no regression", FAIL: "regression", ERROR: "inputs unusable"}[self.status]
        if self.undecided:      # a CI page must not say more than the data: it saw no regression, not none
            icon, title = "❔", "undecided — no case slower, but not every case could have shown it"
        out = [f"## {icon} cxlbench gate: {title}", ""]
        if self.undecided:
            out += [f"**Undecided:** {_md(self.undecided_line())}.", ""]
        cmp = self.comparison
        if cmp is not None:
            for info in cmp.runs[:2]:
                role = "Baseline" if info.index == 0 else "Current"
                out.append(f"- **{role}**: `{_md_code(info.name)}` on {_md(info.hostname or '?')} "
                           f"({_md(info.status)}, started {_md(info.started or '?')})")
        if self.thresholds is not None:
            out.append(f"- **Thresholds**: {_md(self.thresholds.describe())}; intervals at "
                       f"{self.confidence:.0%} confidence over process repetitions")
        if cmp is not None and cmp.normalized:
            out.append(f"- **Judged** {_md(cmp.normalized)}")
        out.append(f"- **Result**: {_md(self.summary())}")
        out.append("")
        if self.errors:
            out.append("### Why the inputs are unusable")
            out += [f"- {_md(e)}" for e in self.errors] + [""]
        if self.warnings:
            out.append("### Warnings")
            out += [f"- {_md(w)}" for w in self.warnings] + [""]
        if cmp is not None and cmp.context_differences:
            out += ["### Settings that differ (they may move figures)", "",
                    "| setting | baseline | current |", "|---|---|---|"]
            out += [f"| {_md(d.field)} | {_md(_v(d.values[0]))} | {_md(_v(d.values[-1]))} |"
                    for d in cmp.context_differences] + [""]
        rows = self.rows
        confirmed = set(self.confirm["confirmed"]) if self.confirm and self.confirm.get("ran") else None
        sections = [(SLOWER, "Regressions"), (FASTER, "Improvements"), (INCONCLUSIVE, "Inconclusive")]
        for verdict, heading in sections:
            sel = rows[rows["verdict"] == verdict]
            if sel.empty:
                continue
            if verdict == INCONCLUSIVE:
                sel = sel.sort_values("mde", ascending=False)
            out += [f"### {heading} ({len(sel)})", ""]
            out.append("| benchmark | case | metric | baseline | current | change | "
                       f"{self.confidence:.0%} CI | threshold | {'MDE' if verdict == INCONCLUSIVE else 'note'} |")
            out.append("|---|---|---|--:|--:|--:|--:|--:|---|")
            for _, r in sel.head(limit).iterrows():
                note = r["note"] or ""
                if verdict == INCONCLUSIVE:
                    note = fmt_pct(r["mde"]) + (f" ({note})" if note else "")
                if confirmed is not None and verdict == SLOWER:
                    note = self._confirmed_note(r["key"], r["key"] in confirmed, note)
                out.append(f"| {_md(r['benchmark'])} | {_md(r['label'])} | {_md(r['metric'])} "
                           f"| {fmt_num(r['base_median'])} {_md(r['unit'])} | {fmt_num(r['median'])} {_md(r['unit'])} "
                           f"| {fmt_change(r['ratio'])} | {fmt_ci_change(r['lo'], r['hi'])} "
                           f"| {fmt_pct(r['threshold'])} | {_md(note)} |")
            if len(sel) > limit:
                out.append(f"\n… and {len(sel) - limit} more (see the JSON verdict)")
            out.append("")
        if self.missing is not None and not self.missing.empty:
            out += [f"### Missing from the current run ({len(self.missing)})", ""]
            out += [f"- `{_md_code(m['point'])}` ({_md(m['metric'])}): {_md(m.get('why', ''))}"
                    for m in self.missing.head(limit).to_dict("records")] + [""]
        if cmp is not None:
            same = rows[rows["verdict"] == SAME]
            if not same.empty:
                out.append(f"{len(same)} cases are the same within their thresholds "
                           f"(largest MDE {fmt_pct(same['mde'].max())}).")
        return "\n".join(out).rstrip() + "\n"

    def _confirmed_note(self, key: str, confirmed: bool, first_note: str) -> str:
        """A re-run regression's note: confirmed, with the re-run's own notes (its
        buffers, not the first run's); or not confirmed, with the first run's."""
        if confirmed:
            again = (self.confirm.get("notes") or {}).get(key, "")
            return "; ".join(n for n in ("confirmed on re-run", again) if n)
        return "; ".join(n for n in ("not confirmed on re-run", first_note) if n)

    def junit_xml(self) -> str:
        """JUnit XML: one testcase per compared case; slower → failure,
        missing → error, inconclusive → skipped (with its MDE)."""
        suite = ET.Element("testsuite", name="cxlbench gate")
        tests = failures = errors = skipped = 0
        if self.errors:
            tc = ET.SubElement(suite, "testcase", classname="cxlbench.gate", name="inputs")
            ET.SubElement(tc, "error", message="inputs unusable").text = "\n".join(self.errors)
            tests += 1
            errors += 1
        confirmed = set(self.confirm["confirmed"]) if self.confirm and self.confirm.get("ran") else None
        for _, r in self.rows.iterrows():
            tests += 1
            tc = ET.SubElement(suite, "testcase", classname=f"cxlbench.{r['benchmark']}",
                               name=f"{r['label']} [{r['metric']}]")
            detail = (f"baseline {fmt_num(r['base_median'])} {r['unit']}, current {fmt_num(r['median'])} "
                      f"{r['unit']}, change {fmt_change(r['ratio'])} {fmt_ci_change(r['lo'], r['hi'])}, "
                      f"threshold {fmt_pct(r['threshold'])}" + (f"; {r['note']}" if r["note"] else ""))
            if r["verdict"] == SLOWER and (confirmed is None or r["key"] in confirmed):
                failures += 1
                ET.SubElement(tc, "failure", message=f"slower: {fmt_change(r['ratio'])}").text = detail
            elif r["verdict"] == INCONCLUSIVE:
                skipped += 1
                ET.SubElement(tc, "skipped", message=f"inconclusive: minimum detectable effect "
                                                     f"{fmt_pct(r['mde'])}").text = detail
            else:
                ET.SubElement(tc, "system-out").text = f"{r['verdict']}: {detail}"
        for m in ([] if self.missing is None else self.missing.to_dict("records")):
            tests += 1
            errors += 1
            tc = ET.SubElement(suite, "testcase", classname=f"cxlbench.{m['benchmark']}",
                               name=f"{m['point']} [{m['metric']}]")
            ET.SubElement(tc, "error", message="missing from the current run").text = str(m.get("why", ""))
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
        suite.set("skipped", str(skipped))
        root = ET.Element("testsuites", name="cxlbench", tests=str(tests), failures=str(failures),
                          errors=str(errors), skipped=str(skipped))
        root.append(suite)
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _v(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) or "none"
    return str(v)


def _md(text: Any) -> str:
    """Markdown-safe text: markup from a machine (hostnames, labels) shows as text."""
    s = str(text)
    for ch in "\\`*_[]<>|#":
        s = s.replace(ch, "\\" + ch)
    return s.replace("\n", " ")


def _md_code(text: Any) -> str:
    return str(text).replace("`", "'").replace("\n", " ")


def gate(baseline: RunLike, current: RunLike, threshold: float | str | None = None,
         thresholds_file: str | Path | None = None, allow_missing: bool = False,
         confirm: Rerun | None = None, ignore_identity: Sequence[str] = (),
         confidence: float = CONFIDENCE, normalize: str | None = None) -> GateResult:
    """Judge `current` against `baseline` (run directories or loaded Runs).

    threshold: the default band, 0.05 or "5%" (None: the thresholds file's
    `default`, else 5%); thresholds_file: per-benchmark TOML whose entries apply
    over the default (see analysis.thresholds); allow_missing:
    gate on the cases both runs have instead of refusing; confirm: `rerun(case_ids)
    -> Run` that re-measures the flagged cases — the gate fails only on those that
    are slower again; ignore_identity: identity fields allowed to differ (e.g.
    "kernel" when a kernel upgrade is the change under test); normalize: "sentinel"
    judges each case relative to its drift sentinel (see compare; docs/gating.md
    says where that is quieter than the raw value).
    """
    result = GateResult(ERROR, confidence=confidence)
    try:
        th = load_thresholds(thresholds_file, threshold)
        result.thresholds = th
    except ThresholdError as e:
        result.errors.append(str(e))
        return result
    runs = []
    for role, r in (("baseline", baseline), ("current", current)):
        try:
            runs.append(as_run(r))
        except ResultsError as e:
            result.errors.append(f"{role}: {e}")
    if result.errors:
        return result
    base, cur = runs
    try:
        cmp = compare([base, cur], thresholds=th, confidence=confidence, normalize=normalize)
    except (ResultsError, ThresholdError) as e:
        result.errors.append(str(e))
        return result
    result.comparison = cmp
    th = result.thresholds = cmp.thresholds          # with a VM's assumed noise, if any
    for info in cmp.runs:
        role = "baseline" if info.index == 0 else "current"
        if info.status != "complete":
            result.warnings.append(f"the {role} run is {info.status}")
    known = set(cmp.runs[0].profile.identity)
    typo = [f for f in ignore_identity if f not in known]
    if typo:                                 # a misspelt field allowed nothing, in silence
        result.errors.append(f"--ignore-identity {', '.join(typo)}: not an identity field (they are "
                             f"{', '.join(sorted(known))})")
        return result
    ident = [d for d in cmp.identity_differences if d.field not in set(ignore_identity)]
    if ident:
        result.errors.append(
            "the machines differ in identity — the gate compares one machine with itself; use "
            "`cxlbench compare` across machines or allow the field explicitly: "
            + "; ".join(str(d) for d in ident))
    for d in cmp.context_differences:
        result.warnings.append(f"setting differs: {d}")
    odd = _odd_pair(base, cur)
    result.warnings += odd
    result.missing, result.new, both = _unmatched(cmp, base, cur)
    missing = result.missing
    stuck = timed_out_cases(cur.meta)
    if not missing.empty and not allow_missing:
        result.errors.append(_missing_error(missing))
    if stuck:                            # whatever allow_missing says, and whatever the baseline had
        result.errors.append(timed_out_error(len(stuck), ", ".join(stuck[:5])))
    result.warnings += [f"{c} failed in both runs ({why}): not gated" for c, why in both.items()]
    if cmp.rows.empty:
        result.errors.append("the runs have no case in common: nothing to gate on")
    if result.errors:                    # what may explain them, in the one line they are said in
        result.errors += odd
        return result
    flagged = cmp.rows[cmp.rows["verdict"] == SLOWER]
    if not flagged.empty and confirm is not None:
        result.confirm = _confirm(base, flagged, confirm, th, confidence, normalize)
        if result.confirm.get("error"):
            result.warnings.append(f"re-running the flagged cases failed ({result.confirm['error']}); "
                                   f"the first verdicts stand")
    result.status = FAIL if not result.regressions.empty else PASS
    return result


#: how a point whose baseline case failed is marked (its "why"), and told from one the current run lacks
FAILED_BEFORE = "failed in the baseline"


def _odd_pair(base: Run, cur: Run) -> list[str]:
    """What suggests the two runs were given the wrong way round or are not a pair."""
    if base.run_id == cur.run_id:       # a run against itself passes whatever it measured
        return [f"the baseline and the current run are the same run ({cur.run_id}): every case reads the same"]
    out = []
    started = [pd.Timestamp(r.meta.get("started")) if r.meta.get("started") else None for r in (base, cur)]
    if all(t is not None for t in started) and started[0] > started[1]:
        out.append(f"the baseline started after the current run ({started[0]:%Y-%m-%d %H:%M} against "
                   f"{started[1]:%Y-%m-%d %H:%M}): were they given the wrong way round?")
    suites = [suite_of(r.meta) for r in (base, cur)]
    if suites[0] != suites[1]:
        out.append(f"the runs are of different suites ({suites[0]} and {suites[1]}): only their common "
                   f"cases are gated")
    return out


def _missing_error(missing: pd.DataFrame) -> str:
    """The points one side cannot judge, by side and by case (a case has a point per
    metric): those the current run lacks, and those whose baseline case failed. Told
    apart: a baseline that measured nothing had read as 'cases missing from the current
    run'."""
    before = missing["why"].astype(str).str.startswith(FAILED_BEFORE)
    why = missing.loc[before, "why"].iloc[0].removeprefix(f"{FAILED_BEFORE}: ") if before.any() else ""
    parts = []
    for rows, what, reason, advice in ((missing[~before], "missing from the current run", "", "re-run them"),
                                       (missing[before], FAILED_BEFORE, why,
                                        "gate against a baseline that measured them")):
        cases = list(dict.fromkeys(rows["point"]))
        if cases:
            more = f" and {len(cases) - 5} more" if len(cases) > 5 else ""
            parts.append(f"{len(cases)} case{'s' if len(cases) > 1 else ''} {what} ({', '.join(cases[:5])}{more}"
                         f"{f'; {reason}' if reason else ''}): {advice}")
    return "; ".join(parts) + "; or pass --allow-missing to gate on the cases both runs measured"


def timed_out_error(n: int, shown: str) -> str:
    """A case that ran past its time limit in the current run is no case missing by
    choice: the limit (at least ten times its estimate) is a measurement, slower."""
    return (f"{n} case{'s' if n > 1 else ''} of the current run timed out ({shown}): --allow-missing does not "
            "cover a case that ran past its time limit (at least ten times its estimate); find why it is slow "
            "or hangs, then re-run it")


def _unmatched(cmp: Comparison, base: Run, cur: Run) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """(missing, new, failed in both): the baseline's points the current run lacks,
    each with why (the current run's record of its case, found by key: its tiers may
    be named otherwise); the current run's points the baseline lacks, less those whose
    baseline case failed part-way (compare leaves such cases out: no reference, so
    missing, not new); and the cases that failed in both runs (nothing to gate)."""
    um = cmp.unmatched
    cur_cases, base_cases = cases_by_key(cur.meta), cases_by_key(base.meta)
    both = _failed_in_both(base_cases, cur_cases)
    if um.empty:
        return um, um, both
    case_key = um["key"].fillna("").astype(str).str.split("|", n=1).str[0]
    lost = um["why"].str.startswith(f"in {cmp.runs[0].name},")
    missing = um[lost].copy()
    missing["why"] = [_why(cur_cases.get(k), "the current run") for k in case_key[lost]]
    was = [base_cases.get(k) or {} for k in case_key[~lost]]
    failed_before = pd.Series([c.get("status") == FAILED for c in was], index=um.index[~lost], dtype=bool)
    cut = um[~lost][failed_before].copy()
    cut["why"] = [f"{FAILED_BEFORE}: {c.get('reason') or ''}" for c in was if c.get("status") == FAILED]
    new = um[~lost][~failed_before]
    return pd.concat([missing, cut], ignore_index=True), new, both


def _why(case: dict[str, Any] | None, run: str) -> str:
    if case is None:
        return f"not in {run}"
    return unmeasured_reason(case) or \
        "its case ran, without this point (a point it drops when the machine is busy, or a metric it no longer gives)"


def _failed_in_both(base_cases: dict[str, dict], cur_cases: dict[str, dict]) -> dict[str, str]:
    """case_id -> the current run's reason, for cases that failed in both runs (each
    run's cases by key, compare.cases_by_key)."""
    return {c["case_id"]: c.get("reason") or "" for k, c in cur_cases.items()
            if c.get("status") == FAILED and (base_cases.get(k) or {}).get("status") == FAILED}


def _confirm(base: Run, flagged: pd.DataFrame, rerun: Rerun, th: Thresholds,
             confidence: float, normalize: str | None = None) -> dict[str, Any]:
    case_ids = sorted(set(flagged["case_id"]))
    info: dict[str, Any] = {"ran": False, "case_ids": case_ids, "confirmed": list(flagged["key"]),
                            "cleared": [], "error": None}
    try:
        again = as_run(rerun(case_ids))
    except Exception as e:        # the runner's failure must not hide the first verdict
        info["error"] = f"{type(e).__name__}: {e}"
        return info
    second = compare([base, again], thresholds=th, confidence=confidence, normalize=normalize).rows
    slower_again = set(second.loc[second["verdict"] == SLOWER, "key"])
    info.update(ran=True, rerun_path=str(again.path),
                confirmed=[k for k in flagged["key"] if k in slower_again],
                cleared=[k for k in flagged["key"] if k not in slower_again],
                notes={k: n for k, n in zip(second["key"], second["note"]) if k in slower_again and n})
    return info
