"""Should compare and gate judge cases relative to the drift sentinels on this machine?

Usage: python scripts/sentinel_evidence.py RUN RUN RUN ... (A/A runs of one suite)

Prints docs/gating.md's table (analysis.drift_evidence: each case's noise raw and
relative to its sentinel, run to run and within runs, and the correlation the
division needs), then every pair of the runs gated both ways at the default
threshold: how many cases each calls faster or slower (in an A/A pair, all
false) and the median MDE; and each pair again with the second run's cases (not
its sentinels) made 40% worse: how many of them each calls slower.
"""
from __future__ import annotations

import itertools
import statistics
import sys

from cxlbench.analysis import compare
from cxlbench.analysis.compare import as_run
from cxlbench.analysis.drift_evidence import evidence, markdown


def main(paths: list[str]) -> None:
    runs = [as_run(p) for p in paths]
    cpu = (runs[0].meta.get("machine") or {}).get("cpu", {}).get("model", "?")
    print(f"{len(runs)} runs on {cpu}, suite {runs[0].meta.get('suite', {}).get('name')}: "
          f"{runs[0].meta.get('started')} .. {runs[-1].meta.get('ended')}\n")
    rows = evidence(runs)
    by_case = {}
    for r in compare(runs[:2]).rows.to_dict("records"):
        by_case[r["case_id"]] = r["label"]
    print(markdown(rows, by_case))
    print(f"quieter relative to the sentinel: {sum(e.quieter for e in rows)} of {len(rows)}\n")
    print("| judged | A/A pairs | faster or slower (all false) | inconclusive | same | median MDE "
          f"| pairs with the current side {WORSE - 1:.0%} worse: slower |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    worse = [worsened(r) for r in runs]
    for how in (None, "sentinel", "dram_chase,triad", "triad"):
        calls = inc = same = caught = total = 0
        mdes = []
        for (a, b), (_, b_worse) in zip(itertools.combinations(runs, 2), itertools.combinations(worse, 2)):
            v = compare([a, b], normalize=how).rows
            calls += int(v["verdict"].isin(["faster", "slower"]).sum())
            inc += int((v["verdict"] == "inconclusive").sum())
            same += int((v["verdict"] == "same").sum())
            mdes += [m for m in v["mde"] if m == m]
            w = compare([a, b_worse], normalize=how).rows
            caught += int((w["verdict"] == "slower").sum())
            total += len(w)
        pairs = len(runs) * (len(runs) - 1) // 2
        print(f"| {how or 'raw'} | {pairs} | {calls} | {inc} | {same} | {statistics.median(mdes):.1%} "
              f"| {caught} of {total} |")


#: How much worse the doctored copy of a run is made, to see what normalising costs in power.
WORSE = 1.4


def worsened(run):
    """The run with every case (not its sentinels) WORSE times worse."""
    from cxlbench.analysis import drift
    from cxlbench.results.store import Run
    s = run.samples.copy()
    cases = ~drift.is_sentinel(s, run.meta)
    lower = s["better"] == "lower"
    s.loc[cases & lower, "value"] *= WORSE
    s.loc[cases & ~lower, "value"] /= WORSE
    return Run(run.path, run.meta, s)

if __name__ == "__main__":
    main(sys.argv[1:])
