"""Would another way of spending an A/A session's extra rounds have decided more of
it? Replays the session's own rounds under the runner's rule and alternatives, and
counts what each would have judged.

    python scripts/ab_allocation.py results/<machine>/ab-<stamp>-aa [--budget-s 600] [--trials 30]

Each point's measured per-round log ratios, centred on 0 (the two sides of an A/A
are the same, so any mean the rounds show is noise), are drawn again — a smoothed
bootstrap, so a point with three rounds does not repeat one value — at the
seconds a round of that pair took in the session. Two replays per rule: the A/A
as it is, judged at the session's threshold (*same* is right, *slower* and
*faster* are false verdicts); and with the second side 10% worse, judged at half
the threshold, as scripts/ab_evidence.py judges the doctored copy (*slower* is
right, *faster* is false). Verdicts follow stats.judge's edges and each metric's
direction.

Rules (`--precision` as the session's; base rounds as its `rounds`):
  targeted  the runner's: another round for every pair not within ±precision,
            unless it would need more than max_rounds as measured
  cheapest  the pairs nearest to ±precision in seconds first, as many as the
            time left can finish within max_rounds; none judged out of reach
            before `--trust` rounds
  decide    as cheapest, but a pair is done once its verdict is not
            inconclusive (and, with a precision, its interval is within it)
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from cxlbench.analysis.paired import load_session, session_rounds
from cxlbench.analysis.stats import CONFIDENCE, smallest_n, t_quantile
from cxlbench.analysis.thresholds import parse_fraction

WORSE = math.log(1 / 0.90)     # the doctored side, 10% worse, as a log ratio oriented worse-positive


@dataclass(frozen=True)
class Point:
    rounds: np.ndarray         # log(current/baseline), oriented so that positive is worse
    higher: bool               # higher is better (the edges of stats.judge mirror)
    cost_s: float              # one round of its pair, every side


@dataclass(frozen=True)
class Replay:
    threshold: float
    shift: float               # added to every round: 0 for the A/A, WORSE for the doctored one
    precision: float
    budget_s: float
    base: int
    max_rounds: int
    trust: int


def t(n: int) -> float:
    return t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1)


def half(x: np.ndarray) -> float:
    return t(x.size) * x.std(ddof=1) / math.sqrt(x.size)


def verdict(x: np.ndarray, higher: bool, th: float) -> str:
    """stats.judge's table on worse-positive log ratios."""
    worse, better = (-math.log1p(-th), -math.log1p(th)) if higher else (math.log1p(th), math.log1p(-th))
    lo, hi = x.mean() - half(x), x.mean() + half(x)
    if lo > worse:
        return "slower"
    if hi < better:
        return "faster"
    return "same" if lo >= better and hi <= worse else "inconclusive"


def rounds_to(x: np.ndarray, width: float) -> int:
    """Rounds after which the interval's half-width is `width`, at this spread."""
    s = x.std(ddof=1)
    if width <= 0:
        return 10 ** 6
    return x.size if s == 0 else smallest_n(lambda n: t(n) * s / math.sqrt(n) <= width)


def goal(x: np.ndarray, rule: str, rp: Replay) -> float:
    """The half-width that ends this pair's rounds."""
    wide = math.log1p(rp.precision) if rp.precision else math.inf
    if rule != "decide":
        return wide
    return min(abs(abs(x.mean()) - math.log1p(rp.threshold)), wide)


def done(x: np.ndarray, higher: bool, rule: str, rp: Replay) -> bool:
    precise = not rp.precision or half(x) <= math.log1p(rp.precision)
    if rule != "decide":
        return precise
    return precise and verdict(x, higher, rp.threshold) != "inconclusive"


def draw(rng, pool: np.ndarray, k: int) -> list[float]:
    """k rounds like the pool's: resampled, jittered by Silverman's bandwidth and
    shrunk back to the pool's spread (a smoothed bootstrap)."""
    s = pool.std(ddof=1) if pool.size > 1 else 0.0
    if s == 0:
        return [float(pool.mean())] * k
    h = 0.9 * s * pool.size ** -0.2
    x = rng.choice(pool, k) + h * rng.standard_normal(k)
    return list(pool.mean() + (x - pool.mean()) / math.sqrt(1 + h * h / (s * s)))


def session(points: list[Point], rng, rule: str, rp: Replay) -> dict[str, int]:
    pools = [p.rounds - p.rounds.mean() + rp.shift for p in points]
    data = [draw(rng, pool, rp.base) for pool in pools]
    left = rp.budget_s - rp.base * sum(p.cost_s for p in points)
    while True:
        xs = [np.array(d) for d in data]
        open_ = [i for i, x in enumerate(xs) if x.size < rp.max_rounds and not done(x, points[i].higher, rule, rp)]
        reach = {i: rounds_to(xs[i], goal(xs[i], rule, rp)) for i in open_}
        if rule == "targeted":
            pick = [i for i in open_ if reach[i] <= rp.max_rounds]
        else:
            young = [i for i in open_ if xs[i].size < rp.trust]
            need = sorted((max(reach[i] - xs[i].size, 1) * points[i].cost_s, i)
                          for i in open_ if xs[i].size >= rp.trust and reach[i] <= rp.max_rounds)
            pick, spend = young, sum(points[i].cost_s for i in young)
            for s, i in need:
                if spend + s <= left:
                    pick, spend = pick + [i], spend + s
        pick = [i for i in pick if points[i].cost_s <= left]
        if not pick:
            break
        for i in pick:
            if points[i].cost_s <= left:
                data[i] += draw(rng, pools[i], 1)
                left -= points[i].cost_s
    got = defaultdict(int)
    for p, d in zip(points, data):
        got[verdict(np.array(d), p.higher, rp.threshold)] += 1
    return got


def measured(path: str) -> tuple[dict, list[Point]]:
    """Each point's per-round log ratios, and the seconds one round of its pair took:
    each turn's start to the next turn's (so process start-up and judging count)."""
    record = load_session(path)
    order = record["order"]
    took = defaultdict(list)
    for o, nxt in zip(order, order[1:]):
        took[o["case"]].append((dt.datetime.fromisoformat(nxt["started"]) -
                                dt.datetime.fromisoformat(o["started"])).total_seconds())
    sides = len(record["configs"])
    points = []
    for r in session_rounds(record):
        b, c = np.asarray(r.base), np.asarray(r.current)
        ok = np.isfinite(b) & np.isfinite(c)
        d = np.log(c[ok] / b[ok])
        higher = r.better == "higher"
        points.append(Point(-d if higher else d, higher, sides * float(np.mean(took[r.index]))))
    return record, points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("session")
    ap.add_argument("--budget-s", type=float, default=600)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--trust", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=16, help="the session's max_rounds")
    a = ap.parse_args()
    record, points = measured(a.session)
    th = parse_fraction(record.get("threshold", "10%"))
    precision = (record.get("extra") or {}).get("precision") or 0.0
    n = len(points)
    print(f"{n} points; a round of all pairs takes {sum(p.cost_s for p in points):.0f} s; {a.trials} replays "
          f"of {a.budget_s:.0f} s each; threshold {th:.0%}, precision {precision:.0%}")
    rng = np.random.default_rng(1)
    for rule in ("targeted", "cheapest", "decide"):
        for prec in dict.fromkeys([precision, 0.0] if rule == "decide" else [precision]):
            common = dict(precision=prec, budget_s=a.budget_s, base=record.get("rounds", 3),
                          max_rounds=a.max_rounds, trust=a.trust)
            aa = [session(points, rng, rule, Replay(th, 0.0, **common)) for _ in range(a.trials)]
            worse = [session(points, rng, rule, Replay(th / 2, WORSE, **common)) for _ in range(a.trials)]
            same = np.array([g["same"] for g in aa])
            slower = np.array([g["slower"] for g in worse])
            print(f"{rule:<9} precision {prec:.0%}: A/A same {same.mean() / n:.0%} "
                  f"(>= 90% in {np.mean(same >= 0.9 * n):.0%} of replays), false "
                  f"{np.mean([g['slower'] + g['faster'] for g in aa]):.2f} a session; 10% worse: slower "
                  f"{slower.mean() / n:.0%} (>= 90% in {np.mean(slower >= 0.9 * n):.0%}), faster "
                  f"{np.mean([g['faster'] for g in worse]):.2f} a session")


if __name__ == "__main__":
    main()
