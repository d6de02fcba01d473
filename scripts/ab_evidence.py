"""The evidence docs/gating.md gives for cxlbench ab: an A/A session judged as it
is, and judged again with one side made 10% worse (every sample of the second
configuration scaled by 0.90 where higher is better, by 1/0.90 where lower is) —
and, beside each, what the ordinary unpaired gate says of the same two runs.

    python scripts/ab_evidence.py results/<machine>/ab-<stamp>-aa [--threshold 10%]
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from cxlbench.analysis import gate
from cxlbench.analysis.paired import judge_session


def doctored(session: Path, into: Path, factor: float = 0.90) -> Path:
    """A copy of the session whose last configuration's samples are `factor` worse."""
    record = json.loads((session / "ab.json").read_text())
    last = Path(record["configs"][-1]["run"])
    copy = into / last.name
    shutil.copytree(last, copy)
    samples = pd.read_parquet(copy / "samples.parquet")
    worse = samples["better"].map({"higher": factor, "lower": 1 / factor})
    samples["value"] = samples["value"] * worse
    samples.to_parquet(copy / "samples.parquet", index=False)
    record["configs"][-1]["run"] = str(copy)
    (into / "ab.json").write_text(json.dumps(record, indent=1))
    return into


def line(name: str, session: Path, threshold: str) -> str:
    v = judge_session(session, threshold)
    counts, n = v.counts(), len(v.verdicts)
    record = json.loads((session / "ab.json").read_text())
    runs = [c["run"] for c in record["configs"]]
    g = gate(runs[0], runs[-1], threshold=threshold)
    c = g.comparison.counts(1) if g.comparison is not None else {}
    unpaired = (f"exit {g.exit_code}: {c.get('slower', 0)} slower, {c.get('inconclusive', 0)} "
                f"inconclusive, {c.get('same', 0)} same" if c else f"exit {g.exit_code}")
    mde = sorted(x.change.mde for x in v.verdicts)
    return (f"| {name} | {threshold} | {n} | {counts['same']} ({counts['same'] / n:.0%}) | {counts['slower']} "
            f"({counts['slower'] / n:.0%}) | {counts['faster']} | {counts['inconclusive']} | "
            f"{mde[len(mde) // 2]:.1%} | {unpaired} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("session", type=Path)
    ap.add_argument("--threshold", default="10%", help="for the A/A as measured")
    ap.add_argument("--doctored-threshold", default="5%",
                    help="for the doctored copy: a 10%% change is called slower only where the "
                         "whole interval lies beyond the threshold, so the threshold must be below it")
    a = ap.parse_args()
    print("| session | threshold | points | same | slower | faster | inconclusive | median MDE | "
          "unpaired gate |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|---|")
    print(line("A/A as measured", a.session, a.threshold))
    with tempfile.TemporaryDirectory() as d:
        print(line("A/A, second side 10% worse", doctored(a.session, Path(d)), a.doctored_threshold))


if __name__ == "__main__":
    main()
