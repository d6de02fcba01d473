"""`cxlbench publish`: a static site over stores, read in a real browser from file://
and from a subfolder of a web server, published again incrementally, and from a
store at a URL. The store is tests/site_store.py's lab: two configurations, a
machine's history with a step in it, and a fleet's runs with its record."""
from __future__ import annotations

import functools
import json
import shutil
import threading
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pandas as pd
import pytest

from cxlbench.cli.main import main
from cxlbench.report import site
from tests import browser
from tests.s3server import s3_endpoint, s3_store  # noqa: F401  (fixtures)
from tests.site_store import HISTORY, START, STEP_FROM, add_run, lab_store

PAGES_OF_THE_LAB = 1 + 1 + 1 + 2 + 4 + 4 + (HISTORY + 3)   # index, json, changes, compare x2, machines, trends, runs


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(store, site) built once for the module's read-only tests."""
    root = tmp_path_factory.mktemp("lab")
    store = lab_store(root / "store")
    assert main(["publish", str(store), "-o", str(root / "site"), "-q"]) == 0
    return store, root / "site"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [v for k, v in attrs if k in ("href", "src") and v is not None]


def links(page: Path) -> list[str]:
    p = _Links()
    p.feed(page.read_text())
    return p.found


def pages(site_dir: Path) -> list[Path]:
    return sorted(site_dir.rglob("*.html"))


# ------------------------------------------------------------------ what is in it

def test_the_site_holds_an_index_each_machine_its_trend_and_runs_changes_and_comparisons(lab):
    _, out = lab
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {site.MANIFEST}
    assert len(names) == PAGES_OF_THE_LAB
    assert {"index.html", "index.json", "changes.html", "compare/index.html",
            "compare/cxl-a--cxl-b.html"} <= names
    for conf, machine in (("cxl-a", "a1"), ("cxl-a", "a2"), ("cxl-b", "b1"), ("cxl-b", "b2")):
        assert {f"machines/{conf}/{machine}/index.html", f"machines/{conf}/{machine}/trend-ci.html"} <= names
    assert sum(n.startswith("machines/cxl-a/a1/runs/") for n in names) == HISTORY


def test_every_link_of_every_page_is_relative_and_lands_on_a_file_of_the_site(lab):
    _, out = lab
    root = out.resolve()
    for page in pages(out):
        for link in links(page):
            if link.startswith(("#", "data:")):
                continue
            assert not urlparse(link).scheme and not link.startswith("/"), f"{page}: {link} is not relative"
            target = (page.parent / unquote(link.split("#")[0])).resolve()
            assert target.is_relative_to(root) and target.is_file(), f"{page}: {link} leads nowhere in the site"


def test_the_index_json_names_machines_runs_pages_and_headlines_with_unit_and_direction(lab):
    _, out = lab
    doc = json.loads((out / "index.json").read_text())
    assert [(m["configuration"], m["name"]) for m in doc["machines"]] == [
        ("cxl-a", "a1"), ("cxl-a", "a2"), ("cxl-b", "b1"), ("cxl-b", "b2")]
    assert len(doc["runs"]) == HISTORY + 3 and all((out / r["page"]).is_file() for r in doc["runs"])
    assert all((out / p).is_file() for p in doc["pages"])
    a1 = doc["machines"][0]
    lat = next(h for h in a1["headlines"] if h["tier"] == "ddr0" and h["metric"] == "latency_ns")
    bw = next(h for h in a1["headlines"] if h["tier"] == "ddr0" and h["metric"] == "bandwidth_GBps")
    assert (lat["unit"], lat["better"], bw["unit"], bw["better"]) == ("ns", "lower", "GB/s", "higher")
    assert len(lat["history"]) == HISTORY and lat["history"][-1] > 1.1 * lat["history"][0]


def test_the_step_in_the_history_is_a_regression_at_its_run_on_the_changes_page(lab):
    _, out = lab
    doc = json.loads((out / "index.json").read_text())
    found = {(c["machine"], c["figure"].split()[0], c["kind"]) for c in doc["changes"]}
    assert ("a1", "ddr0", "regression") in found
    step_run = next(r["run_id"] for r in doc["runs"] if r["label"] == f"nightly-{STEP_FROM}")
    assert {c["run_id"] for c in doc["changes"]} == {step_run}
    assert all(c["kind"] == "regression" for c in doc["changes"])       # latency up, bandwidth down
    text = (out / "changes.html").read_text()
    assert "regression" in text and step_run in text


def test_the_comparison_pages_hold_the_fleets_nodes_the_matrix_and_the_pair(lab):
    _, out = lab
    matrix = (out / "compare/index.html").read_text()
    assert matrix.count('class="outcome-measured"') == 3 and "cxl-a: a1, a2" in matrix
    pair = (out / "compare/cxl-a--cxl-b.html").read_text()
    assert "cxl-b against cxl-a" in pair and "cxl-b against cxl-a" not in matrix


# ------------------------------------------------------------------ in a browser

def _walk(start: str, inside: str):
    """index -> machine a1 -> its trend -> a run -> back three times; then the other
    pages; with every request and every error the browser saw."""
    async def go():
        async with browser.Browser() as b:
            visited = [await b.open(start)]
            visited.append(await b.click('a[href="machines/cxl-a/a1/index.html"]'))
            visited.append(await b.click('a[href="trend-ci.html"]'))
            visited.append(await b.click('#run-table a[href^="runs/"]'))
            assert "cxlbench report" in await b.js("document.querySelector('.brand').textContent")
            for _ in range(3):
                visited.append(await b.back())
            for target in ("changes.html", "compare/index.html", "compare/cxl-a--cxl-b.html"):
                visited.append(await b.open(urljoin(start, target)))
                visited += [link for link in await b.links() if not link.startswith("data:")]
            return visited, b.seen
    visited, seen = browser.run(go())
    outside = [u for u in seen.requests + visited if not u.startswith((inside, "data:", "about:"))]
    assert outside == [], f"requests outside the site: {outside}"
    assert seen.errors == [], f"the browser reported: {seen.errors}"
    assert start in seen.requests and any("/runs/" in u for u in seen.requests)    # the watch saw the loads
    return visited


needs_chromium = pytest.mark.skipif(browser.chromium() is None,
                                    reason="no chromium (apt-get install -y chromium) to read the site with")


@needs_chromium
def test_a_browser_walks_the_site_from_file_urls_and_comes_back(lab):
    _, out = lab
    index = out.resolve().as_uri() + "/index.html"
    visited = _walk(index, out.resolve().as_uri() + "/")
    assert visited[1].endswith("/machines/cxl-a/a1/index.html")
    assert visited[2].endswith("/machines/cxl-a/a1/trend-ci.html")
    assert "/machines/cxl-a/a1/runs/" in visited[3]
    assert visited[4:7] == [visited[2], visited[1], visited[0]]


@needs_chromium
def test_a_browser_walks_the_site_served_from_a_subfolder_and_asks_only_for_its_files(lab, tmp_path):
    _, out = lab
    shutil.copytree(out, tmp_path / "www" / "bench" / "site")
    asked: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, fmt, *args):
            asked.append(self.path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(tmp_path / "www")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/bench/site/"
        visited = _walk(base + "index.html", base)
    finally:
        server.shutdown()
    assert visited[4:7] == [visited[2], visited[1], visited[0]]
    assert asked and all(p.startswith("/bench/site/") for p in asked), asked


# ------------------------------------------------------------------ incremental

def _publish(store: Path, out: Path) -> site.Published:
    from cxlbench.cli.publish import FleetPages
    return site.publish([store], out, FleetPages([str(store)]))


def test_republishing_after_one_new_run_renders_only_the_pages_it_touches(lab, tmp_path):
    store, built = lab
    shutil.copytree(built, tmp_path / "site")
    out = tmp_path / "site"
    assert _publish(store, out).written == []                      # nothing new: nothing rendered
    new = add_run(store, "cxl-b", "b2", START + pd.Timedelta(days=3), seed=999)
    try:
        again = _publish(store, out)
    finally:
        shutil.rmtree(new)                                         # the lab is the module's: put it back
    run_page = next(n for n in again.written if n.startswith("machines/cxl-b/b2/runs/"))
    assert new.name in run_page
    assert sorted(again.written) == sorted([
        "index.html", "index.json", "changes.html", "compare/index.html", "compare/cxl-a--cxl-b.html",
        "machines/cxl-b/b2/index.html", "machines/cxl-b/b2/trend-ci.html", run_page])
    assert len(again.kept) == PAGES_OF_THE_LAB - 7 and again.removed == []
    gone = _publish(store, out)                                    # a run taken out: its page goes too
    assert gone.removed == [run_page] and not (out / run_page).exists()


def test_a_changed_template_or_a_lost_page_is_rendered_again(lab, tmp_path):
    store, built = lab
    shutil.copytree(built, tmp_path / "site")
    out = tmp_path / "site"
    victim = next(out.glob("machines/cxl-a/a2/runs/*.html"))
    victim.unlink()
    assert _publish(store, out).written == [victim.relative_to(out).as_posix()]
    manifest = json.loads((out / site.MANIFEST).read_text())
    manifest["code"] = "an older cxlbench"
    (out / site.MANIFEST).write_text(json.dumps(manifest))
    assert len(_publish(store, out).written) == PAGES_OF_THE_LAB


# ------------------------------------------------------------------ a store at a URL, bad input

def test_a_store_at_a_url_publishes_the_same_pages(lab, tmp_path, s3_store):
    from cxlbench.results import location
    store, built = lab
    for f in sorted(p for p in store.rglob("*") if p.is_file()):
        location.write_bytes(location.join(s3_store, f.relative_to(store).as_posix()), f.read_bytes())
    out = tmp_path / "site"
    assert main(["publish", s3_store, "-o", str(out), "-q"]) == 0
    mine = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    assert mine == {p.relative_to(built).as_posix() for p in built.rglob("*.html")}
    assert json.loads((out / "index.json").read_text())["stores"] == [s3_store]


def test_publish_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert main(["publish", str(tmp_path / "nothing"), "-o", str(tmp_path / "site")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "file").write_text("x")
    lab_dir = tmp_path / "store"
    add_run(lab_dir, "cxl-a", "a1", START, seed=1)
    assert main(["publish", str(lab_dir), "-o", str(tmp_path / "file")]) == 2
    assert "not a folder" in capsys.readouterr().err
    # the site never shares a folder with measured runs: pages would mix into them, and a
    # damaged manifest could name a run's file for removal
    for site in (lab_dir, tmp_path, next(lab_dir.glob("*/*"))):
        assert main(["publish", str(lab_dir), "-o", str(site)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("overlap" in err or "holds measured runs" in err)


def test_a_machines_headlines_take_no_figure_from_a_case_that_failed_part_way(tmp_path):
    """The index's headline for a machine is its newest run's figure: a case of that run
    that failed part-way keeps its samples in the run, but has no figure to head with."""
    path = add_run(tmp_path / "store", "cxl-a", "a1", START, seed=1)
    meta = json.loads((path / "run.json").read_text())
    for case in meta["cases"]:
        if case["benchmark"] == "latency":
            case.update(status="failed", reason="worker exited with code 255")
    (path / "run.json").write_text(json.dumps(meta))
    runs, _ = site.read([tmp_path / "store"])
    (m,) = site.machines(runs)
    families = {h.figure.family for h in site.headlines(m)}
    assert "bandwidth" in families and "latency" not in families


def test_a_page_is_made_again_when_any_code_that_shapes_it_changes():
    """The digest covered the report's folder only: a fix to how headlines are picked
    or changes found (analysis/) left a published site's pages as the old code made
    them."""
    from pathlib import Path
    names = {p.relative_to(Path(site.__file__).resolve().parents[1]).as_posix() for p in site.code_files()
             if "templates" not in p.parts}
    assert {"analysis/headlines.py", "analysis/history.py", "analysis/stats.py", "results/store.py",
            "units.py", "report/site.py", "analysis/thresholds.toml"} <= names
    assert any(p.suffix == ".html" for p in site.code_files())           # the templates
