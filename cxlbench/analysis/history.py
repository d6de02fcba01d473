"""A machine's history: its runs of one suite in time order, one row per run × point.

A nightly job's best reference is not one earlier run but the machine's history:
enough runs to measure the between-run variance rather than assume it, and to
see where a figure stepped and what changed in the environment there. A history
is read from any number of results directories (runs are found by their run.json,
duplicates by run id counted once) and holds one machine and one suite: runs are
comparable only when the hardware identity matches (the kernel aside — a kernel
upgrade is a change to mark in the history, not another machine).

Accepting a change is explicit: `accept` appends a marker to the machine folder
that holds the run (accepted.jsonl beside the runs, so it travels with them),
and the gate's reference window starts at the latest accepted run.
"""
from __future__ import annotations

import getpass
import hashlib
import json
import math
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from cxlbench.analysis import drift, machine as machine_mod
from cxlbench.analysis.changepoints import ChangePoint, change_points
from cxlbench.analysis.compare import params_text, parse_case_params
from cxlbench.analysis.headlines import figures
from cxlbench.analysis.reduction import points, precision, repetitions
from cxlbench.analysis.stats import frames_can_move
from cxlbench.benchmarks import tails
from cxlbench.results import location
from cxlbench.results.store import (COMPLETE, MARKERS, ResultsError, Run, find_runs, load_run, measured_whole,
                                    now_iso)

#: What a history marks where it changes: the software and firmware under the figures.
ENVIRONMENT = {
    "kernel": lambda m: machine_mod.environment(m).get("kernel") or (m.get("versions") or {}).get("kernel"),
    "bios": lambda m: " ".join(filter(None, (machine_mod.environment(m).get("bios_version"),
                                             machine_mod.environment(m).get("bios_date")))) or None,
    "microcode": lambda m: machine_mod.environment(m).get("microcode"),
    "thp": lambda m: machine_mod.environment(m).get("thp_enabled"),
    "cxlbench": lambda m: (m.get("versions") or {}).get("cxlbench"),
}


class HistoryError(ResultsError):
    """The runs don't make one history (none, or several machines or suites)."""


@dataclass(frozen=True)
class Marker:
    """An accepted change: from this run on, the figures are the new normal."""
    run_id: str
    suite: str
    accepted_at: str
    reason: str
    by: str = ""


@dataclass(frozen=True)
class EnvChange:
    run_id: str
    position: int              # the first run with the new value
    field: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.field} {self.before} → {self.after}"


@dataclass
class History:
    machine: str               # the machine's name, as its runs record it
    suite: str
    identity: str              # a short digest of the hardware identity (kernel aside)
    runs: pd.DataFrame         # one row per run, oldest first: run_id, started, run_label, position, env
    rows: pd.DataFrame         # one row per run × point: median, lo, hi, n, precision, headline
    markers: list[Marker] = field(default_factory=list)
    changes: list[EnvChange] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)     # runs not in it, and why
    paths: dict[str, Path] = field(default_factory=dict)   # run_id -> run directory
    normalize: str | None = None      # cases relative to these sentinels ("dram_chase,triad")
    reference: dict[str, float] = field(default_factory=dict)   # each probe's S_ref over the history

    def series(self, point: str) -> pd.DataFrame:
        """One point's rows in time order."""
        return self.rows[self.rows["point"] == point].sort_values("position")

    def accepted_from(self) -> int:
        """Position of the latest accepted run (0 when nothing was accepted)."""
        pos = dict(zip(self.runs["run_id"], self.runs["position"]))
        return max((pos[m.run_id] for m in self.markers if m.run_id in pos), default=0)


def _started(meta: dict[str, Any]) -> pd.Timestamp:
    return pd.Timestamp(meta.get("started") or meta.get("ended"))


def identity_digest(meta: dict[str, Any]) -> str:
    ident = dict(machine_mod.profile(meta).identity)
    ident.pop("kernel", None)
    text = json.dumps(ident, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def suite_name(meta: dict[str, Any]) -> str:
    suite = meta.get("suite")
    return str(suite.get("name") if isinstance(suite, dict) else suite or "")


def read_runs(paths: Iterable[str | Path], complete_only: bool = True) -> tuple[list[Run], list[str]]:
    """Every complete run below the paths (every readable one with complete_only False),
    once each, oldest first; and what was left out."""
    found: dict[str, Run] = {}
    left: list[str] = []
    for p in paths:
        for d in find_runs(p):
            try:
                run = load_run(d)
            except ResultsError as e:
                left.append(str(e))
                continue
            except OSError as e:        # run.json a folder, a file that cannot be read: that run left out
                left.append(f"{d}: {e.strerror or e}")
                continue
            if complete_only and run.status != COMPLETE:
                left.append(f"{d}: {run.status}, not complete")
            else:
                found.setdefault(run.run_id, run)
    return sorted(found.values(), key=lambda r: (_started(r.meta), r.run_id)), left


def _name(run: Run) -> tuple[str, str]:
    return str(run.meta.get("machine_name") or run.meta.get("hostname") or "?"), suite_name(run.meta)


def same_hardware(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Identity equal but for the kernel, capacities within machine.CAPACITY_TOLERANCE
    (a balloon or a firmware reservation moves MemTotal between boots)."""
    diffs = machine_mod.differences([machine_mod.profile(a), machine_mod.profile(b)], ignore=("kernel",))
    return not any(d.kind == "identity" for d in diffs)


def groups(runs: list[Run]) -> dict[tuple[str, str, str], list[Run]]:
    """Runs by (machine name, suite, hardware identity digest of the group's first run)."""
    out: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        key = next((k for k, members in out.items()
                    if k[:2] == _name(r) and same_hardware(members[0].meta, r.meta)),
                   (*_name(r), identity_digest(r.meta)))
        out.setdefault(key, []).append(r)
    return out


def choose(runs: list[Run], machine: str | None = None, suite: str | None = None,
           like: Run | None = None) -> tuple[tuple[str, str, str], list[Run]]:
    """The runs of one machine identity and suite: those of `like`, or the only group
    left after the filters; several groups are an error that names them."""
    ids = {r.run_id for r in runs}
    found = groups(runs + ([like] if like is not None and like.run_id not in ids else []))
    if like is not None:
        key = next(k for k, members in found.items() if like.run_id in {m.run_id for m in members})
        return key, [m for m in found[key] if m.run_id in ids]
    keys = [k for k in found if (machine is None or k[0] == machine) and (suite is None or k[1] == suite)]
    if not keys:
        have = ", ".join(f"{k[0]}/{k[1]}" for k in found) or "none"
        raise HistoryError(f"no runs of {machine or 'any machine'}/{suite or 'any suite'} (have: {have})")
    if len(keys) > 1:
        have = ", ".join(f"{k[0]}/{k[1]} [{k[2]}] ({len(found[k])} runs)" for k in keys)
        raise HistoryError(f"runs of several machines or suites: {have}; choose one with --machine/--suite")
    return keys[0], found[keys[0]]


def _machine_folder(run_path: str | Path) -> str:
    """The folder that holds a run: a directory, or a prefix in a store at a URL."""
    return str(run_path).rstrip("/").rsplit("/", 1)[0]


def _read_text(path: str) -> str | None:
    if location.is_url(path):
        data = location.read_bytes(path)
        return None if data is None else data.decode()
    return Path(path).read_text(encoding="utf-8") if Path(path).exists() else None


def read_markers(dirs: Iterable[str]) -> list[Marker]:
    out: list[Marker] = []
    for d in sorted(set(dirs)):
        path = f"{d}/{MARKERS}"
        text = _read_text(path)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                marker = Marker(**json.loads(line))
            except (json.JSONDecodeError, TypeError) as e:
                raise HistoryError(f"{path}, line {n}: not a marker ({e})") from None
            wrong = [k for k, v in marker.__dict__.items() if not isinstance(v, str)]
            if wrong:             # a list for a run id was a traceback in history, gate and publish
                raise HistoryError(f"{path}, line {n}: not a marker ({', '.join(wrong)} not text)")
            out.append(marker)
    return out


def run_rows(run: Run, normalize: str | None = None, reference: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per point of a run: its median over repetitions with the interval,
    the number of repetitions, the achieved precision, and its headline label
    where the run's families declared one. With `normalize`, each case sample is
    divided by its sentinel at its time and scaled by `reference` (constant over a
    history, so the figures keep their units and stay comparable); `relative_to`
    names the probe. The sentinels themselves stay raw: a whole machine that got
    slower shows there. A case that failed part-way has no point (store.measured_whole):
    its first repetitions would pass for the run's figure in the history and the gate."""
    samples = whole = measured_whole(run.samples, run.meta)
    if normalize:
        cases = drift.normalize(samples, run.meta, reference or None, drift.probes_asked(normalize))
        samples = pd.concat([cases, drift.sentinels_only(samples, run.meta)], ignore_index=True)
    reps = repetitions(samples)
    pts = points(reps)
    if pts.empty:
        return pts
    pts = pts.assign(precision=precision(pts), headline="", contiguity=_contiguity(reps, pts))
    if "sentinel" in pts.columns:
        pts = pts.rename(columns={"sentinel": "relative_to"})
    for f in figures(drift.cases_only(whole, run.meta), run.meta, pts):
        pts.loc[(pts["point"] == f.point) & (pts["metric"] == f.metric), "headline"] = f.label
    # one key per series: a case's metrics are separate figures
    pts["point"] = pts["point"] + ":" + pts["metric"].astype(str)
    cols = ["point", "case_id", "benchmark", "target", "tier_kind", "metric", "unit", "better",
            "median", "lo", "hi", "n", "rcv", "precision", "headline", "relative_to", "contiguity"]
    return pts[[c for c in cols if c in pts.columns]]


def _contiguity(reps: pd.DataFrame, pts: pd.DataFrame) -> np.ndarray:
    """Each point's median physical contiguity over its case's repetitions (a
    repetition's buffers serve every metric of it, so each counts once); NaN where
    not recorded, or where frames cannot move the figure (stats.frames_can_move)."""
    if "phys_contiguity" not in reps.columns:
        return np.full(len(pts), np.nan)
    once = reps.drop_duplicates(["case_id", "repetition"])
    per_case = pd.to_numeric(once["phys_contiguity"], errors="coerce").groupby(once["case_id"]).median()
    out = pts["case_id"].map(per_case).to_numpy(float)
    probes = pts["probe"] if "probe" in pts.columns else pd.Series([None] * len(pts), index=pts.index)
    movable = [frames_can_move(m, p if isinstance(p, str) else None) for m, p in zip(pts["metric"], probes)]
    return np.where(movable, out, np.nan)


#: a chase's metrics in words, where a point has no headline to name it
WORDS = {**tails.WORDS, "latency_ns": "latency"}


def labels(rows: pd.DataFrame) -> list[str]:
    """A readable name per row: its headline, else the family, tier and the
    parameters that vary within the family (and the metric where it has several)."""
    names: dict[str, str] = {}
    for bench, grp in rows.drop_duplicates("point").groupby("benchmark", sort=False):
        params = [{k: int(v) if v.isdigit() else v for k, v in parse_case_params(c).items()}
                  for c in grp["case_id"]]
        varying = [k for k in dict.fromkeys(k for p in params for k in p)
                   if len({p.get(k) for p in params}) > 1]
        several = grp["metric"].nunique() > 1
        for point, target, metric, p in zip(grp["point"], grp["target"], grp["metric"], params):
            if bench == drift.NAME:
                names[point] = f"sentinel: {drift.LABELS.get(p.get('probe'), p.get('probe'))} ({target})"
                continue
            if metric in WORDS:              # "ddr0 p99.99 of k-load blocks, page=4k ws=256MiB"
                names[point] = f"{target} {WORDS[metric]}, {params_text(p, varying)}".rstrip(", ")
                continue
            text = f"{bench} {target} {params_text(p, varying)}".strip()
            names[point] = f"{text} {metric}" if several else text
    return [f"{t} {h}" if h else names[p] for h, t, p in zip(rows["headline"], rows["target"], rows["point"])]


def environment_changes(runs: pd.DataFrame) -> list[EnvChange]:
    out: list[EnvChange] = []
    for name in ENVIRONMENT:
        values = runs[name].tolist()
        for i in range(1, len(values)):
            if values[i] != values[i - 1]:
                out.append(EnvChange(runs["run_id"].iloc[i], i, name, values[i - 1], values[i]))
    return sorted(out, key=lambda c: c.position)


def history_reference(runs: list[Run]) -> dict[str, float]:
    """Each sentinel probe's median over the runs' own medians: the constant S_ref
    every run of a history is scaled to when judged relative to its sentinels."""
    per_run = [drift.references(r.samples, r.meta) for r in runs]
    probes = {p for ref in per_run for p in ref}
    return {p: float(np.median([ref[p] for ref in per_run if p in ref])) for p in probes}


def build(runs: list[Run], key: tuple[str, str, str], left_out: list[str] = (),
          normalize: str | None = None) -> History:
    if normalize:
        runs, left_out = _with_sentinels(runs, key, list(left_out))
    reference = history_reference(runs) if normalize else {}
    table = pd.DataFrame([{"run_id": r.run_id, "started": _started(r.meta), "run_label": r.meta.get("label"),
                           **{k: get(r.meta) for k, get in ENVIRONMENT.items()}} for r in runs],
                         columns=["run_id", "started", "run_label", *ENVIRONMENT])    # its columns with no runs too
    table.insert(0, "position", range(len(table)))
    frames = [run_rows(r, normalize, reference).assign(run_id=r.run_id, position=i) for i, r in enumerate(runs)]
    rows = pd.concat([f for f in frames if not f.empty], ignore_index=True) if frames else pd.DataFrame()
    if not rows.empty:
        # One name per point over the whole history: a headline picked per run (the
        # peak over thread counts) names a different point from run to run.
        rows["label"] = pd.Series(labels(rows), index=rows.index).groupby(rows["point"]).transform(
            lambda names: names.mode().iloc[0])
    paths = {r.run_id: r.path for r in runs}
    markers = [m for m in read_markers(_machine_folder(p) for p in paths.values())
               if m.run_id in paths and m.suite in ("", key[1])]
    return History(key[0], key[1], key[2], table, rows, markers, environment_changes(table),
                   list(left_out), paths, normalize, reference)


def no_runs(paths: Iterable[str | Path], left: list[str]) -> str:
    """'no complete runs under P (left out: why; and N more)'."""
    more = f"; and {len(left) - 1} more" if len(left) > 1 else ""
    return "no complete runs under " + ", ".join(map(str, paths)) + (f" (left out: {left[0]}{more})" if left else "")


def has_sentinels(run: Run) -> bool:
    """Whether the run visited drift sentinels (what --normalize divides by)."""
    return not drift.trace(run.samples, run.meta).empty


def _with_sentinels(runs: list[Run], key: tuple[str, str, str], left_out: list[str]) -> tuple[list[Run], list[str]]:
    """The runs that recorded drift sentinels, to be judged relative to them; the others
    left out and named (mixed with raw figures they would compare unlike with like)."""
    kept = [r for r in runs if has_sentinels(r)]
    if not kept:
        raise HistoryError(f"none of the {len(runs)} runs of {key[0]}/{key[1]} has drift sentinels to normalise by "
                           "(made before them, or with sentinels = false): drop --normalize")
    return kept, left_out + [f"{r.path}: no drift sentinels to normalise by" for r in runs if r not in kept]


def history(paths: str | Path | Iterable[str | Path], machine: str | None = None,
            suite: str | None = None, normalize: str | None = None) -> History:
    """The history of one machine and suite found below the paths; with `normalize`
    ("sentinel", or probes by name) its cases relative to their drift sentinels."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    runs, left = read_runs(paths)
    if not runs:
        raise HistoryError(no_runs(paths, left))
    key, chosen = choose(runs, machine, suite)
    kept = {r.run_id for r in chosen}
    others = [f"{r.path}: {'/'.join(_name(r))}, another machine or suite" for r in runs if r.run_id not in kept]
    return build(chosen, key, left + others, normalize)


def accept(run_dir: str | Path, reason: str) -> Marker:
    """Mark a run as the first of a new normal: the gate's window starts there."""
    run = load_run(run_dir)
    if not reason.strip():
        raise HistoryError("accepting a change needs a reason (--reason)")
    marker = Marker(run.run_id, suite_name(run.meta), now_iso(), reason.strip(),
                    f"{getpass.getuser()}@{socket.gethostname()}")
    path = f"{_machine_folder(run.path)}/{MARKERS}"
    line = json.dumps(marker.__dict__) + "\n"
    before = _read_text(path) or ""
    if before and not before.endswith("\n"):     # a file edited by hand: its last marker kept whole
        line = "\n" + line
    if location.is_url(path):            # objects have no append: read, add, write back
        location.write_bytes(path, (before + line).encode())
    else:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    return marker


@dataclass(frozen=True)
class PointChange:
    point: str
    label: str
    change: ChangePoint        # its index counts the runs that have the point
    run_id: str                # the first run at the new level
    position: int              # that run's place in the whole history (0: the oldest)


def point_changes(h: History, min_magnitude: float = 0.05, max_pvalue: float = 0.01,
                  headlines_only: bool = False) -> list[PointChange]:
    """Change points of every point (or headline) of the history."""
    out: list[PointChange] = []
    rows = h.rows[h.rows["headline"] != ""] if headlines_only else h.rows
    for point, s in rows.groupby("point", sort=False):
        s = s.sort_values("position")
        values = s["median"].to_numpy(dtype=float)
        ok = np.isfinite(values) & (values > 0)
        positions = s["position"].to_numpy()[ok]
        for cp in change_points(values[ok], min_magnitude, max_pvalue):
            pos = int(positions[cp.index])
            label = s["label"].iloc[0]
            out.append(PointChange(point, label, cp, h.runs["run_id"].iloc[pos], pos))
    return out


def display_label(label: str, probe: Any) -> str:
    """A figure's name, with the sentinel it is judged relative to."""
    return f"{label} ÷ {drift.LABELS.get(probe, probe)}" if isinstance(probe, str) and probe else label


@dataclass(frozen=True)
class Trend:
    """One figure over the history, as the terminal and the trend report list it."""
    point: str
    name: str                  # its label, with the sentinel it is relative to
    unit: str
    median: float
    noise: float               # run to run: sd of log values
    latest: float
    steps: str                 # its change points, or "none"


def trends(h: History, changes: list[PointChange]) -> list[Trend]:
    out = []
    for point, s in h.rows.groupby("point", sort=False):
        s = s.sort_values("position")
        v = s["median"].to_numpy(float)
        probe = s["relative_to"].iloc[0] if "relative_to" in s.columns else ""
        steps = "; ".join(f"run {c.position + 1}: {c.change.magnitude * 100:+.1f}% "
                          f"(p {c.change.pvalue:.3f})" for c in changes if c.point == point)
        out.append(Trend(point, display_label(s["label"].iloc[0], probe), str(s["unit"].iloc[0]),
                         float(np.median(v)), spread(v), float(v[-1]), steps or "none"))
    return out


def spread(values) -> float:
    """Between-run noise: the standard deviation of log values (≈ relative sd)."""
    x = np.log(np.asarray(values, dtype=float))
    return float(np.std(x, ddof=1)) if len(x) > 1 else math.nan
