"""The HTML report: escaping, structure (html5lib strict parse), self-containment,
sections, byte-stable output, and a real browser (headless Chromium from file://)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cxlbench import report
from cxlbench.results.schema import PARTIAL

from fakes import synthetic as syn

try:
    import html5lib
except ImportError:          # a test dependency (pyproject's test extra); without it, fewer checks
    html5lib = None

EVIL_HOST = 'evil<script>alert("host")</script>&<b>bold</b>'
EVIL_LABEL = "<img src=x onerror=alert(1)>label"
EVIL_CPU = "CPU <i>model</i> \"quoted\" 'single'"
EVIL_REASON = "<script>alert('reason')</script> no hugetlb pages"


SMALL = dict(working_sets=[2**k for k in range(13, 31, 2)], threads=(1, 2, 4))


def evil_results(rng, **kw):
    res = syn.suite_results(rng, **SMALL, **kw)
    res.append(syn.case_result("latency", "ddr0", {"working_set_bytes": 2**33, "page": "1g",
                                                   "pattern": "random"}, {}, status="skipped",
                               reason=EVIL_REASON))
    return res


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    rng = np.random.default_rng(42)
    m, tiers = syn.machine(hostname=EVIL_HOST, cpu_model=EVIL_CPU, hypervisor="KVM")
    a = syn.write_run(root, evil_results(rng), m=m, tiers=tiers, label=EVIL_LABEL)
    slower = lambda c, metric: 1.15 if c.tier_kind == "cxl" and metric == "latency_ns" else 1.0  # noqa: E731
    b = syn.write_run(root, evil_results(rng, factor=slower), m=m, tiers=tiers, label="second")
    return a, b


@pytest.fixture(scope="module")
def run_html(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports") / "run.html"
    return report.render([runs[0]], out)


@pytest.fixture(scope="module")
def compare_html(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports") / "compare.html"
    return report.render(list(runs), out)


def _etree(text: str):
    if html5lib is not None:
        # strict: any HTML5 parse error (misnested tags, bad attributes, stray end tags) raises
        return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)
    import xml.etree.ElementTree as ET
    from html.parser import HTMLParser
    root = ET.Element("html")

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            el = ET.SubElement(root, tag, {k: v or "" for k, v in attrs})
            if tag == "html":
                root.attrib.update(el.attrib)
    Collect().feed(text)
    return root


def test_html5lib_is_installed():
    if html5lib is None:
        pytest.skip("html5lib is not installed: the strict HTML5 parse is not run (pip install html5lib)")


def validate(text: str) -> None:
    """Structural checks: a strict HTML5 parse (any parse error raises), unique ids,
    in-page links that resolve, and nothing fetched from outside the file."""
    doc = _etree(text)
    ids = [e.get("id") for e in doc.iter() if e.get("id")]
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, f"duplicate ids: {sorted(dup)[:5]}"
    for e in doc.iter():
        href = e.get("href") or e.get("{http://www.w3.org/1999/xlink}href")
        if href and href.startswith("#"):
            assert href[1:] in ids, f"dangling link {href}"
        for attr in ("src", "href", "action", "data"):
            v = e.get(attr) or ""
            assert not re.match(r"^(https?:)?//", v), f"external reference {attr}={v[:60]}"
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text), "external url() in CSS"
    assert "@import" not in text
    assert doc.find(".//script") is None, "the report needs no script"
    assert doc.find(".//title") is not None and doc.get("lang") == "en"


def assert_escaped(text: str) -> None:
    assert "<script>alert" not in text
    assert "<img src=x" not in text
    assert "<b>bold</b>" not in text and "<i>model</i>" not in text
    assert "&lt;script&gt;alert(&#34;host&#34;)&lt;/script&gt;" in text or \
        "&lt;script&gt;alert(&quot;host&quot;)" in text
    assert "&lt;img src=x onerror=alert(1)&gt;label" in text


# ------------------------------------------------------------------ run report

def test_run_report_is_valid_self_contained_html(run_html):
    text = run_html.read_text()
    validate(text)
    assert text.count("<svg") >= 4
    assert len(text.encode()) < 2 * 2**20         # small: inline SVG, no plotting library


def test_markup_from_the_machine_is_escaped_everywhere(run_html, compare_html):
    for path in (run_html, compare_html):
        assert_escaped(path.read_text())


def test_run_report_sections(run_html):
    text = run_html.read_text()
    for anchor in ("machine", "summary", "family-latency", "family-bandwidth", "family-loaded-latency",
                   "not-measured", "provenance", "data", "tier-summary", "tiers", "environment-warnings"):
        assert f'id="{anchor}"' in text, anchor
    assert "Virtual machine (KVM)" in text and "Transparent huge pages: madvise" in text
    assert "SECDED (EDAC)" in text and "2MiB × 512 reserved" in text
    assert "no 1 GiB hugetlb pages reserved on node 0" in text and "worker died: signal 9" in text
    assert "&lt;script&gt;alert(&#39;reason&#39;)&lt;/script&gt; no hugetlb pages" in text
    assert "cxlbench run --suite quick" in text and "gcc 12.2.0" in text
    assert "L1d" in text and "L3" in text                     # cache sizes marked on latency charts
    assert "idle latency (ns)" in text and "peak read (GB/s)" in text and "triad (GB/s)" in text
    assert "loaded latency @80% of peak (ns)" in text
    assert 'id="partial-banner"' not in text


def test_tier_summary_values(runs):
    summary = report.run_context(syn_load(runs[0]))["summary"]
    titles = [f"{c['title']} ({c['unit']})" for c in summary["columns"]]
    assert titles == ["idle latency (ns)", "peak read (GB/s)", "peak triad (GB/s)",
                      "loaded latency @80% of peak (ns)", "write penalty (×)"]   # the families' headlines, then derived
    rows = {r["name"]: dict(zip(titles, r["cells"])) for r in summary["rows"]}
    assert list(rows) == ["ddr0", "cxl2"]
    ddr_idle = float(rows["ddr0"]["idle latency (ns)"]["value"].replace(",", ""))
    cxl_idle = float(rows["cxl2"]["idle latency (ns)"]["value"].replace(",", ""))
    assert 100 < ddr_idle < 200 and cxl_idle > 2 * ddr_idle      # the model: 110 ns (+TLB) vs 260 ns
    assert "512MiB working set, 4k pages" in rows["ddr0"]["idle latency (ns)"]["note"]
    assert float(rows["ddr0"]["peak read (GB/s)"]["value"]) > float(rows["ddr0"]["peak triad (GB/s)"]["value"])
    assert "80% of its" in rows["cxl2"]["loaded latency @80% of peak (ns)"]["note"]
    assert rows["ddr0"]["write penalty (×)"] is None             # no write_penalty benchmark here
    # The page turns it: a row per figure, a cell per tier in the tiers' order; a
    # figure no tier has is not a row of dashes.
    shown = {f"{f['title']} ({f['unit']})": f["cells"] for f in summary["figures"]}
    assert list(shown) == [t for t in titles if t != "write penalty (×)"]
    assert shown["idle latency (ns)"] == [rows["ddr0"]["idle latency (ns)"], rows["cxl2"]["idle latency (ns)"]]


def test_the_loaded_latency_cell_reads_the_nearest_curve_at_80_percent_of_its_own_peak():
    """Two initiators' curves on one tier: the far one peaks lower and sits higher. The
    cell is the near curve's latency at 80% of the near curve's peak, interpolated;
    pooled, the far curve's point nearest 80% of the near peak had been the figure."""
    results = []
    for initiator, idle, peak in (("cpu:node0", 100.0, 20.0), ("cpu:node1", 180.0, 10.0)):
        for threads, bw, lat in ((0, 0.0, idle), (8, peak * 0.5, idle * 1.2), (8, peak * 0.9, idle * 2.0),
                                 (8, peak, idle * 3.0)):
            p = {"delay": 0 if threads == 0 else int(1000 * (1 - bw / peak)) + 1, "load_threads": threads,
                 "mix": "read", "page": "4k"}
            results.append(syn.case_result("loaded_latency", "ddr0", p, {"latency_ns": [lat] * 3,
                                                                         "bandwidth_GBps": [bw] * 3},
                                           initiator=initiator))
    summary = report.run_context(syn.make_run(results))["summary"]
    row = next(r for r in summary["rows"] if r["name"] == "ddr0")
    title = [c["title"] for c in summary["columns"]].index("loaded latency @80% of peak")
    cell = row["cells"][title]
    # near curve: 80% of 20 = 16 GB/s, between (10, 120) and (18, 200): 120 + 6/8 × 80 = 180
    assert float(cell["value"]) == pytest.approx(180.0, rel=0.01)
    assert "cpu:node0" in cell["note"] and "of its 20.0 GB/s peak" in cell["note"]


def syn_load(path):
    from cxlbench.results.store import load_run
    return load_run(path)


def test_a_case_measured_with_a_warning_shows_it_beside_its_case_in_the_report_and_the_terminal():
    """Families record what may move a figure (ECC counts that moved during the case, a
    file on a filesystem held in memory, a step model that disagrees) as the case's
    warnings: run.json kept them and no reader showed them."""
    from dataclasses import replace
    from cxlbench.cli.tier_table import warning_lines
    results = syn.suite_results(np.random.default_rng(3), tiers=("ddr0",), working_sets=[1 << 30],
                                threads=(1,), kernels=("read",), pages=("4k",), loaded=False, extras=False)
    said = "during this case: EDAC mc0 corrected errors moved 0 → 3 <b>"
    run = syn.make_run([replace(r, info={"warnings": [said]}) if r.case.benchmark == "bandwidth" else r
                        for r in results])
    html = report.render_run_html(run)
    assert 'id="warned"' in html and "EDAC mc0 corrected errors moved 0 → 3 &lt;b&gt;" in html
    assert '<a href="#warned">Warnings</a>' in html
    bandwidth = [r.case.case_id for r in results if r.case.benchmark == "bandwidth"]
    which = bandwidth[0] if len(bandwidth) == 1 else f"{len(bandwidth)} cases"
    assert warning_lines(run.meta) == [f"warning: {said} ({which})"]
    quiet = report.render_run_html(syn.make_run(results))
    assert 'id="warned"' not in quiet and warning_lines(syn.make_run(results).meta) == []


def test_the_tier_summary_takes_no_figure_from_a_case_that_failed_part_way():
    """As the terminal's summary: a case's first repetitions, kept in the run, are not
    its figure; the family's own tables still show them."""
    from dataclasses import replace
    results = syn.suite_results(np.random.default_rng(3), tiers=("ddr0",), working_sets=[1 << 30],
                                threads=(1,), kernels=("read",), pages=("4k",), loaded=False, extras=False)
    cut = syn.make_run([replace(r, status="failed", reason="worker exited with code 255")
                        if r.case.benchmark == "latency" else r for r in results])
    summary = report.run_context(cut)["summary"]
    shown = {f"{f['title']} ({f['unit']})" for f in summary["figures"]}
    assert "peak read (GB/s)" in shown and "idle latency (ns)" not in shown
    whole = report.run_context(syn.make_run(results))["summary"]
    assert "idle latency (ns)" in {f"{f['title']} ({f['unit']})" for f in whole["figures"]}
    html = report.render_run_html(cut)              # the family's table keeps them, marked
    assert "(case failed)" in html and "(case failed)" not in report.render_run_html(syn.make_run(results))


def test_embedded_csv_holds_the_samples(run_html, runs):
    import io
    from urllib.parse import unquote
    import pandas as pd
    text = run_html.read_text()
    m = re.search(r'href="data:text/csv;charset=utf-8,([^"]*)" download="([^"]+)"', text)
    assert m and m.group(2).endswith("-samples.csv")
    csv = unquote(m.group(1).replace("&amp;", "&"))
    frame = pd.read_csv(io.StringIO(csv))
    samples = syn_load(runs[0]).samples
    assert len(frame) == len(samples)
    assert {"case_id", "metric", "value", "unit", "repetition"} <= set(frame.columns)
    # every digit: rounded to 6 figures, 268435456 B read back as 268435000
    assert frame["value"].tolist() == samples["value"].tolist()
    sizes = frame["working_set_bytes"].dropna()
    assert len(sizes) and sizes.isin([float(2**k) for k in range(10, 40)]).all()


def test_render_is_byte_stable(runs, tmp_path):
    a = report.render([runs[0]], tmp_path / "a.html").read_bytes()
    b = report.render([runs[0]], tmp_path / "b.html").read_bytes()
    assert a == b


def test_partial_run_says_so_at_the_top(tmp_path):
    rng = np.random.default_rng(1)
    path = syn.write_run(tmp_path, syn.suite_results(rng, tiers=("ddr0",), **SMALL), status=PARTIAL,
                         label="cut")
    text = report.render([path], tmp_path / "p.html").read_text()
    validate(text)
    banner = text.index('id="partial-banner"')
    assert banner < text.index('id="machine"')
    assert "This run is partial" in text


def test_unknown_family_falls_back_to_a_table_and_a_chart(tmp_path):
    rng = np.random.default_rng(2)
    res = [syn.case_result("mystery", "ddr0", {"knob": k, "flavour": f},
                           {"iops": syn.noisy(rng, 1000.0 * (k + 1), 0.02, 5)})
           for k in (1, 2, 4, 8) for f in ("a", "b")]
    res += [syn.case_result("oddball", "ddr0", {"mode": mode}, {"seconds": syn.noisy(rng, 2.0, 0.02, 5)})
            for mode in ("x", "y")]
    undescribed = {"mystery": {"metrics": {"iops": {"unit": "IO/s", "better": "higher"}}},
                   "oddball": {"metrics": {"seconds": {"unit": "s", "better": "lower"}}}}
    path = syn.write_run(tmp_path, res, label="new", families=undescribed)
    text = report.render([path], tmp_path / "u.html").read_text()
    validate(text)
    assert 'id="family-mystery"' in text and 'id="family-oddball"' in text
    assert "IOPS (IO/s, higher is better)" in text or "IOPS (IO/s" in text
    assert text.count("<svg") >= 2


def test_empty_run_renders(tmp_path):
    path = syn.write_run(tmp_path, [syn.case_result("bandwidth", "hbm0", {"kernel": "read"}, {},
                                                    status="skipped", reason="no GPU")], label="empty")
    text = report.render([path], tmp_path / "e.html").read_text()
    validate(text)
    assert "<td>no GPU</td>" in text
    assert 'class="empty">No measurements.</td>' in text   # the tier summary: nothing measured


def test_default_output_path_is_under_reports(runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = report.render(runs[0])
    assert path.parent == Path("reports") and path.suffix == ".html" and path.exists()


# ------------------------------------------------------------------ comparison report

def test_compare_report(compare_html):
    text = compare_html.read_text()
    validate(text)
    for anchor in ("runs", "verdicts", "family-latency", "family-bandwidth", "unmatched", "data",
                   "verdict-counts"):
        assert f'id="{anchor}"' in text, anchor
    assert 'class="verdict slower">slower' in text and 'class="verdict same">same' in text
    assert "second" in text and "ns, lower is better" in text and "GB/s, higher is better" in text
    assert text.count("<svg") >= 6


def test_compare_report_shows_machine_differences(tmp_path):
    rng = np.random.default_rng(3)
    a = syn.write_run(tmp_path, syn.suite_results(rng, tiers=("ddr0",), loaded=False, **SMALL), label="a")
    m, tiers = syn.machine(hostname="other", cpu_model="Other CPU", thp="always", cxl=False)
    b = syn.write_run(tmp_path, syn.suite_results(rng, tiers=("ddr0",), loaded=False, **SMALL), m=m,
                      tiers=tiers, label="b")
    text = report.render([a, b], tmp_path / "c.html").read_text()
    validate(text)
    assert 'id="machine-differences"' in text
    assert "cpu_model" in text and "Other CPU" in text and "thp_enabled" in text


# ------------------------------------------------------------------ in a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-domain-reliability", "--no-pings",
         "--disable-client-side-phishing-detection", "--disable-default-apps", "--disable-breakpad",
         "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
         # nothing may leave the machine: every host name resolves to nothing
         "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0"]


def chromium(args, tmp_path, name):
    user = tmp_path / f"profile-{name}"
    netlog = tmp_path / f"{name}-net.json"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={user}", f"--log-net-log={netlog}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return proc, netlog


def page_requests(netlog: Path) -> list[str]:
    """URLs the page itself asked for (the browser's own background requests aside)."""
    data = json.loads(netlog.read_text())
    start = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for e in data["events"]:
        p = e.get("params") or {}
        if e["type"] == start and "file://" in str(p.get("network_isolation_key", "")):
            urls.append(p.get("url", ""))
    return urls


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_in_headless_chromium(runs, tmp_path):
    out = report.render([runs[0]], tmp_path / "report.html")
    url = out.resolve().as_uri()
    proc, netlog = chromium(["--dump-dom", url], tmp_path, "dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    for anchor in ("machine", "tier-summary", "family-latency", "family-bandwidth", "not-measured",
                   "provenance", "data"):
        assert f'id="{anchor}"' in dom, anchor
    assert dom.count("<svg") >= 4 and "Download" in dom
    assert "<script>alert" not in dom and "&lt;script&gt;alert" in dom
    assert not [u for u in page_requests(netlog) if not u.startswith(("file:", "data:"))]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console
    shot = tmp_path / "report.png"
    proc, _ = chromium([f"--screenshot={shot}", "--window-size=1400,3000", url], tmp_path, "shot")
    assert proc.returncode == 0 and shot.exists()
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000      # a page, not a blank
    from PIL import Image
    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, 3000)
    colours = len(img.resize((140, 300)).getcolors(maxcolors=1 << 20) or [])
    assert colours > 50                                                 # text, tables and charts drawn


def test_counts_and_sizes_read_as_a_person_writes_them():
    from cxlbench.report.build import param_value
    from cxlbench.units import format_count
    assert param_value("n_params", 16777216) == "16.8M" and param_value("n_params", 512) == "512"
    assert param_value("array_bytes", 1 << 29) == "512MiB"
    assert [format_count(v) for v in (2, 4194304, 1.5e9, 250e6)] == ["2", "4.19M", "1.5G", "250M"]
    assert format_count(131392, " ") == "131 k"                   # the terminal summary's form


def test_a_bar_chart_of_long_case_names_keeps_room_for_its_bars():
    import warnings
    from cxlbench.report.plots import BAR_NAME_WIDTH, Chart, Series, bar_names, render
    names = [f"ddr0 · probe matmul_model_shape · dpu {d} · engine {e} · grads on ddr0 · params on ddr0"
             for d in (False, True) for e in ("offload", "fsdp2_cpu_offload", "none")] * 2
    chart = Chart("Training · TFLOP/s", "TFLOP/s", "", [Series("", names, [float(i) for i in range(12)])], bars=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # matplotlib warns when the names leave the axes no width
        svg = render(chart, "t")
    assert svg.startswith("<svg")
    assert all(len(line) <= BAR_NAME_WIDTH for n in bar_names(names) for line in n.split("\n"))
    assert bar_names(["hbm0 · none"]) == ["hbm0 · none"]        # a short name stays on one line


def test_a_dollar_in_a_run_label_is_drawn_as_written(tmp_path):
    """matplotlib reads text between two $ as mathtext: a comparison of runs labelled
    "base$1_$x^" and "new$2" ended in a 128-line ParseSyntaxException."""
    rng = np.random.default_rng(0)
    kw = dict(tiers=("ddr0",), working_sets=[2**14, 2**30], threads=(1, 2), kernels=("read",), loaded=False,
              extras=False)
    runs = [syn.write_run(tmp_path, syn.suite_results(rng, **kw), label=label) for label in ("base$1_$x^", "new$2")]
    html = report.render(runs, tmp_path / "x.html").read_text()
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert svgs and all("base$1_$x^" in s and "new$2" in s for s in svgs)
