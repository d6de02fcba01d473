"""A static site over one or more results stores: what a lab publishes.

    index.html                        configurations, machines and suites; each machine's
                                      headline figures with a small trend
    index.json                        the same for tools: machines, runs, pages, headline
                                      figures with units and direction
    changes.html                      every change point of every history, regressions first
    compare/index.html, compare/A--B.html    the fleet matrix and configurations side by side
    machines/<conf>/<machine>/index.html     a machine: its figures, trends and runs
    machines/<conf>/<machine>/trend-<suite>.html   its history (the `history` report)
    machines/<conf>/<machine>/runs/<run>.html      each run's report

Every page is the project's self-contained HTML (inline CSS and SVG, no script) with
links relative to itself, so the site reads from file:// and from any folder of any
web server. Publishing is incremental: each page is named in manifest.json with a
digest of what it is made from (the runs' records and samples, the markers, the
templates, the report's code and the cxlbench version); a page whose digest is unchanged is not
rendered again, and a page no longer made is removed.

The fleet's pages come from the fleet layer, above this one: the command hands them
in as a FleetPages (as the runner is handed the precision function from analysis).
"""
from __future__ import annotations

import hashlib
import json
import math
import posixpath
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import pandas as pd

from cxlbench.version import __version__
from cxlbench.analysis import history as hist
from cxlbench.analysis.headlines import Figure, figures
from cxlbench.analysis.reduction import points, repetitions
from cxlbench.report import TEMPLATES, _css, environment, run_context
from cxlbench.report.plots import PALETTE, sparkline
from cxlbench.report.trend import trend_context
from cxlbench.results.schema import COMPLETE
from cxlbench.results.store import (ResultsError, Run, atomic_write, configuration_of, measured_whole,
                                    machine_of, safe_name)
from cxlbench.units import format_number

MANIFEST = "manifest.json"
SITE_FORMAT = 1
UNNAMED = "unnamed"          # the configuration of runs that recorded none (as the fleet matrix says)

Nav = list[tuple[str, str]]  # (href relative to the page, text)


class FleetPages(Protocol):
    """The fleet's pages over the site's runs (cxlbench.fleet.page makes them)."""
    inputs: str                                    # a digest of the fleet records

    def matrix(self, runs: list[Run], nav: Nav) -> str: ...

    def pair(self, runs: list[Run], a: str, b: str, nav: Nav) -> str: ...


@dataclass
class Page:
    path: str                  # relative to the site's root, '/'-separated
    inputs: str                # a digest of what it is made from
    render: Callable[[], str]


@dataclass
class Trend:
    """One history of a machine: one suite on one hardware identity."""
    suite: str
    page: str
    history: hist.History
    changes: list[hist.PointChange]


@dataclass
class MachineRuns:
    configuration: str         # UNNAMED for runs that recorded none
    name: str
    runs: list[Run]            # oldest first, partial ones included
    trends: list[Trend] = field(default_factory=list)

    @property
    def folder(self) -> str:
        return f"machines/{safe_name(self.configuration)}/{safe_name(self.name)}"

    @property
    def page(self) -> str:
        return f"{self.folder}/index.html"

    def run_page(self, run: Run) -> str:
        return f"{self.folder}/runs/{safe_name(run.run_id)}.html"

    def newest(self) -> Run | None:
        done = [r for r in self.runs if r.status == COMPLETE and not r.samples.empty]
        return done[-1] if done else None


@dataclass
class Published:
    out: Path
    written: list[str]
    kept: list[str]
    removed: list[str]
    left_out: list[str]


# ------------------------------------------------------------------ reading the stores

def read(stores: Iterable[str | Path]) -> tuple[list[Run], list[str]]:
    """Every run below the stores, once each (by run id), oldest first; and the ones
    that could not be read, with why."""
    return hist.read_runs(stores, complete_only=False)


def machines(runs: list[Run]) -> list[MachineRuns]:
    """Runs by (configuration, machine), each with its histories (complete runs only)."""
    grouped: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        grouped.setdefault((configuration_of(run.meta) or UNNAMED, machine_of(run.meta)), []).append(run)
    out = []
    for (conf, name), members in sorted(grouped.items()):
        m = MachineRuns(conf, name, members)
        m.trends = _trends(m)
        out.append(m)
    return out


def _trends(m: MachineRuns) -> list[Trend]:
    complete = [r for r in m.runs if r.status == COMPLETE and not r.samples.empty]
    groups = hist.groups(complete)
    suites = [k[1] for k in groups]
    out = []
    for key, members in groups.items():
        h = hist.build(members, key)
        name = safe_name(key[1] or "suite") + (f"-{key[2]}" if suites.count(key[1]) > 1 else "")
        out.append(Trend(key[1], f"{m.folder}/trend-{name}.html", h, hist.point_changes(h)))
    return out


# ------------------------------------------------------------------ digests

def run_digest(run: Run) -> str:
    """What a run's report is made from: its record and every sample."""
    h = hashlib.sha256(json.dumps(run.meta, sort_keys=True, default=str).encode())
    try:
        h.update(pd.util.hash_pandas_object(run.samples, index=False).to_numpy().tobytes())
    except TypeError:                 # an unhashable cell: the frame's text stands in
        h.update(run.samples.to_csv(index=False).encode())
    return h.hexdigest()


#: the cxlbench package's folder: its code and data make the pages (code_files)
PACKAGE = Path(__file__).resolve().parents[1]


def code_files() -> list[Path]:
    """What a page is made by: the templates, and the package's code and data (the
    report draws; analysis picks the headlines, finds the changes and judges; results
    reads; units formats), so all of it, not the report's folder alone."""
    code = [p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts]
    return sorted([*TEMPLATES.iterdir(), *code])


def code_digest() -> str:
    """The version and code_files(): a change to any renders every page again (a page
    made by older code is not kept because its runs are the same)."""
    h = hashlib.sha256(f"{__version__}/{SITE_FORMAT}".encode())
    for path in code_files():
        h.update(str(path.relative_to(PACKAGE)).encode() + path.read_bytes())
    return h.hexdigest()


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------------ links

def href(page: str, target: str) -> str:
    """`target` (a path from the site's root) as a link relative to `page`."""
    return posixpath.relpath(target, posixpath.dirname(page) or ".")


def nav(page: str, crumbs: list[tuple[str, str]]) -> Nav:
    """The site's bar: the index, then the way down to this page."""
    return [(href(page, target), text) for target, text in [("index.html", "all machines"), *crumbs]]


# ------------------------------------------------------------------ figures

@dataclass
class Headline:
    figure: Figure
    better: str
    values: list[float]        # the figure's point over the history of its suite, oldest first
    run_id: str
    suite: str


def headlines(m: MachineRuns) -> list[Headline]:
    """The headline figures of the machine's newest complete run, each with its trend."""
    run = m.newest()
    if run is None:
        return []
    samples = measured_whole(run.samples, run.meta)      # a case that failed part-way has no figure
    pts = points(repetitions(samples))
    better = {(fam, met): d.get("better", "lower") for fam, f in (run.meta.get("families") or {}).items()
              for met, d in (f.get("metrics") or {}).items()}
    trend = next((t for t in m.trends if run.run_id in t.history.paths), None)
    out = []
    for f in figures(samples, run.meta, pts):
        values: list[float] = []
        if trend is not None:
            s = trend.history.series(f"{f.point}:{f.metric}")
            values = s["median"].astype(float).tolist()
        out.append(Headline(f, better.get((f.family, f.metric), "lower"), values, run.run_id,
                            hist.suite_name(run.meta)))
    return out


def _headline_view(h: Headline, i: int) -> dict[str, Any]:
    f = h.figure
    arrow = "↓" if h.better == "lower" else "↑"
    return {"tier": f.tier, "column": f.column, "label": f.label, "value": format_number(f.median),
            "interval": (f"{format_number(f.lo)}–{format_number(f.hi)}"
                         if math.isfinite(f.lo) and math.isfinite(f.hi) else ""),
            "unit": f.unit, "better": h.better, "arrow": arrow,
            "spark": sparkline(h.values, f"{f.tier} {f.column}: {len(h.values)} runs, oldest to newest",
                               PALETTE[i % len(PALETTE)])}


def _headline_json(h: Headline) -> dict[str, Any]:
    f = h.figure

    def num(x: float) -> float | None:
        return float(x) if x is not None and math.isfinite(x) else None
    return {"tier": f.tier, "family": f.family, "metric": f.metric, "label": f.label, "column": f.column,
            "median": num(f.median), "lo": num(f.lo), "hi": num(f.hi), "unit": f.unit, "better": h.better,
            "run_id": h.run_id, "suite": h.suite, "history": [num(v) for v in h.values]}


# ------------------------------------------------------------------ changes across every history

@dataclass
class Change:
    machine: MachineRuns
    trend: Trend
    change: hist.PointChange
    better: str

    @property
    def kind(self) -> str:
        worse = self.change.change.magnitude > 0 if self.better == "lower" else self.change.change.magnitude < 0
        return "regression" if worse else "improvement"


def changes(ms: list[MachineRuns]) -> list[Change]:
    out = []
    for m in ms:
        for t in m.trends:
            better = dict(zip(t.history.rows["point"], t.history.rows["better"]))
            out += [Change(m, t, c, str(better.get(c.point, "lower"))) for c in t.changes]
    return sorted(out, key=lambda c: (c.kind != "regression", -abs(c.change.change.magnitude)))


# ------------------------------------------------------------------ pages

def _render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(version=__version__, css=_css(), **context)


def run_page(m: MachineRuns, run: Run) -> Page:
    path = m.run_page(run)
    crumbs = [(m.page, f"{m.configuration} / {m.name}"), (path, run.run_id)]

    def render() -> str:
        return environment().get_template("run.html").render(**run_context(run), site_nav=nav(path, crumbs))
    return Page(path, _digest("run", run_digest(run), crumbs), render)


def trend_page(m: MachineRuns, t: Trend, digests: dict[str, str]) -> Page:
    crumbs = [(m.page, f"{m.configuration} / {m.name}"), (t.page, f"history of {t.suite or 'its runs'}")]
    links = {r.run_id: href(t.page, m.run_page(r)) for r in m.runs}

    def render() -> str:
        ctx = trend_context(t.history, t.changes, run_links=links)
        return environment().get_template("trend.html").render(**ctx, site_nav=nav(t.page, crumbs))
    inputs = _digest("trend", [digests[r] for r in t.history.paths], [m.__dict__ for m in t.history.markers],
                     crumbs)
    return Page(t.page, inputs, render)


def machine_page(m: MachineRuns, digests: dict[str, str]) -> Page:
    def render() -> str:
        newest = m.newest() or m.runs[-1]
        facts = [("configuration", m.configuration), ("CPU", _cpu(newest.meta)), ("runs", str(len(m.runs)))]
        trends = [{"href": href(m.page, t.page), "suite": t.suite or "—", "runs": len(t.history.runs),
                   "steps": len(t.changes), "identity": t.history.identity} for t in m.trends]
        runs = [{"href": href(m.page, m.run_page(r)), "run_id": r.run_id, "started": _short(r.meta.get("started")),
                 "suite": hist.suite_name(r.meta) or "—", "label": r.meta.get("label") or "",
                 "status": r.status} for r in reversed(m.runs)]
        return _render("site_machine.html", title=f"{m.name} ({m.configuration})",
                       site_nav=nav(m.page, [(m.page, f"{m.configuration} / {m.name}")]), facts=facts,
                       headlines=[_headline_view(h, i) for i, h in enumerate(headlines(m))],
                       trends=trends, runs=runs)
    return Page(m.page, _digest("machine", [digests[r.run_id] for r in m.runs]), render)


def index_page(ms: list[MachineRuns], pairs: list[tuple[str, str]], has_fleet: bool, left: list[str],
               digests: dict[str, str]) -> Page:
    def render() -> str:
        confs: dict[str, list[dict[str, Any]]] = {}
        for m in ms:
            newest = m.newest()
            confs.setdefault(m.configuration, []).append({
                "href": href("index.html", m.page), "name": m.name, "runs": len(m.runs),
                "suites": ", ".join(sorted({hist.suite_name(r.meta) or "—" for r in m.runs})),
                "newest": _short(newest.meta.get("started")) if newest else "no complete run",
                "headlines": [_headline_view(h, i) for i, h in enumerate(headlines(m))]})
        suites: dict[str, set[str]] = {}
        for m in ms:
            for r in m.runs:
                suites.setdefault(hist.suite_name(r.meta) or "—", set()).add(f"{m.configuration} / {m.name}")
        found = changes(ms)
        return _render("site_index.html", title="results", configurations=confs, machines=len(ms),
                       suites=[(s, sorted(v)) for s, v in sorted(suites.items())],
                       runs=sum(len(m.runs) for m in ms),
                       regressions=sum(c.kind == "regression" for c in found), steps=len(found),
                       compare=_compare_links(pairs) if has_fleet else [],
                       left_out=left, site_nav=nav("index.html", []))
    return Page("index.html", _digest("index", sorted(digests.values()), pairs, has_fleet, left), render)


def _compare_links(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("compare/index.html", "every configuration: the matrix")] + \
        [(pair_page(a, b), f"{b} against {a}") for a, b in pairs]


def changes_page(ms: list[MachineRuns], digests: dict[str, str]) -> Page:
    path = "changes.html"

    def render() -> str:
        rows = [{"kind": c.kind, "machine": f"{c.machine.configuration} / {c.machine.name}",
                 "machine_href": href(path, c.machine.page), "trend_href": href(path, c.trend.page),
                 "suite": c.trend.suite or "—", "figure": c.change.label,
                 "run_href": href(path, c.machine.run_page(_run(c.machine, c.change.run_id))),
                 "run_id": c.change.run_id, "run_n": c.change.position + 1,
                 "change": f"{c.change.change.magnitude * 100:+.1f}%", "p": f"{c.change.change.pvalue:.3f}"}
                for c in changes(ms)]
        env = [{"machine": f"{m.configuration} / {m.name}", "trend_href": href(path, t.page),
                "suite": t.suite or "—", "run": e.position + 1, "text": str(e)}
               for m in ms for t in m.trends for e in t.history.changes]
        return _render("site_changes.html", title="regressions and change points", rows=rows, env=env,
                       histories=sum(len(m.trends) for m in ms), site_nav=nav(path, [(path, "changes")]))
    return Page(path, _digest("changes", sorted(digests.values())), render)


def _run(m: MachineRuns, run_id: str) -> Run:
    return next(r for r in m.runs if r.run_id == run_id)


def pair_page(a: str, b: str) -> str:
    return f"compare/{safe_name(a)}--{safe_name(b)}.html"


def fleet_pages(ms: list[MachineRuns], fleet: FleetPages, digests: dict[str, str]) -> list[Page]:
    """The matrix over every configuration and each pair side by side; a page's digest
    is its configurations' newest complete runs and the fleet records."""
    runs = [r for m in ms for r in m.runs]
    newest = {m.configuration: [] for m in ms}
    for m in ms:
        if (r := m.newest()) is not None:
            newest[m.configuration].append(digests[r.run_id])
    confs = [c for c, v in newest.items() if v]
    matrix = "compare/index.html"
    pages = [Page(matrix, _digest("matrix", newest, fleet.inputs),
                  lambda: fleet.matrix(runs, nav(matrix, [(matrix, "configurations")])))]
    for a, b in combinations(confs, 2):
        path = pair_page(a, b)
        pages.append(Page(path, _digest("pair", newest[a], newest[b], fleet.inputs),
                          lambda a=a, b=b, path=path: fleet.pair(runs, a, b, nav(path, [
                              (matrix, "configurations"), (path, f"{b} against {a}")]))))
    return pages


def index_json(ms: list[MachineRuns], pages: list[Page], stores: list[str], left: list[str]) -> dict[str, Any]:
    """The site for tools: every machine, run, page and headline figure (unit, direction)."""
    return {
        "format": SITE_FORMAT, "generator": f"cxlbench {__version__}", "stores": stores,
        "pages": sorted(p.path for p in pages),
        "machines": [{
            "configuration": m.configuration, "name": m.name, "page": m.page,
            "trends": [{"suite": t.suite, "page": t.page, "runs": len(t.history.runs), "identity": t.history.identity,
                        "change_points": len(t.changes)} for t in m.trends],
            "headlines": [_headline_json(h) for h in headlines(m)]} for m in ms],
        "runs": [{"run_id": r.run_id, "configuration": m.configuration, "machine": m.name,
                  "suite": hist.suite_name(r.meta), "label": r.meta.get("label"), "status": r.status,
                  "started": r.meta.get("started"), "page": m.run_page(r)} for m in ms for r in m.runs],
        "changes": [{"kind": c.kind, "configuration": c.machine.configuration, "machine": c.machine.name,
                     "suite": c.trend.suite, "figure": c.change.label, "run_id": c.change.run_id,
                     "magnitude": c.change.change.magnitude, "pvalue": c.change.change.pvalue,
                     "better": c.better} for c in changes(ms)],
        "left_out": left,
    }


def _cpu(meta: dict[str, Any]) -> str:
    cpu = ((meta.get("machine") or {}).get("cpu") or {})
    return str(cpu.get("model") or "—")


def _short(when: Any) -> str:
    try:
        return f"{pd.Timestamp(when):%Y-%m-%d %H:%M}"
    except (ValueError, TypeError):
        return "—"


# ------------------------------------------------------------------ the site

def plan(runs: list[Run], left: list[str], stores: list[str], fleet: FleetPages | None = None) -> list[Page]:
    """Every page of the site with the digest of its inputs; nothing rendered yet."""
    ms = machines(runs)
    digests = {r.run_id: run_digest(r) for r in runs}
    confs = list(dict.fromkeys(m.configuration for m in ms if m.newest() is not None))
    pairs = list(combinations(confs, 2)) if fleet is not None else []
    pages = [index_page(ms, pairs, fleet is not None, left, digests), changes_page(ms, digests)]
    for m in ms:
        pages.append(machine_page(m, digests))
        pages += [trend_page(m, t, digests) for t in m.trends]
        pages += [run_page(m, r) for r in m.runs]
    if fleet is not None and confs:
        pages += fleet_pages(ms, fleet, digests)
    tools = index_json(ms, pages, stores, left)
    pages.append(Page("index.json", _digest("json", tools), lambda: json.dumps(tools, indent=1) + "\n"))
    return pages


def write(pages: list[Page], out: str | Path) -> tuple[list[str], list[str], list[str]]:
    """Render the pages whose inputs changed (or whose file is gone); remove the pages
    the last publish made that this one does not. Returns (written, kept, removed)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ResultsError(f"{out} is not a folder; pass -o a folder for the site")
    out.mkdir(parents=True, exist_ok=True)
    before = _manifest(out)
    code = code_digest()
    old = before.get("pages", {}) if before.get("code") == code else {}
    written, kept = [], []
    for page in pages:
        target = out / page.path
        if old.get(page.path) == page.inputs and target.exists():
            kept.append(page.path)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, page.render().encode("utf-8"))
        written.append(page.path)
    now = {p.path for p in pages}
    removed = sorted(p for p in before.get("pages", {}) if p not in now and _inside(out, p))
    for path in removed:
        (out / path).unlink(missing_ok=True)
    manifest = {"format": SITE_FORMAT, "code": code, "pages": {p.path: p.inputs for p in pages}}
    atomic_write(out / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return written, kept, removed


def _manifest(out: Path) -> dict[str, Any]:
    try:
        doc = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and isinstance(doc.get("pages"), dict) else {}


def _inside(out: Path, rel: str) -> bool:
    """A path from a manifest that stays within the site (a damaged manifest deletes nothing else)."""
    root = out.resolve()
    return (root / rel).resolve().is_relative_to(root)


def publish(stores: list[str | Path], out: str | Path, fleet: FleetPages | None = None) -> Published:
    runs, left = read(stores)
    written, kept, removed = write(plan(runs, left, [str(s) for s in stores], fleet), out)
    return Published(Path(out), written, kept, removed, left)


__all__ = ["publish", "plan", "write", "read", "machines", "FleetPages", "Published", "MANIFEST"]
