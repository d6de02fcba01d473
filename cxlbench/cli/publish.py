"""`cxlbench publish STORE... -o SITE/`: every run in the stores as one static site.

The site itself is cxlbench.report.site; the fleet's pages (the configuration x tier
matrix, and configurations side by side) come from cxlbench.fleet.page, a layer
above the report, so this command hands them in.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from typing import TYPE_CHECKING

from cxlbench.cli.commands import UserError

if TYPE_CHECKING:      # the report layer needs jinja2: every command's parser must load without it
    from cxlbench.fleet.page import FleetReport
    from cxlbench.fleet.record import FleetRecord
    from cxlbench.report.site import Nav
    from cxlbench.results.store import Run


class FleetPages:
    """The fleet report's pages over the site's runs, with the stores' newest fleet record
    (`inputs`: what they show beside the runs: the stores' names and that record)."""

    def __init__(self, stores: list[str]):
        from cxlbench.fleet import record as records
        self.stores = stores
        found = [r for s in stores for r in records.load_all(str(s))]
        self.record: FleetRecord | None = max(found, key=lambda r: (r.submitted, r.fleet_id)) if found else None
        text = json.dumps([stores, asdict(self.record) if self.record else None], sort_keys=True)
        self.inputs = hashlib.sha256(text.encode()).hexdigest()

    def _report(self, runs: list[Run], compare: tuple[str, str] | None = None) -> FleetReport:
        from cxlbench.fleet import page as fleet_page
        return fleet_page.of_runs(", ".join(map(str, self.stores)), runs, self.record, compare=compare)

    def matrix(self, runs: list[Run], nav: Nav) -> str:
        from cxlbench.fleet import page as fleet_page
        return fleet_page.html(self._report(runs), nav)

    def pair(self, runs: list[Run], a: str, b: str, nav: Nav) -> str:
        from cxlbench.fleet import page as fleet_page
        return fleet_page.html(self._report(runs, (a, b)), nav)


def publish(stores: list[str], out: str, quiet: bool = False) -> int:
    if not stores:
        raise UserError("publish needs at least one store (a results folder or a store URL)")
    if not out.strip():
        raise UserError("publish -o needs the site's folder, not an empty name")
    from cxlbench.results import location
    for store in stores:
        if location.is_url(store):
            location.check_reachable(store)      # no credentials or bucket: one line, not botocore's
    _site_apart(out, [s for s in stores if not location.is_url(s)])
    from cxlbench.report import site
    done = site.publish(stores, out, FleetPages([str(s) for s in stores]))
    if not quiet:
        print(f"published {Path(out) / 'index.html'}: {len(done.written)} page(s) written, "
              f"{len(done.kept)} unchanged, {len(done.removed)} removed")
        if done.left_out:
            print(f"left out {len(done.left_out)} run(s): " + "; ".join(done.left_out[:3]) +
                  (" ..." if len(done.left_out) > 3 else ""))
    return 0


def _site_apart(out: str, local_stores: list[str]) -> None:
    """The site's folder shares nothing with measured results: publishing removes the
    pages it made before, and a store inside it, or it inside a store or a run, would
    mix pages into runs (and let a damaged manifest name a run's file)."""
    from cxlbench.cli.argtypes import run_above
    from cxlbench.results.store import RUN_JSON
    site = Path(out).resolve()
    for store in local_stores:
        s = Path(store).resolve()
        if site == s or site.is_relative_to(s) or s.is_relative_to(site):
            raise UserError(f"publish -o {out}: the site's folder and the results folder {store} overlap; "
                            "publish into a folder of its own")
    run = run_above(str(site / "index.html"))
    if run or (site.is_dir() and next(site.rglob(RUN_JSON), None) is not None):
        raise UserError(f"publish -o {out}: {run or out} holds measured runs; publish into a folder of its own")


def add_parser(sub) -> None:
    from cxlbench.cli.fleet_cli import store_options
    p = sub.add_parser("publish", help="every run in the stores as one static site (index, machines, "
                                       "trends, runs, changes, configurations compared)")
    p.add_argument("stores", nargs="+", metavar="STORE", help="results folders or store URLs (s3://...)")
    p.add_argument("-o", "--out", required=True, metavar="SITE",
                   help="the site's folder; publishing again renders only the pages whose runs changed")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    store_options(p)
    p.set_defaults(func=lambda a: publish(a.stores, a.out, a.quiet))


__all__ = ["publish", "add_parser", "FleetPages"]
