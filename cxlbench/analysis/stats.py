"""Statistics for runs and their comparison: pure functions over per-repetition values.

Every function here takes the values of *process repetitions* (one number per
repetition, inner iterations already reduced), never pooled inner iterations:
repetitions of one process are not independent, and pooling them makes identical
code look different (see docs/gating.md).

- `median_ci`: confidence interval of a median from interpolated order
  statistics (Hettmansperger-Sheather), with the coverage it holds.
- `ratio_ci`: ratio of medians current/baseline, with a confidence interval for
  the ratio from a two-sample t interval on log values (the log-ratio method).
- `judge`: the verdict (faster / slower / same / inconclusive) for a ratio and
  its interval, the direction taken from the metric's `better`, and the minimum
  detectable effect at the observed noise.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist
from typing import Callable

import numpy as np
from scipy import special

#: Two-sided confidence of the ratio's interval. The gate's question is one-sided
#: ("worse by more than the threshold?"), so each side errs at most 5%.
CONFIDENCE = 0.90
#: Power used for the minimum detectable effect.
POWER = 0.80

FASTER, SLOWER, SAME, INCONCLUSIVE = "faster", "slower", "same", "inconclusive"
VERDICTS = (SLOWER, INCONCLUSIVE, SAME, FASTER)

_Z = NormalDist()


# ---------------------------------------------------------------- one sample

def clean(values) -> np.ndarray:
    """Finite values as a float array."""
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def _median_sorted(x: np.ndarray) -> float:
    n = x.size
    return float(x[n // 2]) if n % 2 else float((x[n // 2 - 1] + x[n // 2]) / 2)


def median(values) -> float:
    x = clean(values)
    return float(np.median(x)) if x.size else math.nan


def robust_cv(values) -> float:
    """Spread relative to the median: 1.4826·MAD/median (≈ the coefficient of
    variation for normal noise, not dragged by one outlier)."""
    x = clean(values)
    if x.size < 2:
        return math.nan
    m = float(np.median(x))
    if m == 0:
        return math.nan
    return float(1.4826 * np.median(np.abs(x - m)) / abs(m))


@lru_cache(maxsize=4096)
def order_stat_rank(n: int, confidence: float = 0.95) -> tuple[int, float]:
    """The rank k (1-based) such that [x(k), x(n+1-k)] covers the median with at
    least `confidence`, and the coverage achieved. When n is too small to reach
    it (n ≤ 5 at 95%), k = 1 (min to max) and the coverage says how much it holds."""
    if n < 1:
        return 0, 0.0
    alpha = (1.0 - confidence) / 2.0
    if n > 1000:                       # normal approximation of the binomial
        k = int(math.floor(n / 2 - _Z.inv_cdf(1 - alpha) * math.sqrt(n) / 2))
        k = max(k, 1)
        cover = 1 - 2 * _Z.cdf((k - 0.5 - n / 2) / (math.sqrt(n) / 2))
        return k, cover
    total = 2 ** n
    cdf, best = Fraction(0), (1, 1 - 2 * Fraction(1, total))
    for j in range(0, n // 2 + 1):     # P(Bin(n, 1/2) <= j)
        cdf += Fraction(math.comb(n, j), total)
        if cdf <= alpha:
            best = (j + 1, 1 - 2 * cdf)   # k = j + 1 keeps P(X <= k-1) <= alpha
        else:
            break
    k, cover = best
    return k, float(cover)


@lru_cache(maxsize=4096)
def median_interpolation(n: int, confidence: float = 0.95) -> tuple[int, float, float]:
    """(d, λ, coverage): the median's interval runs from λ·x(d+1) + (1−λ)·x(d) to
    the same from the top (Hettmansperger & Sheather 1986).

    The plain order-statistic interval [x(d), x(n+1−d)] can only hold the
    coverages the binomial gives: with 8 values 99.2% (min..max) or 93.0%, so
    asking 95% gets min..max, as wide as any outlier makes it. Interpolating
    between the two neighbouring intervals lands on the confidence asked; in
    simulation (normal, lognormal, exponential, 10% outliers at 3x; 6 to 20
    values, 20 000 trials each) it held 94.2-95.3% where the plain one held
    95.9-99.2%, at 0.4-1.0 of its width (the narrowest where a value is an
    outlier). With too few values to reach the confidence at all (n ≤ 5 at 95%)
    it is min..max, λ = 0, and the coverage says what it holds."""
    d, cover = order_stat_rank(n, confidence)
    # Too few values for the confidence, or too many for the binomial to be worth
    # summing (past 1000 the ranks' steps are ~1/sqrt(n) apart: the plain interval).
    if cover < confidence or n > 1000 or 2 * d + 1 > n:
        return d, 0.0, cover
    inner = cover - 2 * math.comb(n, d) / 2 ** n          # [x(d+1), x(n−d)]
    share = (cover - confidence) / (cover - inner)
    lam = (n - d) * share / (d + (n - 2 * d) * share)
    return d, lam, confidence


def sign_test_p(above: int, n: int) -> float:
    """One-sided sign test: P(at least `above` of `n` paired differences are
    positive) when each is as likely either way. Five of five: 1/32."""
    if n < 1:
        return 1.0
    return sum(math.comb(n, j) for j in range(max(above, 0), n + 1)) / 2 ** n


def median_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """(lo, hi, coverage) of the median, from interpolated order statistics."""
    x = np.sort(clean(values))
    n = x.size
    if n == 0:
        return math.nan, math.nan, 0.0
    if n == 1:
        return float(x[0]), float(x[0]), 0.0
    d, lam, cover = median_interpolation(n, confidence)
    lo = lam * x[d] + (1 - lam) * x[d - 1]
    hi = lam * x[n - d - 1] + (1 - lam) * x[n - d]
    return float(lo), float(hi), cover


# ---------------------------------------------------------------- Student t

def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with df degrees of freedom (df may be fractional):
    scipy's stdtr; the normal's beyond df 1e7, where the t and the normal agree to
    the last printed digit."""
    if math.isinf(df) or df > 1e7:
        return _Z.cdf(t)
    return float(special.stdtr(df, t))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p: scipy's stdtrit (cached: the gate asks the same few
    quantiles thousands of times)."""
    if not 0 < p < 1:
        raise ValueError("p must lie in (0, 1)")
    if math.isinf(df) or df > 1e7:
        return _Z.inv_cdf(p)
    return float(special.stdtrit(df, p))


# ---------------------------------------------------------------- two samples

@dataclass(frozen=True)
class Ratio:
    """current/baseline: the ratio of medians and its confidence interval."""
    ratio: float            # median(current) / median(baseline)
    lo: float               # confidence interval of the ratio
    hi: float
    se_log: float           # standard error of log(ratio); nan when unknown
    df: float               # degrees of freedom of the t interval
    n_base: int
    n_cur: int
    confidence: float
    note: str = ""          # why there is no interval, when there is none

    @property
    def has_ci(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)


#: A figure that read positive in the baseline and 0 or less in the current run: no
#: ratio has an interval, but a bandwidth or a rate that fell to nothing is the
#: largest regression there is, and a gate must not pass it as inconclusive.
GONE = "the current run's median is 0 or less where the baseline's was positive"


def not_all_positive(b: np.ndarray, c: np.ndarray, mb: float, mc: float, confidence: float) -> Ratio | None:
    """The ratio of values that are not all positive (medians mb, mc), which has no
    log and so no interval: GONE where the current median fell to 0 or less from a
    positive one, else "values not all positive"; None where every value is positive."""
    nan = math.nan
    if mb > 0 and mc <= 0:
        return Ratio(mc / mb, nan, nan, nan, nan, b.size, c.size, confidence, note=GONE)
    if mb <= 0 or mc <= 0 or (b <= 0).any() or (c <= 0).any():
        return Ratio(mc / mb if mb else nan, nan, nan, nan, nan, b.size, c.size, confidence,
                     note="values not all positive")
    return None


def ratio_ci(baseline, current, confidence: float = CONFIDENCE, run_noise: float = 0.0) -> Ratio:
    """Ratio of medians current/baseline with a `confidence` interval.

    The interval is the two-sample t interval of the difference of mean log
    values (the log-ratio method): timings and bandwidths change by factors, so
    a change is a shift of log values; with the standard error
    sqrt(s_b²/n_b + s_c²/n_c) and n_b + n_c − 2 degrees of freedom when both
    runs have as many repetitions (the t test is robust to unequal variances
    then), Welch–Satterthwaite's otherwise. An outlier widens the interval
    (the case becomes inconclusive) rather than moving it.

    `run_noise` is the run-to-run noise that repetitions inside one run cannot
    see (the σ of a per-run offset of log values, measured by `calibrate`): each
    run contributes it once, so 2·run_noise² joins the variance.
    """
    b, c = clean(baseline), clean(current)
    nb, nc = b.size, c.size
    nan = math.nan
    if nb == 0 or nc == 0:
        return Ratio(nan, nan, nan, nan, nan, nb, nc, confidence,
                     note="no values in " + ("baseline" if nb == 0 else "current"))
    mb, mc = _median_sorted(np.sort(b)), _median_sorted(np.sort(c))
    unlogged = not_all_positive(b, c, mb, mc, confidence)
    if unlogged is not None:
        return unlogged
    r = mc / mb
    if nb < 2 or nc < 2:
        return Ratio(r, nan, nan, nan, nan, nb, nc, confidence,
                     note="needs at least 2 repetitions in each run")
    lb, lc = np.log(b), np.log(c)
    vb, vc = float(lb.var(ddof=1)) / nb, float(lc.var(ddof=1)) / nc
    se = math.sqrt(vb + vc + 2 * run_noise ** 2)
    if nb == nc or vb + vc == 0:
        df = float(nb + nc - 2)
    else:
        df = (vb + vc) ** 2 / (vb ** 2 / (nb - 1) + vc ** 2 / (nc - 1))
    d = float(lc.mean() - lb.mean())
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    return Ratio(r, math.exp(d - half), math.exp(d + half), se, df, nb, nc, confidence)


@dataclass(frozen=True)
class Change:
    """The verdict on one metric of one case, baseline → current."""
    ratio: float
    lo: float
    hi: float
    verdict: str            # faster / slower / same / inconclusive
    mde: float              # smallest relative change detected with POWER; inf if none
    threshold: float
    better: str
    n_base: int
    n_cur: int
    note: str = ""

    @property
    def change(self) -> float:
        """Relative change of the metric's value (+0.10 = the value grew 10%)."""
        return self.ratio - 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
        return d


def judge(ratio: Ratio, better: str, threshold: float) -> Change:
    """faster / slower / same / inconclusive for one ratio and its interval.

    With a metric where lower is better (ns), the case is *slower* when the whole
    interval lies above 1 + threshold, *faster* when wholly below 1 − threshold;
    where higher is better (GB/s) the other way round. It is *same* only when the
    whole interval lies within [1 − threshold, 1 + threshold]; anything else is
    *inconclusive*. `mde` is the smallest change that would be called slower or
    faster with probability POWER at the observed noise: (1 + threshold)·
    exp((t₁₋α/₂ + z_power)·se) − 1.
    """
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be lower/higher, not {better!r}")
    up, down = 1.0 + threshold, 1.0 - threshold
    args = dict(threshold=threshold, better=better, n_base=ratio.n_base, n_cur=ratio.n_cur)
    if not ratio.has_ci:
        lost = ratio.note == GONE and better == "higher"      # a time of 0 is no speed-up: undecided
        return Change(ratio.ratio, ratio.lo, ratio.hi, SLOWER if lost else INCONCLUSIVE, math.inf,
                      note=ratio.note or "no interval", **args)
    lo, hi = ratio.lo, ratio.hi
    if lo > up:
        verdict = SLOWER if better == "lower" else FASTER
    elif hi < down:
        verdict = FASTER if better == "lower" else SLOWER
    elif lo >= down and hi <= up:
        verdict = SAME
    else:
        verdict = INCONCLUSIVE
    mde = minimum_detectable_effect(ratio.se_log, ratio.df, threshold, ratio.confidence)
    return Change(ratio.ratio, lo, hi, verdict, mde, **args)


#: Below this fraction of wall time on a CPU (benchmarks.base.cpu_held), a
#: repetition's figure may be mostly someone else's time.
HELD_MIN = 0.90


def discount_interference(change: Change, held_base: float, held_cur: float,
                          minimum: float = HELD_MIN) -> Change:
    """A faster/slower verdict becomes inconclusive when, in either run, a repetition's
    threads held their CPUs for less than `minimum` of its wall time: the change may be
    the interference, not the memory path. same/inconclusive verdicts stand."""
    low = min(held_base, held_cur)
    if change.verdict not in (FASTER, SLOWER) or not low < minimum or change.note == GONE:
        return change                     # interference slows a figure; it never zeroes one
    which = "baseline" if held_base <= held_cur else "current"
    note = (f"interference: in the {which} run a repetition's threads held their CPUs "
            f"{low:.1%} of its wall time (< {minimum:.0%}); {change.verdict} not called")
    return replace(change, verdict=INCONCLUSIVE, note=note)


#: Buffers whose shares of pages on consecutive physical frames differ by this much
#: read differently on a VM: docs/validation.md run L, 0.77 against 0.94, 8% apart on
#: a one-thread read. On bare metal the effect is not measured.
CONTIGUITY_APART = 0.10


def frames_can_move(metric: str, probe: str | None = None) -> bool:
    """Whether where the kernel put a buffer's pages can move this figure: not for a
    chase within one L1 (the tails' floor, the L1 drift sentinel), whose few lines
    stay in the core's cache whichever frames hold them."""
    return not (str(metric).startswith("floor_") or probe == "l1_chase")


def contiguity_note(base: float | None, cur: float | None, apart: float = CONTIGUITY_APART,
                    sides: str = "the runs'") -> str:
    """The note for two sets of buffers whose shares of pages on consecutive frames
    differ by `apart` or more, or whose one side is unknown (its frames hidden from a
    run not as root); "" where they agree or neither is known."""
    known_base, known_cur = (x is not None and math.isfinite(x) for x in (base, cur))
    if known_base != known_cur:
        return (f"the physical contiguity of {sides} buffers is unknown on one side (frames hidden from a run "
                f"not as root, or not recorded): a difference, which alone moved a chase up to a fifth on "
                f"this project's VM (docs/validation.md run L), cannot be ruled out")
    # rounded: 0.94 - 0.84 is 0.0999… in binary, and "0.10 or more" should hold it
    if not known_base or round(abs(cur - base), 6) < apart:
        return ""
    return (f"{sides} buffers differ in physical contiguity ({base:.2f} → {cur:.2f} of pages on "
            f"consecutive frames); on this project's VM scattered frames alone read up to a fifth slower "
            f"(docs/validation.md run L)")


def note_contiguity(change: Change, base: float | None, cur: float | None,
                    apart: float = CONTIGUITY_APART) -> Change:
    """A faster/slower verdict whose runs' buffers differ in physical contiguity says
    so: the change may be where the kernel put the pages, not the memory path. The
    verdict stands (the effect is measured only on a VM), the note tells the reader
    to re-run before believing it."""
    note = contiguity_note(base, cur, apart) if change.verdict in (FASTER, SLOWER) else ""
    if not note:
        return change
    return replace(change, note="; ".join(n for n in (change.note, note) if n))


def skew_note(change: Change) -> str:
    """The change shown is the ratio of medians; the interval and the verdict are the
    ratio of geometric means'. On skewed repetitions the first can fall outside the
    second ("+4.8% [+5.0%, +9.6%] slower"): said, so the reader looks at the samples
    rather than taking one figure against the other."""
    r, lo, hi = change.ratio, change.lo, change.hi
    if not (math.isfinite(r) and math.isfinite(lo) and math.isfinite(hi)) or lo <= r <= hi:
        return ""
    return ("skewed repetitions: the change shown (of the medians) lies outside the interval, which is of "
            "the geometric means the verdict tests; look at the samples")


#: A run whose repetitions spread (90th / 10th percentile) wider than 1 + this
#: many thresholds, and at least UNSTABLE_MIN, is unstable: the machine's state
#: changed within the run. The floor keeps a tight threshold (1%) from calling
#: ordinary noise unstable (2% noise spreads five values ~1.05x).
UNSTABLE_THRESHOLDS = 4.0
UNSTABLE_MIN = 1.2


def spread(values) -> float:
    """90th over 10th percentile of the repetitions (for 5 values, close to max/min
    without being all max/min): how far apart one run's processes landed."""
    x = clean(values)
    if x.size < 3 or np.min(x) <= 0:
        return math.nan
    lo, hi = np.quantile(x, [0.1, 0.9])
    return float(hi / lo)


def discount_instability(change: Change, base_values, cur_values,
                         limit: float = UNSTABLE_THRESHOLDS) -> Change:
    """A faster/slower verdict becomes inconclusive when either run's repetitions spread
    wider than 1 + limit × threshold. Such a case flips between states from process to
    process (a working set at a shared cache's size, say, whose fit depends on what
    other tenants hold); how often it lands in each drifts with time, so a difference
    between two runs can be the machine's drift and the t interval, which assumes one
    fixed distribution per run, cannot tell. same/inconclusive verdicts stand."""
    if change.verdict not in (FASTER, SLOWER) or change.note == GONE:    # no spread reaches 0
        return change
    widest = max(1.0 + limit * change.threshold, UNSTABLE_MIN)
    for which, values in (("baseline", base_values), ("current", cur_values)):
        s = spread(values)
        if s > widest:
            x = clean(values)
            note = (f"unstable: the {which} run's repetitions span {np.min(x):.4g}-{np.max(x):.4g} "
                    f"(10-90% spread {s:.2f}x > {widest:.2f}x); {change.verdict} not called")
            return replace(change, verdict=INCONCLUSIVE, note=note)
    return change


def minimum_detectable_effect(se_log: float, df: float, threshold: float,
                              confidence: float = CONFIDENCE, power: float = POWER) -> float:
    """Smallest relative change the comparison catches with probability `power`."""
    if not (math.isfinite(se_log) and math.isfinite(df)) or df <= 0:
        return math.inf
    margin = (t_quantile(1 - (1 - confidence) / 2, df) + _Z.inv_cdf(power)) * se_log
    return (1.0 + threshold) * math.exp(margin) - 1.0


def repetitions_needed(baseline, current, threshold: float, confidence: float = CONFIDENCE,
                       run_noise: float = 0.0) -> float:
    """Repetitions per run after which the interval of current/baseline would clear
    the nearer edge of [1 − threshold, 1 + threshold] — deciding the case — if the
    runs' medians and spreads stayed as measured. inf when no number of repetitions
    would: the ratio sits on the edge, or the run-to-run noise alone (which more
    repetitions of the same two runs do not shrink) is wider than the margin; only
    measuring the two sides interleaved (cxlbench ab) decides those."""
    b, c = clean(baseline), clean(current)
    if b.size < 2 or c.size < 2 or (b <= 0).any() or (c <= 0).any():
        return math.inf
    lb, lc = np.log(b), np.log(c)
    d = float(lc.mean() - lb.mean())
    margin = min(abs(d - math.log1p(threshold)), abs(d - math.log1p(-threshold)))
    within = float(lb.var(ddof=1) + lc.var(ddof=1))          # per repetition, both runs
    tq = lambda n: t_quantile(1 - (1 - confidence) / 2, 2 * n - 2)  # noqa: E731
    if margin <= 0 or tq(10_000) * math.sqrt(2) * run_noise >= margin:
        return math.inf
    return smallest_n(lambda n: tq(n) * math.sqrt(within / n + 2 * run_noise ** 2) < margin)


def smallest_n(enough: Callable[[int], bool], first: int = 2, limit: int = 1_000_000) -> float:
    """The smallest n >= first for which enough(n) holds, for a condition that,
    once it holds, holds for every larger n (an interval narrowing with n); inf
    when not even `limit` is enough. Doubling, then bisection: ~40 evaluations."""
    if enough(first):
        return float(first)
    lo, hi = first, first * 2
    while not enough(hi):
        if hi >= limit:
            return math.inf
        lo, hi = hi, min(hi * 2, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return float(hi)


def compare_values(baseline, current, better: str, threshold: float,
                   confidence: float = CONFIDENCE, run_noise: float = 0.0) -> Change:
    """Ratio, interval and verdict for one metric's per-repetition values."""
    return judge(ratio_ci(baseline, current, confidence, run_noise), better, threshold)


def run_noise_estimate(log_ratios, se_logs) -> float:
    """The run-to-run noise σ behind a set of A/A log ratios: each ratio varies by
    its repetitions' standard error plus twice the run variance, so
    σ² = (variance of the ratios − typical se²) / 2, never below 0. The variance
    is read off the 90th percentile of |d| (÷1.645, exact for normal noise):
    contention on a shared machine has heavy tails, and a gate should cover most
    cases, not the typical one. Around 0, not the ratios' median: an A/A pair's
    true ratio is 1, and a whole run that drifted (every case 8% slower) is noise
    the gate must cover; around the median it cancelled, read 0, and the gate
    then failed the next A/A pair on it."""
    d = clean(log_ratios)
    se = clean(se_logs)
    if d.size < 3:
        return math.nan
    dev = np.abs(d)
    spread = float(np.quantile(dev, 0.9)) / 1.6449 if d.size >= 10 else 1.4826 * float(np.median(dev))
    within = float(np.median(se ** 2)) if se.size else 0.0
    return math.sqrt(max(0.0, (spread ** 2 - within) / 2))


def false_alarm_probability(se_log: float, df: float, threshold: float,
                            confidence: float = CONFIDENCE) -> float:
    """Probability that a case with no true change is called slower, when its
    run-to-run noise is only what the repetitions show (standard error se_log)."""
    if not (math.isfinite(se_log) and math.isfinite(df)) or df <= 0:
        return math.nan
    if se_log == 0:
        return 0.0
    tc = t_quantile(1 - (1 - confidence) / 2, df)
    return 1.0 - t_cdf(tc + math.log1p(threshold) / se_log, df)
