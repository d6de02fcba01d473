"""The evidence docs/gating.md gives for the gate against history, from a real
history of one machine (runs of one suite, spaced in time):

- leave-one-out: each run judged against every other run of the history, with its
  confirmations the first later runs spaced as the rule asks — how often a real,
  unchanged run is called suspect, how often slower (a false alarm), and how many
  of its points faster (each a false call, though one that fails nothing);
- detection: each run doctored 10% the bad way (latency x1.10, bandwidth x0.90),
  judged against the runs before it, with doctored copies of later real runs as
  confirmations — how often it fails;
- change points: the series with its last 3 runs doctored — where the steps are found;
- in sequence: each run judged as CI judges it, against the runs before it with the
  default reference (unaccepted steps held to the level before them), as measured and
  doctored.

Doctored two ways: `all` scales every sample, the drift sentinels' too (the whole
machine got slower); `cases` scales the cases only (a measured path got slower,
the machine's drift as it was). With --normalize the history is judged relative
to the sentinels (scripts/sentinel_evidence.py says where that is quieter).

    python scripts/history_evidence.py RESULTS [--suite ci] [--factor 1.10] [--normalize dram_chase,triad]
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path

import pandas as pd

from cxlbench.analysis import drift, history as hist
from cxlbench.analysis.history_gate import FAIL, SUSPECT, Rule, judge
from cxlbench.results.store import Run, load_run


def doctored(run: Run, factor: float, what: str = "all") -> Run:
    """The run `factor` worse — latency times it, bandwidth divided — in every sample
    (`all`) or in its cases only, the sentinels as measured (`cases`)."""
    s = run.samples.copy()
    worse = s["better"].map({"lower": factor, "higher": 1 / factor})
    if what == "cases":
        worse = worse.where(~drift.is_sentinel(s, run.meta), 1.0)
    s["value"] = s["value"] * worse
    return dataclasses.replace(run, samples=s)


def confirmations(h: hist.History, after: int, rule: Rule) -> list[str]:
    """The first later runs, each >= rule.spacing_s after the one before it."""
    out, last = [], h.runs["started"].iloc[after]
    for r in h.runs.iloc[after + 1:].itertuples():
        if (r.started - last).total_seconds() >= rule.spacing_s and len(out) < rule.confirmations:
            out.append(r.run_id)
            last = r.started
    return out


def leave_one_out(h: hist.History, runs: dict[str, Run], rule: Rule) -> pd.DataFrame:
    # allow_missing: these rates are the statistical test's; a point missing from a run
    # is no alarm of it (the gate exits 2 on one, and says so)
    rows = []
    ids = h.runs["run_id"].tolist()
    for i, rid in enumerate(ids):
        conf = confirmations(h, i, rule)
        others = [r for r in ids if r != rid and r not in conf][-rule.window:]
        first = judge(h, runs[rid], [], rule, reference_ids=others, allow_missing=True)
        final = judge(h, runs[rid], [runs[c] for c in conf], rule, reference_ids=others, allow_missing=True) \
            if first.status == SUSPECT and len(conf) == rule.confirmations else first
        faster = first.rows["verdict"].eq("faster").sum() if "verdict" in first.rows else 0
        rows.append({"run": i + 1, "suspect": first.status == SUSPECT, "false_alarm": final.status == FAIL,
                     "unconfirmable": first.status == SUSPECT and len(conf) < rule.confirmations,
                     "faster": int(faster), "points": len(first.rows)})
    return pd.DataFrame(rows)


def detection(h: hist.History, runs: dict[str, Run], rule: Rule, factor: float, what: str) -> pd.DataFrame:
    rows = []
    ids = h.runs["run_id"].tolist()
    for i, rid in enumerate(ids):
        conf = confirmations(h, i, rule)
        if i < rule.min_history or len(conf) < rule.confirmations:
            continue
        cur = doctored(runs[rid], factor, what)
        first = judge(h, cur, [], rule, reference_ids=ids[max(0, i - rule.window):i], allow_missing=True)
        final = judge(h, cur, [doctored(runs[c], factor, what) for c in conf], rule,
                      reference_ids=ids[max(0, i - rule.window):i], allow_missing=True)
        slower = final.rows[final.rows["verdict"] == "slower"]["label"].tolist()
        rows.append({"run": i + 1, "suspect": first.status == SUSPECT, "fails": final.status == FAIL,
                     "slower": ", ".join(slower)})
    return pd.DataFrame(rows)


def sequential(h: hist.History, runs: dict[str, Run], rule: Rule, factor: float = 1.0) -> pd.DataFrame:
    """Each run from the (min_history+1)th on judged as `gate --history` judges it in CI:
    against the runs before it, the default reference (a figure that stepped the bad
    way, unaccepted, held to its level before the step), confirmed by its first later
    runs spaced as the rule asks; doctored `factor` the bad way (confirmations too)
    unless 1."""
    rows = []
    ids = h.runs["run_id"].tolist()
    for i in range(rule.min_history, len(ids)):
        cur = runs[ids[i]] if factor == 1.0 else doctored(runs[ids[i]], factor)
        first = judge(h, cur, [], rule, allow_missing=True)
        conf = confirmations(h, i, rule)
        final = judge(h, cur, [runs[c] if factor == 1.0 else doctored(runs[c], factor) for c in conf], rule,
                      allow_missing=True) if first.status == SUSPECT and len(conf) == rule.confirmations else None
        rows.append({"run": i + 1, "suspect": first.status == SUSPECT, "fails": bool(final and final.status == FAIL),
                     "unconfirmable": first.status == SUSPECT and final is None,
                     "stepped": int((first.rows.get("stepped", pd.Series(dtype=str)) != "").sum())})
    return pd.DataFrame(rows)


def steps(h: hist.History, runs: dict[str, Run], factor: float, what: str) -> list[hist.PointChange]:
    ids = h.runs["run_id"].tolist()
    changed = [doctored(runs[r], factor, what) if i >= len(ids) - 3 else runs[r] for i, r in enumerate(ids)]
    return hist.point_changes(hist.build(changed, (h.machine, h.suite, h.identity), normalize=h.normalize))


def write_doctored(run: Run, factor: float, into: Path) -> Path:
    """A doctored copy of a run on disk (same run id), for the gate's command line."""
    copy = into / run.path.name
    shutil.copytree(run.path, copy)
    doctored(run, factor).samples.to_parquet(copy / "samples.parquet", index=False)
    return copy


def demo(h: hist.History, runs: dict[str, Run], rule: Rule, factor: float, into: Path) -> None:
    """The newest run that has two spaced later runs, doctored with them, as files:
    the command lines that show it fail, and its real self pass."""
    ids = h.runs["run_id"].tolist()
    for i in range(len(ids) - 1, rule.min_history - 1, -1):
        conf = confirmations(h, i, rule)
        if len(conf) == rule.confirmations:
            break
    else:
        print("demo: no run with two later runs spaced as the rule asks")
        return
    cur = write_doctored(runs[ids[i]], factor, into / "current")
    later = [write_doctored(runs[c], factor, into / f"confirm{k}") for k, c in enumerate(conf)]
    history = " ".join(str(p) for p in sorted({runs[r].path.parents[1] for r in ids}))
    print(f"real run {i + 1}:      cxlbench gate --history {history} --current {runs[ids[i]].path} --confirm "
          + " ".join(str(runs[c].path) for c in conf))
    print(f"doctored run {i + 1}:  cxlbench gate --history {history} --current {cur} --confirm "
          + " ".join(map(str, later)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--suite")
    ap.add_argument("--factor", type=float, default=1.10)
    ap.add_argument("--normalize", help="judge relative to these sentinels (dram_chase,triad)")
    ap.add_argument("--demo", type=Path, help="write a doctored run and its confirmations here, and print "
                                              "the gate command lines to try them")
    a = ap.parse_args()
    h = hist.history(a.results, suite=a.suite, normalize=a.normalize)
    runs = {rid: load_run(p) for rid, p in h.paths.items()}
    rule = Rule()
    span = (h.runs["started"].iloc[-1] - h.runs["started"].iloc[0]).total_seconds() / 60
    print(f"{h.machine}/{h.suite}: {len(h.runs)} runs over {span:.0f} min; {rule.text(h.rows['point'].nunique())}")
    names = [hist.display_label(lab, p) for lab, p in zip(h.rows["label"], h.rows.get("relative_to", [""] * len(h.rows)))]
    noise = h.rows.assign(name=names).groupby("name")["median"].apply(hist.spread).sort_values()
    print("run-to-run noise (sd of log median): " + ", ".join(f"{k} {v * 100:.1f}%" for k, v in noise.items()))
    loo = leave_one_out(h, runs, rule)
    print(f"leave-one-out: {int(loo.suspect.sum())}/{len(loo)} suspect, "
          f"{int(loo.false_alarm.sum())}/{len(loo)} false alarms (fail after confirmation), "
          f"{int(loo.unconfirmable.sum())} suspect without later runs to confirm; "
          f"{int(loo.faster.sum())} of {int(loo.points.sum())} points called faster "
          f"(in {int((loo.faster > 0).sum())} runs): unchanged runs, so each one a false call")
    for factor in (1.0, a.factor):
        seq = sequential(h, runs, rule, factor)
        if len(seq):
            print(f"in sequence as CI gates{'' if factor == 1.0 else f', doctored x{factor:g}'}: "
                  f"{int(seq.suspect.sum())}/{len(seq)} suspect, {int(seq.fails.sum())}/{len(seq)} fail after "
                  f"confirmation, {int(seq.unconfirmable.sum())} suspect without later runs to confirm; "
                  f"{int((seq.stepped > 0).sum())} judged some point from before an unaccepted step")
    n = len(h.runs)
    for what in ("all", "cases"):
        det = detection(h, runs, rule, a.factor, what)
        if len(det):
            print(f"doctored x{a.factor:g} ({what}): {int(det.suspect.sum())}/{len(det)} suspect, "
                  f"{int(det.fails.sum())}/{len(det)} fail after confirmation")
            print(det.to_string(index=False))
        found = steps(h, runs, a.factor, what)
        print(f"last 3 runs doctored ({what}): {len(found)} change points; "
              f"{sum(c.change.index == n - 3 for c in found)} of {h.rows['point'].nunique()} figures at run {n - 2}")
        for c in found:
            print(f"  {c.label}: run {c.change.index + 1}, {c.change.magnitude * 100:+.1f}%, p {c.change.pvalue:.3f}")
    if a.demo:
        demo(h, runs, rule, a.factor, a.demo)


if __name__ == "__main__":
    main()
