"""Would another way of spending an A/A session's extra rounds have decided more of
it? Replays the session's own rounds — each pair's measured per-round log ratios,
drawn with replacement, at the seconds a round of that pair took — under the
runner's rule and under alternatives, and counts what each would have judged:
*same* at the threshold, *slower* with one side made 10% worse and judged at half
the threshold (as scripts/ab_evidence.py does), and false verdicts.

    python scripts/ab_allocation.py results/<machine>/ab-<stamp>-aa [--budget-s 600] [--trials 30] [--max-rounds 16]

Rules (`--precision` as the session's; base rounds as its `rounds`):
  targeted  the runner's: another round for every pair not within ±precision,
            unless it would need more than max_rounds as measured
  cheapest  the pairs nearest to ±precision in seconds first, as many as the
            time left can finish; none judged hopeless before `--trust` rounds
  decide    as cheapest, but a pair is done once its verdict is not
            inconclusive (and, with a precision, its interval is within it)
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
from collections import defaultdict

import numpy as np

from cxlbench.analysis.paired import load_session, session_rounds
from cxlbench.analysis.stats import CONFIDENCE, smallest_n, t_quantile
from cxlbench.analysis.thresholds import parse_fraction


def t(n: int) -> float:
    return t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1)


def half(x: np.ndarray) -> float:
    return t(x.size) * x.std(ddof=1) / math.sqrt(x.size)


def rounds_to(x: np.ndarray, width: float) -> int:
    """Rounds after which the interval's half-width is `width`, at this spread."""
    s = x.std(ddof=1)
    if width <= 0:
        return 10 ** 6
    return x.size if s == 0 else smallest_n(lambda n: t(n) * s / math.sqrt(n) <= width)


def goal(x: np.ndarray, rule: str, th: float, precision: float) -> float:
    """The half-width that ends this pair's rounds (0: none left to reach)."""
    wide = math.log1p(precision)
    if rule != "decide":
        return wide
    edge = abs(abs(x.mean()) - math.log1p(th))
    return min(edge, wide) if precision else edge


def done(x: np.ndarray, rule: str, th: float, precision: float) -> bool:
    h, m, edge = half(x), x.mean(), math.log1p(th)
    if rule != "decide":
        return h <= math.log1p(precision)
    decided = abs(m) + h <= edge or abs(m) - h > edge
    return decided and (not precision or h <= math.log1p(precision))


def session(pool, cost, rng, rule, budget_s, base, th, precision, max_rounds, trust):
    data = [list(rng.choice(p, base)) for p in pool]
    left = budget_s - base * sum(cost)
    while True:
        xs = [np.array(d) for d in data]
        open_ = [i for i, x in enumerate(xs) if not done(x, rule, th, precision)]
        if rule == "targeted":
            pick = [i for i in open_ if rounds_to(xs[i], goal(xs[i], rule, th, precision)) <= max_rounds]
        else:
            young = [i for i in open_ if xs[i].size < trust]
            need = sorted((max(rounds_to(xs[i], goal(xs[i], rule, th, precision)) - xs[i].size, 1) * cost[i], i)
                          for i in open_ if xs[i].size >= trust)
            pick, spend = young, sum(cost[i] for i in young)
            for s, i in need:
                if spend + s <= left:
                    pick, spend = pick + [i], spend + s
        pick = [i for i in pick if cost[i] <= left]
        if not pick:
            break
        for i in pick:
            if cost[i] <= left:
                data[i].append(rng.choice(pool[i]))
                left -= cost[i]
    xs = [np.array(d) for d in data]
    edge, worse = math.log1p(th), math.log(1 / 0.9)
    same = sum(abs(x.mean()) + half(x) <= edge for x in xs)
    slower = sum(x.mean() + worse - half(x) > math.log1p(th / 2) for x in xs)
    false = sum(abs(x.mean()) - half(x) > edge for x in xs)
    return same, slower, false


def measured(path: str):
    """Each point's per-round log ratios, and the seconds one round of its pair took."""
    record = load_session(path)
    took, starts = defaultdict(list), [dt.datetime.fromisoformat(o["started"]) for o in record["order"]]
    for o, nxt in zip(record["order"], starts[1:] + [None]):     # start to next start: with process start-up
        if nxt is not None:
            took[o["case"]].append((nxt - dt.datetime.fromisoformat(o["started"])).total_seconds())
    pool, cost = [], []
    for r in session_rounds(record):
        b, c = np.asarray(r.base), np.asarray(r.current)
        ok = np.isfinite(b) & np.isfinite(c)
        pool.append(np.log(c[ok] / b[ok]))
        cost.append(len(record["configs"]) * float(np.median(took[r.index])))
    return record, pool, cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("session")
    ap.add_argument("--budget-s", type=float, default=600)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--trust", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=16, help="the session's max_rounds")
    a = ap.parse_args()
    record, pool, cost = measured(a.session)
    extra = record.get("extra", {})
    th = parse_fraction(record.get("threshold", "10%"))
    precision, base = extra.get("precision") or 0.0, record.get("rounds", 3)
    n = len(pool)
    print(f"{n} points; a round of all pairs takes {sum(cost):.0f} s; {a.trials} replays of "
          f"{a.budget_s:.0f} s each; threshold {th:.0%}, precision {precision:.0%}")
    rng = np.random.default_rng(1)
    for rule in ("targeted", "cheapest", "decide"):
        for prec in dict.fromkeys([precision, 0.0] if rule == "decide" else [precision]):
            got = np.array([session(pool, cost, rng, rule, a.budget_s, base, th, prec, a.max_rounds, a.trust)
                            for _ in range(a.trials)])
            same, slower, false = got.mean(axis=0)
            print(f"{rule:<9} precision {prec:.0%}: same {same:.1f} ({same / n:.0%}), "
                  f"10% worse judged slower {slower:.1f} ({slower / n:.0%}), false verdicts {false:.2f} a session; "
                  f">= 90% same in {np.mean(got[:, 0] >= 0.9 * n):.0%} of replays")


if __name__ == "__main__":
    main()
