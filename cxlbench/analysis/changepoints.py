"""Change points in a series of run-level figures: where a figure stepped, by how
much, and how sure we are.

A machine's history is a noisy series with occasional steps (a kernel, a BIOS, a
regression). The method follows E-divisive as MongoDB and Apache Otava use it —
split at the strongest step, test it, recurse on both sides — with two choices
made for a series of tens of runs:

- the statistic is Student's t between the two sides of a split, on log values
  (a step is a ratio: 10% down is the same step at 100 ns and at 300 ns);
- the significance of the *strongest* split is a permutation test of the
  maximum |t| over all splits, with a fixed seed. Taking the best of n splits
  and then testing it as if it were chosen in advance (a plain t-test) would
  find a step in most flat series; permuting the series keeps the selection in
  the null distribution, and the fixed seed keeps the answer reproducible
  (Otava's reason for replacing E-divisive's random permutations).

Where no single split holds, a level that left and came back (a regression fixed a
week later) is searched for as two cuts at once: split once, each side mixes both
levels and no one split stands out, while the middle against the two ends does.

A change point is kept only when it is significant and its magnitude (the ratio
of the geometric means of the segments on each side) is at least
`min_magnitude`: a shared VM drifts by a few percent over an hour, and a
"change" smaller than that drift is not one anybody can act on. After the
recursion each change point is re-tested against its neighbours' segments only,
as Otava does, so a step found early against a long mixed segment must still
hold between the steps that surround it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SEGMENT = 3          # runs on each side: a step needs confirmations to be one
MAX_PVALUE = 0.01
MIN_MAGNITUDE = 0.05
PERMUTATIONS = 999
HUMP_MAX = 150           # runs in a segment searched for two cuts (the pairs grow as the square)


@dataclass(frozen=True)
class ChangePoint:
    index: int             # first position of the new level
    before: float          # geometric mean of the segment before
    after: float           # ... and after
    pvalue: float

    @property
    def magnitude(self) -> float:
        """after/before - 1: +0.10 is a 10% step up."""
        return self.after / self.before - 1.0


def _split_t(x: np.ndarray, splits: np.ndarray) -> np.ndarray:
    """|t| of Student's two-sample test at each split position (the first index of
    the second segment), for every row of x."""
    n = x.shape[-1]
    c1 = np.cumsum(x, axis=-1)
    c2 = np.cumsum(x * x, axis=-1)
    s1, q1 = c1[..., splits - 1], c2[..., splits - 1]
    return _t(s1, q1, splits, c1[..., -1:], c2[..., -1:], n)


def _t(s1, q1, k, total, total_sq, n: int) -> np.ndarray:
    """|t| of k values (their sum s1, sum of squares q1) against the other n - k of a
    series whose sums are total and total_sq; inf for a step with no spread at all."""
    s2, q2 = total - s1, total_sq - q1
    m1, m2 = s1 / k, s2 / (n - k)
    pooled = np.maximum((q1 - s1 * m1) + (q2 - s2 * m2), 0) / (n - 2)
    se = np.sqrt(pooled * (1.0 / k + 1.0 / (n - k)))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(m1 - m2) / se
    return np.where(se > 1e-12, t, np.where(np.abs(m1 - m2) > 1e-12, np.inf, 0.0))


def _permutation_p(x: np.ndarray, splits: np.ndarray, permutations: int, seed: int) -> tuple[int, float]:
    """(best split, p): the split with the largest |t|, and how often a shuffled
    series has a split at least as strong (the selection included)."""
    t = _split_t(x, splits)
    best = int(np.argmax(t))
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((permutations, len(x))), axis=1)
    null = _split_t(x[perms], splits).max(axis=1)
    return int(splits[best]), (1 + int(np.sum(null >= t[best] * (1 - 1e-9)))) / (permutations + 1)


def strongest_split(x: np.ndarray, min_segment: int = MIN_SEGMENT, permutations: int = PERMUTATIONS,
                    seed: int = 0) -> tuple[int, float] | None:
    """(position, permutation p-value) of the split with the largest |t|; None when
    the series is too short to split."""
    if len(x) < 2 * min_segment:
        return None
    return _permutation_p(x, np.arange(min_segment, len(x) - min_segment + 1), permutations, seed)


def _step(x: np.ndarray, start: int, cut: int, end: int) -> ChangePoint:
    """The step at `cut` between [start, cut) and [cut, end), tested at that split only."""
    _, p = _permutation_p(x[start:end], np.array([cut - start]), PERMUTATIONS, 0)
    return ChangePoint(cut, float(np.exp(np.mean(x[start:cut]))), float(np.exp(np.mean(x[cut:end]))), p)


def _big_enough(log_step: float, min_magnitude: float) -> bool:
    """A step of at least min_magnitude either way (10% down counts as 10%, not 11%)."""
    return math.expm1(abs(log_step)) >= min_magnitude - 1e-12


def change_points(values, min_magnitude: float = MIN_MAGNITUDE, max_pvalue: float = MAX_PVALUE,
                  min_segment: int = MIN_SEGMENT) -> list[ChangePoint]:
    """Change points of a series of positive figures, in order."""
    if min_segment < 2:
        raise ValueError("min_segment must be at least 2: a segment of one run has no variance")
    x = np.log(np.asarray(values, dtype=float))
    if len(x) < 2 * min_segment or not np.all(np.isfinite(x)):
        return []
    cuts = _segment(x, 0, len(x), min_magnitude, max_pvalue, min_segment)
    return _retest(x, sorted(cuts), min_magnitude, max_pvalue)


def _segment(x: np.ndarray, start: int, end: int, min_magnitude: float, max_pvalue: float,
             min_segment: int) -> list[int]:
    found = strongest_split(x[start:end], min_segment)
    if found is None:
        return []
    pos, p = found
    cut = start + pos
    if p > max_pvalue or not _big_enough(np.mean(x[cut:end]) - np.mean(x[start:cut]), min_magnitude):
        return _hump(x, start, end, min_magnitude, max_pvalue, min_segment)
    return (_segment(x, start, cut, min_magnitude, max_pvalue, min_segment) + [cut] +
            _segment(x, cut, end, min_magnitude, max_pvalue, min_segment))


def _hump(x: np.ndarray, start: int, end: int, min_magnitude: float, max_pvalue: float,
          min_segment: int) -> list[int]:
    """Two cuts where one would not do: a level that left and came back (a regression
    fixed a week later). Split once, each side mixes both levels and no single split
    stands out; the middle against the two ends does. Tested as the single split is,
    by permutation of the largest |t| over every pair of cuts, so the search over
    pairs is in the null. Up to HUMP_MAX runs (the pairs grow as the square)."""
    y = x[start:end]
    n = len(y)
    if n < 3 * min_segment or n > HUMP_MAX:
        return []
    i, j = np.triu_indices(n + 1, k=min_segment)
    keep = (i >= min_segment) & (j <= n - min_segment)
    i, j = i[keep], j[keep]
    t = _middle_t(y[None, :], i, j)[0]
    best = int(np.argmax(t))
    rng = np.random.default_rng(0)
    perms = np.argsort(rng.random((PERMUTATIONS, n)), axis=1)
    beaten, most = 0, max_pvalue * (PERMUTATIONS + 1) - 1      # more than `most` shuffles as strong: p > max
    for chunk in np.array_split(perms, 10):  # a flat series is settled in the first tenth
        beaten += int(np.sum(_middle_t(y[chunk], i, j).max(axis=1) >= t[best] * (1 - 1e-9)))
        if beaten > most:
            return []
    p = (1 + beaten) / (PERMUTATIONS + 1)
    a, b = start + int(i[best]), start + int(j[best])
    step = np.mean(x[a:b]) - (np.sum(x[start:a]) + np.sum(x[b:end])) / (n - (b - a))
    if p > max_pvalue or not _big_enough(step, min_magnitude):
        return []
    return (_segment(x, start, a, min_magnitude, max_pvalue, min_segment) + [a] +
            _segment(x, a, b, min_magnitude, max_pvalue, min_segment) + [b] +
            _segment(x, b, end, min_magnitude, max_pvalue, min_segment))


def _middle_t(x: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """|t| of [i, j) against the rest of each row of x, for every pair (i, j)."""
    n = x.shape[-1]
    c1 = np.concatenate([np.zeros((len(x), 1)), np.cumsum(x, axis=-1)], axis=-1)
    c2 = np.concatenate([np.zeros((len(x), 1)), np.cumsum(x * x, axis=-1)], axis=-1)
    return _t(c1[:, j] - c1[:, i], c2[:, j] - c2[:, i], (j - i).astype(float), c1[:, -1:], c2[:, -1:], n)


def _retest(x: np.ndarray, cuts: list[int], min_magnitude: float, max_pvalue: float) -> list[ChangePoint]:
    """Each cut between its neighbours only; the weakest failing one is dropped and
    the rest re-tested, until all hold."""
    while True:
        bounds = [0] + cuts + [len(x)]
        found = [_step(x, bounds[i], c, bounds[i + 2]) for i, c in enumerate(cuts)]
        weak = [i for i, cp in enumerate(found)
                if cp.pvalue > max_pvalue or not _big_enough(math.log(cp.after / cp.before), min_magnitude)]
        if not weak:
            return found
        cuts = [c for i, c in enumerate(cuts) if i != max(weak, key=lambda i: found[i].pvalue)]
