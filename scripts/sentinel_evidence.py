"""Should compare and gate judge cases relative to the drift sentinels on this machine?

Usage: python scripts/sentinel_evidence.py RUN RUN RUN ... (A/A runs of one suite)

Prints docs/gating.md's table (analysis.drift_evidence: each case's noise raw and
relative to its sentinel, run to run and within runs, and the correlation the
division needs), then every pair of the runs gated both ways at the default
threshold: how many cases each calls faster or slower (in an A/A pair, all
false) and the median MDE.
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
    print("| pairs | judged | faster or slower | inconclusive | same | median MDE |")
    print("|---|---|--:|--:|--:|--:|")
    for how in (None, "sentinel"):
        calls = inc = same = 0
        mdes = []
        for a, b in itertools.combinations(runs, 2):
            c = compare([a, b], normalize=how)
            v = c.rows["verdict"]
            calls += int(v.isin(["faster", "slower"]).sum())
            inc += int((v == "inconclusive").sum())
            same += int((v == "same").sum())
            mdes += [m for m in c.rows["mde"] if m == m]
        pairs = len(runs) * (len(runs) - 1) // 2
        print(f"| {pairs} | {'relative to sentinels' if how else 'raw'} | {calls} | {inc} | {same} "
              f"| {statistics.median(mdes):.1%} |")


if __name__ == "__main__":
    main(sys.argv[1:])
