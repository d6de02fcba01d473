"""Verdicts on an interleaved A/B session (runner.ab): each case judged on its
per-round ratios.

A round measured each configuration once, back to back, in random order, so the
machine's drift (the other tenants, the host's clocks, where the pages landed)
is nearly the same on both sides of a round, and their ratio cancels it. The
rounds' log ratios are then independent draws of the change: their mean and its
t interval (n − 1 degrees of freedom) give the ratio and its confidence interval,
judged against the threshold exactly as compare and gate judge theirs
(stats.judge). For a case that is inconclusive the verdict says how many rounds
would decide it, if its ratio and spread stay as measured.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from cxlbench.analysis.reduction import repetitions
from cxlbench.analysis.stats import (CONFIDENCE, HELD_MIN, INCONCLUSIVE, VERDICTS, Change, Ratio, judge,
                                     not_all_positive, note_contiguity, smallest_n, t_quantile)
from cxlbench.analysis.thresholds import parse_fraction
from cxlbench.results.store import AB_JSON, ResultsError, load_run


@dataclass(frozen=True)
class PairedVerdict:
    index: int                 # the pair's place in the plan
    benchmark: str
    metric: str
    point: str                 # the case ids, and the sample-level axis values when several points
    config: str                # the configuration compared with the first one
    change: Change
    rounds: int
    rounds_needed: float       # rounds that would decide it as measured (inf: none would)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("index", "benchmark", "metric", "point", "config", "rounds")}
        d["rounds_needed"] = self.rounds_needed if math.isfinite(self.rounds_needed) else None
        return {**d, **self.change.to_dict()}


@dataclass
class SessionVerdicts:
    configs: list[str]
    threshold: float
    verdicts: list[PairedVerdict] = field(default_factory=list)
    why_none: str = ""         # with no verdicts: why nothing could be judged

    def counts(self) -> dict[str, int]:
        return {v: sum(1 for x in self.verdicts if x.change.verdict == v) for v in VERDICTS}


def paired_ratio(base_rounds, cur_rounds, confidence: float = CONFIDENCE) -> Ratio:
    """current/baseline from per-round values (NaN where a round has none): the
    geometric mean of the rounds' ratios and its t interval. A round that measured 0
    or less on a side is no missing round: as ratio_ci, a rate gone to 0 where the
    baseline's was positive is GONE (slower, for higher is better), and other values
    not all positive have no interval (it had been the same 1.002 from the rest)."""
    b, c = np.asarray(base_rounds, float), np.asarray(cur_rounds, float)
    both = np.isfinite(b) & np.isfinite(c)
    b, c = b[both], c[both]
    nan = math.nan
    unlogged = not_all_positive(b, c, float(np.median(b)), float(np.median(c)), confidence) if b.size else None
    if unlogged is not None:
        return unlogged
    d = np.log(c / b)
    n = int(d.size)
    if n < 2:
        r = math.exp(d[0]) if n else nan
        return Ratio(r, nan, nan, nan, nan, n, n, confidence, note="needs at least 2 rounds with both sides")
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n)
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * se
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), se, float(n - 1), n, n,
                 confidence)


def rounds_needed(ratio: Ratio, threshold: float) -> float:
    """Rounds after which the interval would clear the nearer edge of [1 − t, 1 + t]
    (a *same*, or a *slower*/*faster*, verdict), if the mean and spread of the
    rounds' log ratios stayed as measured; inf when the ratio sits on an edge."""
    if not math.isfinite(ratio.se_log) or ratio.n_base < 2:
        return math.inf
    m = math.log(ratio.ratio)
    dist = min(abs(m - math.log1p(threshold)), abs(m - math.log1p(-threshold)))
    s = ratio.se_log * math.sqrt(ratio.n_base)              # one round's spread
    if s == 0:
        return float(ratio.n_base)
    if dist <= 0:
        return math.inf
    return smallest_n(lambda n: t_quantile(1 - (1 - ratio.confidence) / 2, n - 1) * s / math.sqrt(n) < dist)


def load_session(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    p = p / AB_JSON if p.is_dir() else p
    try:
        record = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ResultsError(f"{p}: not an A/B session record ({e})") from None
    if not _is_session(record):
        raise ResultsError(f"{p}: not an A/B session record (it needs configs, each a name and "
                           f"a run, and pairs)")
    bad = _misshapen_pair(record)
    if bad:
        raise ResultsError(f"{p} is damaged: {bad}")
    return record


def _misshapen_pair(record: dict[str, Any]) -> str:
    """What of the record's pairs and repetitions a judge would trip on: each pair an
    index, a benchmark and one case id per configuration; repetitions a whole number."""
    reps = record.get("repetitions", 1)
    if type(reps) is not int or reps < 1:
        return f"its repetitions is {reps!r}, not a whole number of 1 or more"
    n = len(record["configs"])
    for k, pair in enumerate(record["pairs"]):
        cases = pair.get("cases")
        if type(pair.get("index")) is not int:
            return f"pair {k + 1}'s index is {pair.get('index')!r}, not a whole number"
        if not isinstance(pair.get("benchmark"), str):
            return f"pair {k + 1} names no benchmark"
        if not (isinstance(cases, list) and len(cases) == n and all(isinstance(c, str) for c in cases)):
            return f"pair {k + 1}'s cases are not one case id for each of the {n} configurations"
    return ""


def _is_session(record: Any) -> bool:
    def records(key: str, *fields: str) -> bool:
        items = record.get(key)
        return isinstance(items, list) and all(isinstance(i, dict) and all(f in i for f in fields)
                                               for i in items)
    return (isinstance(record, dict) and records("configs", "name", "run") and records("pairs")
            and all(isinstance(c["run"], str) for c in record["configs"]))


def _distinct_arms(record: dict[str, Any]) -> None:
    """Two configurations recorded as the same run would judge a run against itself and
    call every case the same: a damaged or hand-edited session, refused."""
    seen: dict[str, str] = {}
    for c in record["configs"]:
        where = str(Path(c["run"]).resolve()) if "://" not in c["run"] else c["run"]
        if where in seen:
            raise ResultsError(f"configurations {seen[where]!r} and {c['name']!r} name the same run {c['run']}: "
                               "an A/B of a run against itself decides nothing")
        seen[where] = c["name"]


def judge_session(path: str | Path, threshold: float | str | None = None,
                  confidence: float = CONFIDENCE) -> SessionVerdicts:
    """Every pair of the session, every configuration against the first."""
    record = load_session(path)
    th = parse_fraction(threshold if threshold is not None else record.get("threshold", "10%"))
    out = SessionVerdicts([c["name"] for c in record["configs"]], th)
    _distinct_arms(record)
    runs = [load_run(c["run"]) for c in record["configs"]]
    contiguity = [_contiguity(run.samples) for run in runs]
    for r in session_rounds(record, runs):
        ratio = paired_ratio(r.base, r.current, confidence)
        change = note_contiguity(judge(ratio, r.better, th), contiguity[0].get(r.base_case),
                                 contiguity[r.config].get(r.case))
        needed = rounds_needed(ratio, th) if change.verdict == INCONCLUSIVE else float(ratio.n_base)
        out.verdicts.append(PairedVerdict(r.index, r.benchmark, r.metric, r.point, out.configs[r.config],
                                          change, ratio.n_base, needed))
    if not out.verdicts:
        out.why_none = _why_none([run.samples for run in runs])
    return out


def _contiguity(samples: pd.DataFrame) -> dict[str, float]:
    """case id -> the median share of its buffers' pages on consecutive frames (none
    where the frames were hidden): an A/B whose arms' buffers differ here (sentinels
    on and off did, docs/validation.md run L) is told so beside its verdict."""
    if samples.empty or "phys_contiguity" not in samples.columns:
        return {}
    med = samples.dropna(subset=["phys_contiguity"]).groupby("case_id")["phys_contiguity"].median()
    return {str(k): float(v) for k, v in med.items()}


def _why_none(samples: list[pd.DataFrame]) -> str:
    """Why a session gave no point to judge: nothing measured, or nothing kept."""
    total = sum(len(s) for s in samples)
    if total == 0:
        return "its runs hold no samples (every case skipped or failed, or the session was stopped first)"
    held = sum(int((s["cpu_held"] < HELD_MIN).sum()) for s in samples if "cpu_held" in s.columns)
    if held == total:
        return (f"every repetition was left out: its threads held their CPUs less than {HELD_MIN:.0%} of "
                f"the time (another process or the hypervisor had them); measure when the machine is quiet")
    if held:                # some left out: what remains may pair in no round, and that is why
        return (f"no point was measured in both configurations of a pair in enough rounds: {held} of {total} "
                f"samples were left out, their threads holding their CPUs less than {HELD_MIN:.0%} of the "
                f"time; measure when the machine is quiet")
    return "no point was measured in both configurations of a pair"


@dataclass(frozen=True)
class PairRounds:
    """One point of one pair: the baseline's and a configuration's value in each
    round (NaN where a round has none)."""
    index: int
    benchmark: str
    metric: str
    better: str
    point: str
    config: int                # the configuration's place; 0 is the baseline
    base: list[float]
    current: list[float]
    base_case: str = ""        # the case ids the two sides ran as
    case: str = ""


def session_rounds(record: dict[str, Any], runs: list | None = None) -> Iterator[PairRounds]:
    """Every point of every pair of a session record, each configuration against the first
    (`runs`: its configurations' runs, when the caller has loaded them already)."""
    runs = runs if runs is not None else [load_run(c["run"]) for c in record["configs"]]
    per_round = record.get("repetitions", 1)
    rounds = [_rounds(r.samples, per_round) for r in runs]
    for pair in record["pairs"]:
        base_id = pair["cases"][0]
        for k in range(1, len(runs)):
            for key, base in rounds[0].get(base_id, {}).items():
                cur = rounds[k].get(pair["cases"][k], {}).get(key)
                if cur is None:
                    continue
                metric, better, axes = key
                idx = sorted(set(base) | set(cur))
                point = " vs ".join(dict.fromkeys([base_id, pair["cases"][k]])) + ("|" + axes if axes else "")
                yield PairRounds(pair["index"], pair["benchmark"], metric, better, point, k,
                                 [base.get(r, math.nan) for r in idx], [cur.get(r, math.nan) for r in idx],
                                 base_id, pair["cases"][k])


def _rounds(samples: pd.DataFrame, per_round: int) -> dict[str, dict[tuple, dict[int, float]]]:
    """case id -> (metric, better, axis values) -> round -> the median of its repetitions.
    A repetition whose threads held their CPUs less than HELD_MIN of its time is left
    out (someone else's time would be in it), and with it that round of the pair."""
    if samples.empty:
        return {}
    if "cpu_held" in samples.columns:
        samples = samples[~(samples["cpu_held"] < HELD_MIN)]
    reps = repetitions(samples)
    axes = list(reps.attrs.get("axes", []))
    reps = reps.assign(round=reps["repetition"] // max(per_round, 1))
    keys = ["case_id", "metric", "better"] + axes
    med = reps.groupby(keys + ["round"], dropna=False, sort=False)["value"].median().reset_index()
    out: dict[str, dict[tuple, dict[int, float]]] = {}
    for row in med.itertuples(index=False):
        r = row._asdict()
        text = ",".join(f"{a}={r[a]}" for a in axes if pd.notna(r[a]))
        out.setdefault(r["case_id"], {}).setdefault((r["metric"], r["better"], text), {})[int(r["round"])] = \
            float(r["value"])
    return out


def imprecise_pairs(path: str | Path, precision: float, max_rounds: int = 0) -> set[int]:
    """The pairs of a session (measured so far) with a point whose ratio is not yet
    known to within ±precision: its interval's half-width, relative, is wider (or
    there is no interval yet). The session runner gives them another round — but
    not a pair that would need more than max_rounds as measured (a working set
    that flips between two states from process to process): the time goes to the
    pairs that can be decided."""
    out, hopeless = set(), set()
    for v in judge_session(path).verdicts:
        c = v.change
        half = math.sqrt(c.hi / c.lo) - 1 if math.isfinite(c.lo) and c.lo > 0 else math.inf
        if half <= precision:
            continue
        if max_rounds and rounds_for_precision(v, precision) > max_rounds:
            hopeless.add(v.index)
        out.add(v.index)
    return out - hopeless


def rounds_for_precision(v: PairedVerdict, precision: float) -> float:
    """Rounds after which the ratio's interval would be ±precision wide, if the
    rounds' spread stayed as measured."""
    c = v.change
    if v.rounds < 2 or not math.isfinite(c.lo) or c.lo <= 0:
        return math.inf                     # after the fixed rounds: values no ratio can be had of
    s = math.log(c.hi / c.lo) / 2 / t_quantile(1 - (1 - CONFIDENCE) / 2, v.rounds - 1) * math.sqrt(v.rounds)
    return smallest_n(lambda n: t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1) * s / math.sqrt(n)
                      <= math.log1p(precision))


def format_verdicts(v: SessionVerdicts) -> str:
    """One line per point: ratio, interval, verdict, and what would decide it."""
    ci_head = f"{CONFIDENCE:.0%} CI"
    lines = [f"{'verdict':<12} {'ratio':>7} {ci_head:>17} {'MDE':>6}  point"]
    for x in v.verdicts:
        c = x.change
        ci = f"[{c.lo:.3f}, {c.hi:.3f}]" if math.isfinite(c.lo) else "—"
        mde = f"{c.mde:.1%}" if math.isfinite(c.mde) else "—"
        tail = f"  ({c.note})" if c.note else ""
        if c.verdict == INCONCLUSIVE and not c.note:
            tail = (f"  (decided after ~{x.rounds_needed:.0f} rounds)" if math.isfinite(x.rounds_needed)
                    else "  (at the threshold's edge: no number of rounds decides it)")
        lines.append(f"{c.verdict:<12} {c.ratio:7.3f} {ci:>17} {mde:>6}  {x.config}: {x.point} "
                     f"{x.metric}{tail}")
    counts = v.counts()
    lines.append(f"{len(v.verdicts)} points, {' vs '.join(v.configs)}, threshold {v.threshold * 100:g}%: "
                 + ", ".join(f"{counts[k]} {k}" for k in VERDICTS))
    return "\n".join(lines)
