"""The gate against a machine's history: is the current run slower than this machine
usually is?

The reference is the last `window` runs (default 25, at least 10) before the
current one, since the latest accepted change; a figure whose history stepped the
bad way since then, and nobody accepted the step, is judged against the runs
before it (before_unaccepted_step). Their spread *is* the between-run
variance — measured, not assumed — so the test for each point is a prediction
interval: how likely is a run this far the bad way from the history's mean, if
nothing changed? (one-sided Student t on log values, n-1 degrees of freedom,
standard error s·sqrt(1 + 1/n)).

False alarms are controlled over the whole suite, in two stages:

1. *suspect*: a point whose p-value survives Benjamini-Hochberg at `q` over all
   the suite's points, and that moved at least `threshold` the bad way;
2. *slower*: a suspect point that each of `confirmations` later runs, taken at
   least `spacing` apart (drift on a shared machine is correlated over minutes:
   back-to-back confirmations share it and confirm false alarms), also finds at
   least `threshold` the bad way with p < `alpha`.

Exit codes follow the pairwise gate: 0 pass, 1 slower (confirmed), 2 inputs
unusable, and 3 suspect (take the confirmation runs, then gate again with them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control

from cxlbench.analysis.changepoints import MIN_SEGMENT, change_points
from cxlbench.analysis.gate import timed_out_error
from cxlbench.analysis.history import History, labels, run_rows
from cxlbench.analysis.stats import contiguity_note, t_cdf, t_quantile
from cxlbench.results.schema import case_warnings, timed_out_cases, unmeasured_reason
from cxlbench.results.store import Run

PASS, SUSPECT, FAIL, ERROR, SHORT = "pass", "suspect", "fail", "error", "inconclusive"
EXIT = {PASS: 0, SHORT: 0, FAIL: 1, ERROR: 2, SUSPECT: 3}
MIN_HISTORY = 10


@dataclass(frozen=True)
class Rule:
    threshold: float = 0.05       # the smallest change worth failing a job for
    q: float = 0.05               # Benjamini-Hochberg false discovery rate over the suite
    alpha: float = 0.05           # each confirmation's own test, on points already suspect
    window: int = 25              # history runs in the reference
    min_history: int = MIN_HISTORY
    confirmations: int = 2
    spacing_s: float = 600.0

    def text(self, points: int) -> str:
        return (f"rule: a point is suspect when it moved >= {self.threshold:.0%} the bad way and its "
                f"p-value against the last {self.window} runs of history survives Benjamini-Hochberg "
                f"at q={self.q:g} over the {points} points; slower when {self.confirmations} later runs, "
                f">= {self.spacing_s / 60:g} min apart, each move >= {self.threshold:.0%} with "
                f"p < {self.alpha:g}; faster (no failure) by the same test the good way")


@dataclass
class HistoryVerdict:
    status: str
    rows: pd.DataFrame                     # one row per point
    rule: Rule
    current: str = ""
    reference: list[str] = field(default_factory=list)       # run ids in the window
    confirmations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    normalize: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]

    @property
    def judged(self) -> int:
        """The points tested (the false-discovery family): those missing are not."""
        if "verdict" not in self.rows:
            return len(self.rows)
        return int((~self.rows["verdict"].isin(["missing", "—"])).sum())


def bh_adjust(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values; scipy's false_discovery_control),
    NaN kept NaN and left out of the count."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = false_discovery_control(p[ok], method="bh")
    return out


def prediction_p(history_values: np.ndarray, value: float, higher_is_better: bool) -> tuple[float, float]:
    """(change, one-sided p) of `value` against the history: change is value over the
    history's geometric mean, minus 1; p is how likely a run at least this far the
    bad way is when nothing changed."""
    x = np.log(history_values)
    n = len(x)
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    d = math.log(value) - mean
    bad = -d if higher_is_better else d
    if sd == 0:
        return math.expm1(d), 0.0 if bad > 0 else 1.0
    t = bad / (sd * math.sqrt(1 + 1 / n))
    return math.expm1(d), 1.0 - t_cdf(t, n - 1)


def _bad(change: float, higher_is_better: bool, threshold: float) -> bool:
    return (change <= -threshold) if higher_is_better else (change >= threshold)


def reference(h: History, current_id: str, exclude: set[str], rule: Rule) -> list[str]:
    """The runs the current one is judged against: before it, since the latest
    accepted change, not among the excluded, the newest `window`."""
    return since_accepted(h, current_id, exclude)[-rule.window:]


def since_accepted(h: History, current_id: str, exclude: set[str]) -> list[str]:
    """Every run before the current one since the latest accepted change, oldest first."""
    pos = dict(zip(h.runs["run_id"], h.runs["position"]))
    start = h.accepted_from()
    end = pos.get(current_id, len(h.runs))
    return [r for r, p in pos.items() if start <= p < end and r not in exclude]


def before_unaccepted_step(rows: pd.DataFrame, higher: bool, rule: Rule) -> tuple[pd.DataFrame, tuple | None]:
    """One point's reference where its history since the latest accepted change has
    steps: the newest `window` runs at the level a run is held to, and where the
    latest runs are worse than it, that step (its first run, its size). Without this
    the window fills with a regression's runs (each failing night adds itself and its
    two confirmations), their spread hides the step, and by the third night a
    regression nobody accepted passes. The level: the first segment's, joined by every
    later one no worse than it by the gate's threshold (the level again after a
    regression fixed, or an improvement: one nobody accepted is no level to hold
    later runs to), never by a worse one. `rows`: the point's runs, oldest first."""
    values = rows["median"].to_numpy(float)
    ok = np.isfinite(values) & (values > 0)
    kept, values = rows[ok], values[ok]
    if len(kept) < 2 * MIN_SEGMENT:       # too few runs to hold a step (a case new to the suite)
        return kept.tail(rule.window), None
    cuts = [c.index for c in change_points(values, rule.threshold)]
    segments = list(zip([0] + cuts, cuts + [len(kept)]))
    level = [float(np.mean(np.log(values[a:b]))) for a, b in segments]
    held = [0]
    for i in range(1, len(segments)):
        # better, or within the threshold: no worse than the accepted level, so it joins it
        # (an improvement nobody accepted is no level to hold later runs to: a quiet spell
        # on a shared machine would have made every ordinary run after it a regression)
        if not _bad(math.expm1(level[i] - level[held[0]]), higher, rule.threshold):
            held.append(i)
    ref = pd.concat([kept.iloc[a:b] for a, b in (segments[i] for i in held)]).tail(rule.window)
    if held[-1] == len(segments) - 1:
        return ref, None
    after = held[-1] + 1
    return ref, (kept["run_id"].iloc[segments[after][0]], math.expm1(level[after] - level[held[0]]))


def step_notes(rows: pd.DataFrame) -> list[str]:
    """One line for the unaccepted steps the points are judged across, not one per point."""
    if "stepped" not in rows or not (rows["stepped"] != "").any():
        return []
    stepped = rows[rows["stepped"] != ""]
    at = []
    for run_id, g in stepped.groupby("stepped", sort=True):
        lo, hi = f"{g['step'].abs().min():.0%}", f"{g['step'].abs().max():.0%}"
        at.append(f"{run_id} ({len(g)}, by {lo if lo == hi else f'{lo[:-1]}-{hi}'} the bad way)")
    n = len(stepped)
    return [f"{n} point{'s' if n > 1 else ''} stepped the bad way since the latest accepted change, at "
            f"{'; '.join(at)}: {'each is' if n > 1 else 'it is'} judged against the runs before its step. "
            f"If a change is intended: cxlbench history RESULTS --accept RUN --reason '...'"]


def judge(h: History, current: Run, confirmations: list[Run] = (), rule: Rule = Rule(),
          reference_ids: list[str] | None = None, allow_missing: bool = False) -> HistoryVerdict:
    """The current run against its history, with confirmations if taken;
    `reference_ids` replaces the window (leave-one-out evidence uses it). A point the
    history judges that the current run lacks makes the inputs unusable (exit 2), as a
    case missing from the current run does in the pairwise gate, unless `allow_missing`."""
    return _with_missing(_judge(h, current, confirmations, rule, reference_ids), h, current, allow_missing)


def _judge(h: History, current: Run, confirmations: list[Run], rule: Rule,
           reference_ids: list[str] | None) -> HistoryVerdict:
    confirmations = sorted(confirmations, key=lambda r: pd.Timestamp(r.meta.get("started")))
    errors = _spacing_errors(current, confirmations, rule)
    if errors:
        return HistoryVerdict(ERROR, pd.DataFrame(), rule, current.run_id, errors=errors)
    ref = reference_ids if reference_ids is not None else \
        reference(h, current.run_id, {c.run_id for c in confirmations}, rule)
    cur = run_rows(current, h.normalize, h.reference)
    if cur.empty:
        return HistoryVerdict(ERROR, pd.DataFrame(), rule, current.run_id,
                              errors=[f"the current run {current.run_id} holds no figure to gate (no sample is a "
                                      "number): the run is damaged or empty, re-run it"])
    known = dict(zip(h.rows["point"], h.rows["label"])) if not h.rows.empty else {}
    cur["label"] = [known.get(p, own) for p, own in zip(cur["point"], labels(cur))]
    unmeasured = _not_figures(cur)
    if unmeasured:
        return HistoryVerdict(ERROR, pd.DataFrame(), rule, current.run_id, errors=unmeasured)
    conf = [run_rows(c, h.normalize, h.reference).set_index("point")["median"] for c in confirmations]
    if h.rows.empty:                      # no run of this machine and suite in the store yet
        return HistoryVerdict(SHORT, pd.DataFrame(), rule, current.run_id,
                              notes=[f"inconclusive: 0 runs of history for {h.machine}/{h.suite}, "
                                     f"{rule.min_history} needed"])
    # the runs each point may be judged against: the given ones, or every run since the
    # latest accepted change, for before_unaccepted_step to choose from
    pool = ref if reference_ids is not None else \
        since_accepted(h, current.run_id, {c.run_id for c in confirmations})
    rows_of = {p: g for p, g in h.rows[h.rows["run_id"].isin(pool)].sort_values("position").groupby("point")}
    rows = []
    for _, row in cur.iterrows():
        mine, stepped = rows_of.get(row["point"], h.rows.iloc[:0]), None
        if reference_ids is None:
            mine, stepped = before_unaccepted_step(mine, row["better"] == "higher", rule)
        rows.append({**_point(row, mine, conf, rule), "stepped": stepped[0] if stepped else "",
                     "step": stepped[1] if stepped else math.nan})
    table = pd.DataFrame(rows)
    verdict = HistoryVerdict(PASS, table, rule, current.run_id, ref, [c.run_id for c in confirmations],
                             normalize=h.normalize)
    if len(ref) < rule.min_history:
        verdict.status = SHORT
        verdict.notes.append(f"inconclusive: {len(ref)} runs of history since "
                             f"{'the latest accepted change' if h.accepted_from() else 'the first run'}"
                             f", {rule.min_history} needed")
        return verdict
    return _decide(verdict)


def _with_missing(v: HistoryVerdict, h: History, current: Run, allow_missing: bool) -> HistoryVerdict:
    """The verdict with the points it could not judge: those most of the reference's
    runs measured, with enough history to be judged, that the current run has no
    figure for (skipped, failed, or not planned). Without this a case that stopped
    running (a CXL node gone offline, a worker that dies in every run) passed the gate
    on the points that were left. A case of the current run that timed out makes the
    inputs unusable whatever --allow-missing says (as in the pairwise gate)."""
    if v.errors:
        return v
    stuck = timed_out_cases(current.meta)
    gone = _missing_points(h, v.reference, set(v.rows["point"]) if not v.rows.empty else set(), current,
                           v.rule) if v.reference else pd.DataFrame()
    if not gone.empty:
        v.rows = pd.concat([v.rows, gone], ignore_index=True) if not v.rows.empty else gone
        v.rows["verdict"] = v.rows["verdict"].fillna("—")        # a short history judges none
        v.rows["note"] = v.rows["note"].fillna("")
        if "stepped" in v.rows:                                 # a missing point stepped nowhere
            v.rows["stepped"] = v.rows["stepped"].fillna("")
    if stuck:                    # the inputs are unusable: said as such in every output, JUnit's too
        v.status = ERROR
        v.errors.append(timed_out_error(len(stuck), ", ".join(_names(stuck, gone))))
    gone = gone[~gone["case_id"].isin(stuck)] if not gone.empty else gone
    if gone.empty:
        return v
    n = len(gone)
    what = f"{n} point{'s' if n > 1 else ''} of the history {'are' if n > 1 else 'is'} missing from {v.current}"
    if allow_missing:
        v.notes.append(f"{what}: not judged (--allow-missing)")
    else:
        v.status = ERROR
        v.notes.append(f"{what}: re-run {'their cases' if n > 1 else 'its case'}, pass --allow-missing to gate "
                       "on the points the run has, or, where a case was dropped on purpose, accept the change "
                       "(cxlbench history RESULTS --accept RUN --reason ...)")
    return v


def _names(case_ids: list[str], gone: pd.DataFrame) -> list[str]:
    """Up to 5 cases by their figures' labels where the history has them."""
    labels = dict(zip(gone["case_id"], gone["label"])) if not gone.empty else {}
    return [labels.get(c, c) for c in case_ids[:5]]


def _missing_points(h: History, reference: list[str], have: set[str], current: Run, rule: Rule) -> pd.DataFrame:
    """Rows for the points that more than half of the reference's runs measured, and
    at least 3 (enough to be judged), that the current run lacks, each with why. The
    majority keeps a case that stopped running missing run after run until the change
    is accepted, and lets a point that came and went be."""
    base = h.rows[h.rows["run_id"].isin(reference)]
    runs = base.groupby("point")["run_id"].nunique()
    expected = runs[(runs >= 3) & (2 * runs > len(reference))].index
    firsts = base.sort_values("position").groupby("point").tail(1).set_index("point")
    rows = []
    for point in [p for p in expected if p not in have]:
        r = firsts.loc[point]
        rows.append({**_point({**r.to_dict(), "point": point, "median": math.nan}, base[base["point"] == point],
                              [], rule),
                     "case_id": r["case_id"], "verdict": "missing", "note": _why(current.meta, r["case_id"])})
    return pd.DataFrame(rows)


def _why(meta: dict[str, Any], case_id: str) -> str:
    case = next((c for c in meta.get("cases") or [] if c.get("case_id") == case_id), None)
    if case is None:
        return "not in the run"
    if why := unmeasured_reason(case):
        return why
    warned = [w for cid, w in case_warnings(meta) if cid == case_id]
    return "its case ran, without this point" + (f" ({warned[0]})" if warned else "")


def _not_figures(cur: pd.DataFrame) -> list[str]:
    """A run none of whose points is a positive number holds no figure to gate (a damaged
    or doctored run). Single points may be 0 in real runs (a training step's transfer
    with nothing offloaded, loaded latency's idle point's bandwidth): those are judged
    one by one (_change_p)."""
    medians = cur["median"].to_numpy(float)
    if (np.isfinite(medians) & (medians > 0)).any():
        return []
    first = cur.iloc[0]
    return [f"none of the current run's {len(cur)} points is a positive figure (its {first['label']} is "
            f"{first['median']:g} {first['unit']}): the run is damaged, re-run it"]


def _change_p(hist: np.ndarray, value: float, higher: bool) -> tuple[float, float]:
    """The change against the history and its p-value. A higher-is-better figure that
    read 0 or less where its history is positive lost everything: −100%, and no history
    predicts it (p = 0); a time of 0 or less has no ratio and is not gated."""
    if value > 0:
        return prediction_p(hist, value, higher)
    return (-1.0, 0.0) if higher and np.isfinite(value) else (math.nan, math.nan)


def _point(row: Mapping[str, Any], base: pd.DataFrame, conf: list[pd.Series], rule: Rule) -> dict:
    higher = row["better"] == "higher"
    hist = base["median"].to_numpy(float)
    hist = hist[np.isfinite(hist) & (hist > 0)]
    out = {"point": row["point"], "label": row["label"], "headline": row["headline"],
           "relative_to": row.get("relative_to") if isinstance(row.get("relative_to"), str) else "", "benchmark": row["benchmark"],
           "target": row["target"], "metric": row["metric"], "unit": row["unit"], "better": row["better"],
           "current": row["median"], "n_history": len(hist), "baseline": math.nan, "noise": math.nan,
           "change": math.nan, "p": math.nan, "confirm_changes": [], "confirm_p": [],
           "contiguity": float(row.get("contiguity", math.nan)),
           "contiguity_history": float(base["contiguity"].median()) if "contiguity" in base else math.nan,
           "note": ""}
    if len(hist) < 3:
        return out
    out["baseline"] = float(np.exp(np.mean(np.log(hist))))
    out["noise"] = float(np.std(np.log(hist), ddof=1))
    out["change"], out["p"] = _change_p(hist, row["median"], higher)
    for c in conf:
        ch, p = _change_p(hist, c.get(row["point"], math.nan), higher)
        out["confirm_changes"].append(ch)
        out["confirm_p"].append(p)
    return out


def detectable(noise: float, n: int, points: int, rule: Rule) -> float:
    """The smallest change this history lets one point be called suspect for, when
    it moves alone (Benjamini-Hochberg then asks p <= q/points of it): the MDE."""
    if not (n >= 3 and math.isfinite(noise)):
        return math.nan
    t = t_quantile(1 - rule.q / max(points, 1), n - 1)
    return max(rule.threshold, math.expm1(t * noise * math.sqrt(1 + 1 / n)))


def _decide(v: HistoryVerdict) -> HistoryVerdict:
    t, rule = v.rows, v.rule
    t["q"] = bh_adjust(t["p"].to_numpy(float))
    t["detectable"] = [detectable(s, n, len(t), rule) for s, n in zip(t["noise"], t["n_history"])]
    higher = t["better"] == "higher"
    bad = [_bad(c, h, rule.threshold) for c, h in zip(t["change"], higher)]
    suspect = (t["q"] <= rule.q) & pd.Series(bad, index=t.index)
    confirmed = [s and len(cc) >= rule.confirmations and
                 all(_bad(c, h, rule.threshold) and p < rule.alpha for c, p in zip(cc, cp))
                 for s, cc, cp, h in zip(suspect, t["confirm_changes"], t["confirm_p"], higher)]
    t["verdict"] = ["slower" if c else ("suspect" if s else "pass") for s, c in zip(suspect, confirmed)]
    waiting = suspect & (t["confirm_changes"].map(len) < rule.confirmations)
    t.loc[suspect & ~waiting & ~pd.Series(confirmed, index=t.index), "verdict"] = "not confirmed"
    # the same test the good way (its own Benjamini-Hochberg family): information, no exit code
    t["p_faster"] = 1.0 - t["p"]
    t["q_faster"] = bh_adjust(t["p_faster"].to_numpy(float))
    good = [(c >= rule.threshold) if h else (c <= -rule.threshold) for c, h in zip(t["change"], higher)]
    t.loc[(t["q_faster"] <= rule.q) & pd.Series(good, index=t.index), "verdict"] = "faster"
    t["note"] = [_contiguity_note(r) for r in t.to_dict("records")]
    v.notes += step_notes(t)
    v.status = FAIL if any(confirmed) else (SUSPECT if waiting.any() else PASS)
    if waiting.any():
        n = int(waiting.sum())
        v.notes.append(f"{n} suspect point{'s' if n > 1 else ''}: take {rule.confirmations} more runs at "
                       f"least {rule.spacing_s / 60:g} min apart, then gate again with --confirm")
    return v


def _contiguity_note(r: dict) -> str:
    """A point called anything but pass whose buffers sat on frames unlike its history's
    says so, as `ab` and `compare` do (run_rows leaves out the figures frames cannot
    move)."""
    if r["verdict"] == "pass":
        return ""
    return contiguity_note(r.get("contiguity_history"), r.get("contiguity"), sides="the history's and this run's")


def _spacing_errors(current: Run, confirmations: list[Run], rule: Rule) -> list[str]:
    times = [pd.Timestamp(r.meta.get("started")) for r in [current] + confirmations]
    errors = []
    for prev, (t, r) in zip(times, zip(times[1:], confirmations)):
        gap = (t - prev).total_seconds()
        if gap < rule.spacing_s:
            errors.append(f"confirmation {r.run_id} started {gap / 60:.1f} min after the run before it; "
                          f"confirmations must be >= {rule.spacing_s / 60:g} min apart (--spacing)")
    return errors
