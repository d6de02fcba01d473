"""The family contract: a family declares itself whole in one module (NAME, a typed
Spec, METRICS, SHOW, plan, measure), suites are checked against it, and everything
downstream reads the family from the run's record. The stride family is the worked
example of docs/architecture.md: its module, one registry line, a suite table and
this test, and it appears in run --list, the summary, the report and the gate."""
import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from cxlbench.benchmarks import FAMILIES, UnknownBenchmark, family
from cxlbench.benchmarks.base import Show, describe
from cxlbench.benchmarks.spec import Spec
from cxlbench.cli.main import main
from cxlbench.results.schema import Metric
from cxlbench.results.store import load_run
from cxlbench.runner.run import RunConfig, run
from cxlbench.runner.suite import families, load_suite

SUITES = Path(__file__).resolve().parent.parent / "suites"


def suite(tmp_path, text: str, name: str = "s.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---- every family honours the contract ---------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_registered_family_declares_itself_whole(name):
    module = family(name)
    assert module.NAME == name
    assert issubclass(module.Spec, Spec) and dataclasses.is_dataclass(module.Spec)
    required = [f.name for f in dataclasses.fields(module.Spec)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    assert required == ["name"]                     # every other key has a default
    typing.get_type_hints(module.Spec, include_extras=True)      # the types resolve
    assert module.METRICS and all(isinstance(m, Metric) and k == m.name for k, m in module.METRICS.items())
    assert isinstance(module.SHOW, Show) and module.SHOW.title and module.SHOW.description
    assert {h.metric for h in module.SHOW.headlines} <= set(module.METRICS)
    json.dumps(describe(module))                    # what run.json records


@pytest.mark.parametrize("path", sorted(SUITES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_suite_is_valid_against_its_families(path):
    assert families(load_suite(str(path)))


# ---- suites are checked against each family's Spec --------------------------------------------

def test_a_key_the_family_does_not_know_exits_2_naming_it_and_the_known_keys(tmp_path, capsys):
    path = suite(tmp_path, '[[benchmark]]\nname = "latency"\npages = ["4k"]\n')
    code, out, err = cli(capsys, "run", "--suite", path, "--out", str(tmp_path / "r"))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert path in err and "[[benchmark]] 1 (latency)" in err and "'pages'" in err
    assert "known: " in err and "page," in err and "working_set" in err
    assert not (tmp_path / "r").exists()            # nothing was measured in its place


@pytest.mark.parametrize("line, says", [
    ('threads = "two"', "threads"),                                   # a wrong type
    ('array_bytes = "1 gigabyte"', "not a size"),                     # a bad unit
    ('kernel = ["read", "tirad"]', "kernel"),                         # a value the family has not
    ('nt = "no"', "true or false"),
])
def test_a_wrong_type_unit_or_value_exits_2_in_one_line(tmp_path, capsys, line, says):
    path = suite(tmp_path, f'[[benchmark]]\nname = "bandwidth"\n{line}\n')
    code, _, err = cli(capsys, "run", "--suite", path, "--list")
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_an_unknown_top_level_key_exits_2(tmp_path, capsys):
    path = suite(tmp_path, 'repetitons = 3\n[[benchmark]]\nname = "latency"\n')
    code, _, err = cli(capsys, "run", "--suite", path, "--list")
    assert code == 2 and "'repetitons'" in err and "repetitions" in err


def test_sizes_and_single_values_are_normalised():
    [(_, _, spec)] = families({**load_suite("quick"), "benchmark": [
        {"name": "latency", "working_set": "64KiB", "page": "thp", "max_working_set": "2GiB"}]})
    assert spec.working_set == (64 << 10,) and spec.page == ("thp",) and spec.max_working_set == 2 << 30
    assert spec.repetitions == load_suite("quick")["repetitions"]      # the suite's own, inherited


def test_run_list_shows_each_familys_resolved_settings(capsys):
    code, out, _ = cli(capsys, "run", "--suite", "quick", "--list")
    headers = [line for line in out.splitlines() if line.startswith("# ")]
    assert code == 0 and [h.split(":")[0] for h in headers] == ["# latency", "# bandwidth"]
    assert "page=4k,thp" in headers[0] and "max_working_set=1GiB" in headers[0]
    assert "chains=1" in headers[0]                  # a default the suite did not write
    assert "kernel=read,write,copy,triad" in headers[1]


# ---- the two defects: a family's name, a metric it did not declare -----------------------------

def test_a_registered_family_whose_name_differs_from_its_key_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(FAMILIES, "chase", "cxlbench.benchmarks.latency")
    with pytest.raises(UnknownBenchmark, match="declares NAME = 'latency' but is registered as 'chase'"):
        family("chase")


def test_a_plugin_named_otherwise_than_its_module_is_measured(tmp_path):
    path = suite(tmp_path, '[[benchmark]]\nname = "fakes.named_otherwise"\nrepetitions = 2\n')
    outcome = run(RunConfig(path, out=str(tmp_path / "r")))
    assert [(r.case.benchmark, r.status) for r in outcome.results] == [("otherwise", "ok")]
    stored = load_run(outcome.path)
    assert list(stored.samples.benchmark.unique()) == ["otherwise"]
    assert stored.meta["families"]["otherwise"]["title"] == "Named otherwise"


def test_a_sample_of_an_undeclared_metric_fails_its_case_not_the_run(tmp_path):
    path = suite(tmp_path, 'repetitions = 3\n[[benchmark]]\nname = "fakes.family"\nmodes = ["undeclared", "ok"]\n')
    outcome = run(RunConfig(path, out=str(tmp_path / "r")))
    assert outcome.status == "complete"
    assert [r.status for r in outcome.results] == ["failed", "ok"]
    assert "'furlongs', which it does not declare" in outcome.results[0].reason
    assert len(load_run(outcome.path).samples) == 3               # the ok case's repetitions


# ---- the worked example: a new family appears everywhere ------------------------------------

STRIDE = """min_sample_s = 0.02
repetitions = 3
[[benchmark]]
name = "stride"
tiers = ["ddr"]
page = ["4k"]
stride = ["64B", "4KiB"]
working_set = "8MiB"
"""


@pytest.fixture(scope="module")
def stride_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stride")
    path = suite(tmp, STRIDE)
    return [run(RunConfig(path, out=str(tmp / "r"), label=f"s{i}")) for i in range(2)], tmp


def test_the_new_family_is_measured_and_in_the_summary(stride_runs, capsys):
    (a, _), _ = stride_runs
    assert a.status == "complete" and [r.status for r in a.results] == ["ok", "ok"]
    stored = load_run(a.path)
    lat = stored.samples.groupby("stride_bytes").value.median()
    assert set(lat.index) == {64, 4096} and (lat > 0).all()
    from cxlbench.cli.tier_table import tier_summary
    text = tier_summary(stored.samples, stored.meta)
    assert "latency at a 4KiB stride, 4k pages" in text           # its own headline, pick: largest stride


def test_the_new_family_has_its_own_title_and_axis_in_the_report(stride_runs, capsys):
    (a, _), tmp = stride_runs
    out = tmp / "stride.html"
    code, _, _ = cli(capsys, "report", str(a.path), "-o", str(out))
    text = out.read_text()
    assert code == 0 and re.search(r'<section id="family-stride" class="family">\s*<h2>Stride</h2>', text)
    assert "Dependent loads in random order" in text and "stride (log₂)" in text
    assert "latency, largest stride (ns)" in text                 # its column in the tier table


def test_the_new_family_is_gated(stride_runs, capsys):
    """Two real runs are compared, so the verdict is the machine's (this VM's 8 MiB chase
    at a 64 B stride flips 8x between processes as its L3 share comes and goes). What is
    this family's to hold: both its cases are judged, the exit code is the verdict's, and
    a run gated against itself passes."""
    (a, b), tmp = stride_runs
    for current, allowed in ((a, {0}), (b, {0, 1})):
        verdict = tmp / "gate.json"
        code, _, _ = cli(capsys, "gate", "--baseline", str(a.path), "--current", str(current.path),
                         "--threshold", "50%", "--json", str(verdict))
        judged = json.loads(verdict.read_text())
        assert code in allowed and code == judged["exit_code"], judged
        assert sum("stride/" in json.dumps(c) for c in judged["cases"]) == 2


@pytest.mark.parametrize("name", ["os.path", "cxlbench.benchmarks.base"])
def test_a_module_that_imports_but_is_no_family_is_named_as_such_not_a_traceback(name):
    with pytest.raises(UnknownBenchmark, match=f"'{name}' imports but is no benchmark family: it has no "):
        family(name)
