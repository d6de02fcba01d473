"""A fuzzer for suites: tables generated from each family's own Spec — the right keys
with wrong values, wrong types, edge values, unknown keys, broken TOML — through
`cxlbench run --list`, in-process. Each must end with exit 0 and a plan whose
estimates are finite and ≥ 0, or exit 2 with one line naming the suite file; never a
traceback. Tables of valid values only must still plan. Anything it ever found is in
tests/fuzz_corpus/*.toml, tried first (test_the_corpus_...)."""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from cxlbench.benchmarks import FAMILIES, family
from cxlbench.benchmarks.spec import MAX_CPUS, Spec, coerce
from fuzzing import CORPUS, FIXTURE, call, problems, suite_text

ROOTS = ("/", FIXTURE)          # this machine, and a two-socket machine with a CXL node
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# ---- what a person might write --------------------------------------------------------

WORDS = ["", "auto", "mlc", "idle", "0", "-1", "1GiB", "0B", "16KiB", "1.5KiB", "99999999999999999999999TiB",
         "read", "write", "0:0", "2:1", "1:-1", "x:1", "all", "local", "4k", "thp", "ddr", "cxl", "nvme",
         "hbm", "random", "nan", "1e9", "0,100,1000", "5,-5", "bogus", "fused", "tiny"]
EDGES = [0, -1, 1, 2, -3, MAX_CPUS, MAX_CPUS + 1, 100000, 2**31, 2**63 - 1, -2**63,
         0.0, -0.0, 1.0, 0.999, 1e-300, 7.0, float("nan"), float("inf"), float("-inf")]
SCALAR = st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(), st.booleans(),
                   st.text(max_size=10), st.sampled_from(WORDS), st.sampled_from(EDGES))
JUNK = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=2), max_leaves=6)
SIZES = ["4KiB", "16KiB", "64KiB", "1MiB", "2MiB", 4096, 65536]
TIERS = ["ddr", "cxl", "nvme", "hbm", "ddr0", "cxl2", "local"]


def _ok(value: Any, tp: Any) -> bool:
    try:
        coerce(value, tp)
        return True
    except (TypeError, ValueError):
        return False


def _written(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def valid(tp: Any, key: str, default: Any) -> st.SearchStrategy:
    """Values of type tp a suite might set that its Spec accepts."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        base = st.sampled_from(SIZES) if "size" in args[1:] else valid(args[0], key, default)
        return base.filter(lambda v: _ok(v, tp))
    if origin in (Union, typing.get_origin(int | str)):
        return st.one_of([valid(a, key, default) for a in args if a is not type(None)])
    if origin is Literal:
        return st.sampled_from(args)
    if origin is tuple:
        items = valid(args[0], key, default)
        return st.lists(items, min_size=1, max_size=3, unique_by=lambda v: repr(coerce(v, args[0]))) | items
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(0, 4)
    if tp is float:
        return st.sampled_from([0, 0.05, 0.1, 0.5, 2.0])
    if tp is str:
        words = [d for d in (default if isinstance(default, tuple) else (default,)) if isinstance(d, str)]
        words += ["tiny"] if key == "config" else []
        return st.sampled_from(TIERS if key in ("tiers", "with") else words or ["x"])
    return st.nothing()


def spec_fields(module) -> list[tuple[str, Any, Any]]:
    hints = typing.get_type_hints(module.Spec, include_extras=True)
    return [(f.metadata.get("key", f.name), hints[f.name], f.default) for f in dataclasses.fields(module.Spec)
            if f.name != "name"]


def values_for(tp: Any, key: str, default: Any) -> st.SearchStrategy:
    """Valid, edge, or anything at all — a fuzzer's mix for one key."""
    return st.one_of(valid(tp, key, default), st.sampled_from(EDGES), st.sampled_from(WORDS), JUNK,
                     st.just([]), st.lists(st.sampled_from(EDGES), min_size=1, max_size=3))


def table(name: str, data, wrong: bool = True) -> dict[str, Any]:
    module = family(name)
    fields = spec_fields(module)
    chosen = data.draw(st.lists(st.sampled_from(fields), max_size=4, unique_by=lambda f: f[0]))
    out: dict[str, Any] = {"name": name}
    for key, tp, default in chosen:
        out[key] = data.draw((values_for if wrong else valid)(tp, key, default))
    if wrong and data.draw(st.integers(0, 9)) == 0:
        out[data.draw(st.text(min_size=1, max_size=8))] = 1          # an unknown key
    return out


def small(t: dict[str, Any]) -> dict[str, Any]:
    """A valid table kept small, so a valid suite plans quickly."""
    return {"repetitions": 1, **t}


def _plan(tmp_path: Path, text: str, root: str) -> tuple[Any, Path]:
    path = tmp_path / "fuzz.toml"
    path.write_text(text)
    return call(["--root", root, "run", "--suite", str(path), "--list"], cwd=tmp_path), path


def _judge(end, path: Path, text: str) -> None:
    event(f"exit {end.code}")                  # --hypothesis-show-statistics: how inputs ended
    found = problems(end)
    if end.code == 2 and str(path) not in end.err and "fuzz.toml" not in end.err:
        found.append(f"the line does not name the suite file: {end.err!r}")
    assert not found, f"{found}\n--- suite ---\n{text}"


@pytest.mark.parametrize("name", sorted(FAMILIES))
@settings(max_examples=80, **SETTINGS)
@given(data=st.data())
def test_any_table_of_a_family_plans_or_is_refused_in_one_line_naming_the_file(name, data, tmp_path):
    top = data.draw(st.dictionaries(st.sampled_from(["repetitions", "processes", "time_budget_s", "precision",
                                                     "min_sample_s", "warmup", "max_repetitions"]),
                                    st.sampled_from(EDGES) | st.integers(1, 3), max_size=2))
    text = suite_text(top, [table(name, data)])
    end, path = _plan(tmp_path, text, data.draw(st.sampled_from(ROOTS)))
    _judge(end, path, text)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@settings(max_examples=25, **SETTINGS)
@given(data=st.data())
def test_a_table_of_valid_values_still_plans(name, data, tmp_path):
    t = small(table(name, data, wrong=False))
    text = suite_text({}, [t])
    end, path = _plan(tmp_path, text, data.draw(st.sampled_from(ROOTS)))
    _judge(end, path, text)
    related = any(k in t for k in ("min_working_set", "max_working_set"))
    assert end.code == 0 or related, f"a valid table was refused: {end.err}\n{text}"


@settings(max_examples=120, **SETTINGS)
@given(data=st.data())
def test_top_level_keys_and_tables_together(data, tmp_path):
    keys = [k for k, _, _ in spec_fields(family("latency")) if k in {f.name for f in dataclasses.fields(Spec)}]
    top = data.draw(st.dictionaries(st.sampled_from(keys + ["name", "description", "sentinels", "benchmark"]),
                                    JUNK | st.sampled_from(EDGES), max_size=3))
    names = data.draw(st.lists(st.sampled_from(["latency", "bandwidth", "loaded_latency", "stride"]),
                               min_size=0, max_size=2))
    tables = [table(n, data) for n in names]
    if "benchmark" in top or not tables:
        text = suite_text({k: v for k, v in top.items()}, tables)
    else:
        text = suite_text(top, tables)
    end, path = _plan(tmp_path, text, data.draw(st.sampled_from(ROOTS)))
    _judge(end, path, text)


QUICK = (Path(__file__).resolve().parent.parent / "suites" / "quick.toml").read_text()


@settings(max_examples=120, **SETTINGS)
@given(cut=st.integers(0, len(QUICK)), insert=st.sampled_from(["", "\"", "[", "]", "=", "\n", "[[", "x", "'''"]),
       drop=st.integers(0, 5))
def test_broken_toml_is_one_line(cut, insert, drop, tmp_path):
    text = QUICK[:cut] + insert + QUICK[cut + drop:]
    end, path = _plan(tmp_path, text, "/")
    _judge(end, path, text)


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.toml"))


@pytest.mark.parametrize("case", _corpus(), ids=lambda p: p.stem)
def test_the_corpus_of_bad_suites_each_ends_as_it_says(case, tmp_path):
    """Each file's first line says how it ends: `# expect: 2 <words of the line>` or
    `# expect: 0` (a valid one, which must plan as before)."""
    head, text = case.read_text().split("\n", 1)
    code, _, words = head.removeprefix("# expect:").strip().partition(" ")
    end = call(["run", "--suite", str(case), "--list"], cwd=tmp_path)
    assert not problems(end), (case.name, problems(end))
    assert end.code == int(code), (case.name, end.err)
    if words:
        assert words in end.err and case.name in end.err, (case.name, end.err)


# ---- a short real run of the smallest cases -------------------------------------------

TINY = st.fixed_dictionaries({
    "working_set": st.lists(st.sampled_from(["128B", "256B", "4KiB", "16KiB"]), min_size=1, max_size=2, unique=True),
    "chains": st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=2, unique=True),
    "pattern": st.sampled_from(["random", "window"]),
})


@pytest.mark.slow
@settings(max_examples=4, **SETTINGS)
@given(latency=TINY, op=st.sampled_from(["read", "partial", "rmw"]), partial=st.sampled_from([4, 8, 60]))
@example(latency={"working_set": ["128B", "4KiB"], "chains": [4], "pattern": "random"}, op="partial", partial=60)
def test_a_real_run_of_tiny_fuzzed_cases_fails_a_case_with_its_reason_and_goes_on(latency, op, partial, tmp_path):
    """Values only a measurement can judge (more chains than a working set has lines; a
    partial write of bytes the kernel cannot store) fail their own case with the reason;
    every other case is measured, and the run completes."""
    from cxlbench.results.store import load_run
    from cxlbench.runner.run import RunConfig, run
    text = suite_text({"repetitions": 1, "min_sample_s": 0.01, "sentinels": False}, [
        {"name": "latency", "tiers": ["ddr"], **latency},
        {"name": "write_penalty", "tiers": ["ddr"], "op": [op], "partial_bytes": [partial], "array_bytes": "1MiB",
         "iterations": 1, "store": ["regular"]}])
    (tmp_path / "tiny.toml").write_text(text)
    outcome = run(RunConfig(str(tmp_path / "tiny.toml"), out=str(tmp_path / "r"), command=["fuzz"]))
    assert outcome.status == "complete", text
    cases = load_run(outcome.path).cases()
    for _, c in cases.iterrows():
        assert c.status in ("ok", "failed", "skipped"), c
        if c.status != "ok":
            assert isinstance(c.reason, str) and c.reason, c
        lines = c.params.get("working_set_bytes", 1 << 30) // 64 if isinstance(c.params, dict) else None
        if c.benchmark == "latency" and lines is not None and c.params["chains"] > lines:
            assert c.status == "failed" and "chains" in c.reason, c
    samples = load_run(outcome.path).samples
    assert samples["value"].notna().all() and (samples["value"] > 0).all()
