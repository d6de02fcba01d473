"""The step-time model against published offload measurements (analysis/published/):
each prediction is of a figure its case's inputs do not contain (the tutorial's step,
composed from its own logged phases, is counted apart), every input says whether
the paper states it or it is assumed (and by which rule, the same in every case), and
the misses stay visible with the term that misses."""
from __future__ import annotations

import copy
import re
from dataclasses import replace
from collections import defaultdict

import pytest

from cxlbench.analysis.published import (ASSUMED, PAPER, CaseError, check, check_all, flops_per_step, gpt2,
                                         load_cases, read_case, tally)
from cxlbench.cli.main import main

#: Points the model misses today, each with the reason it gives (docs/advise.md). A model
#: change that makes one hold fails this list: move it out, and say so in the docs.
KNOWN_MISSES = {
    ("zero-offload-dpu", "6B"),        # the bars hide 2.67 s; Table 4 (interpolated) has 1.72 s to hide
    ("zero-offload-dpu", "8B"),        # the bars hide 1.33 s of Table 4's 2.41 s
    ("zero-offload-scaling", "4 GPUs"),     # 4-5 s a step longer than the model's, the batch unstated
    ("zero-offload-scaling", "8 GPUs"),
    ("zero-offload-scaling", "128 GPUs"),
    ("zero-offload-accumulation", "Fig. 10: 16 GPUs, 3.2 micro-steps"),   # the 16-GPU loss of Fig. 11
    ("zero-offload-accumulation", "Fig. 8: 1 GPU, 51.2 micro-steps"),     # -0.051: inside the charts' reading
}
#: Of those, the misses that a reading of the charts within their precision holds
WITHIN_READING = {("zero-offload-scaling", "4 GPUs"), ("zero-offload-scaling", "8 GPUs"),
                  ("zero-offload-accumulation", "Fig. 8: 1 GPU, 51.2 micro-steps")}


def test_every_published_check_holds_within_its_tolerance_but_the_known_misses():
    results, _ = check_all()
    seen = set()
    for r in results:
        for p in r.points:
            key = (r.case.id, p.label)
            seen.add(key)
            if key in KNOWN_MISSES:
                assert not p.holds and p.misses_on, key
                assert p.at_reading == (key in WITHIN_READING), key
            else:
                assert p.holds, (key, p.model, p.paper, p.tolerance)
    assert KNOWN_MISSES <= seen
    assert {r.case.id for r in results} >= {"zero-offload-dpu", "zero-offload-scaling", "zero-offload-accumulation",
                                             "zero-infinity-nvme", "smart-infinity-baseline", "deepspeed-tutorial-10b"}
    assert sum(not p.composition for r in results for p in r.points) >= 19


def test_the_readme_states_the_tally_the_checks_give():
    from pathlib import Path
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    results, _ = check_all()
    pred = [p for r in results for p in r.points if not p.composition]
    said = re.search(r"(\d+) predictions of a\s+figure their inputs do not hold \((\d+) within", readme)
    assert said and (int(said[1]), int(said[2])) == (len(pred), sum(p.holds for p in pred))
    read = re.search(r"precision would hold them: (\d+) of the (\d+)\)", readme)
    assert read and (int(read[1]), int(read[2])) == (sum(bool(p.at_reading) for p in pred),
                                                     sum(not p.holds for p in pred))


def test_the_accumulation_check_tells_accumulation_from_none():
    """The gain over one micro-batch a step: a model that paid the update every
    micro-step (a gain of 1) must miss, so the paper's gain lies beyond the tolerance."""
    results, _ = check_all()
    [acc] = [r for r in results if r.case.id == "zero-offload-accumulation"]
    assert acc.points and all(abs(p.paper - 1) > p.tolerance and p.model > 1 for p in acc.points)


def test_a_check_never_reads_the_figure_it_predicts():
    """Doubling the columns a point's paper figure is made of moves the paper column,
    never the model's; and every such column is marked `reported` in its file."""
    cases, _ = load_cases()
    for case in cases:
        before = check(case)
        for i, result in enumerate(before.points):
            assert result.figures and all(_reported(case, f) for f in result.figures), (case.id, result.label)
            doctored = copy.deepcopy(case)
            for p in doctored.points:
                for name in result.figures:
                    p[name] = p[name] * 2
            after = check(doctored).points[i]
            assert after.model == pytest.approx(result.model), (case.id, result.label)
            assert after.paper != pytest.approx(result.paper), (case.id, result.label)


def _reported(case, name: str) -> bool:
    import tomllib
    from cxlbench.analysis.published import PUBLISHED
    raw = tomllib.loads((PUBLISHED / f"{case.id}.toml").read_text())
    return bool(raw["fields"][name].get("reported"))


def test_every_input_is_paper_or_assumed_and_says_where():
    cases, context = load_cases()
    assert len(cases) >= 5 and len(context) >= 2
    for case in cases:
        assert case.source and case.url and case.predicts
        for i in [*case.inputs.values(), *case.fields.values()]:
            assert i.provenance in (PAPER, ASSUMED) and len(i.where) > 5, (case.id, i.name)
            if i.provenance == ASSUMED:
                assert re.search(r"\bthe [\w-]+(?: [\w-]+)? rule\b", i.where) or "does not say" in i.where, \
                    (case.id, i.name, i.where)
        for p in case.points:
            assert set(p) - {"provenance", "label"} <= set(case.fields), case.id


def test_an_assumption_takes_one_value_in_every_case_that_makes_it():
    """'The GPT-2 rule' gives every case the same vocabulary, the V100 rule one rate: an
    assumption is never tuned to the case it serves."""
    cases, _ = load_cases()
    by_rule = defaultdict(set)
    for case in cases:
        for i in case.inputs.values():
            for rule in re.findall(r"\bthe ([\w-]+(?: [\w-]+)?) rule\b", i.where):   # every rule it names
                by_rule[(rule, i.name)].add(i.value)
    assert by_rule
    for key, values in by_rule.items():
        assert len(values) == 1, (key, values)


def test_the_dpu_ratio_is_the_without_step_over_the_step_with_the_update_hidden():
    """By hand for 10B: the without-DPU step from its TFLOPS; DPU takes the CPU-Adam time
    (and the last chunk's copy) off it, as the compute is longer."""
    cases, _ = load_cases()
    case = next(c for c in cases if c.check == "dpu_ratio")
    point = next(p for p in case.points if p["label"] == "10B")
    w = gpt2(case, point["layers"], point["hidden"], point["batch"])
    without_s = flops_per_step(w) / (point["without_tflops"] * 1e12)
    tail = 2 * w.n_params / (case["link_GBps"] * 1e9) / w.chunks
    expected = without_s / (without_s - point["cpu_adam_s"] - tail)
    result = next(p for p in check(case).points if p.label == "10B")
    assert result.model == pytest.approx(expected, rel=1e-6)


def test_more_gpus_per_node_share_one_host_and_more_nodes_add_hosts():
    """Fig. 11's structure: up to 16 GPUs share a DGX-2's CPU-Adam, so its seconds stay;
    past one node each node steps its own share."""
    cases, _ = load_cases()
    case = next(c for c in cases if c.check == "scaling")
    opt = {p.label: p.terms["optimizer"] for p in check(case).points}
    assert opt["2 GPUs"] == pytest.approx(opt["16 GPUs"])
    assert opt["32 GPUs"] == pytest.approx(opt["16 GPUs"] / 2)
    assert opt["128 GPUs"] == pytest.approx(opt["16 GPUs"] / 8)


def _scaling_read_to(precision: float):
    [case] = [c for c in load_cases()[0] if c.id == "zero-offload-scaling"]
    case.inputs["one_gpu_tflops"] = replace(case.inputs["one_gpu_tflops"], reading=precision)
    case.fields["tflops"] = replace(case.fields["tflops"], reading=precision)
    return {p.label: p for p in check(case).points}


def test_a_miss_is_within_the_charts_reading_only_if_a_reading_inside_their_precision_holds_it():
    """Fig. 11 at 4 GPUs: 35.0 modelled against a bar measured at 30.09 (1.164, over ±15%).
    Read to ±0.2 the bar may be 30.29 and the 1-GPU bar the model starts from 34.96,
    which holds; to ±0.1 no corner does; with nothing read off a chart there is no such
    verdict, and a point that holds never gets one."""
    assert _scaling_read_to(0.2)["4 GPUs"].at_reading is True
    assert _scaling_read_to(0.1)["4 GPUs"].at_reading is False
    assert _scaling_read_to(0.0)["4 GPUs"].at_reading is None
    assert _scaling_read_to(0.5)["2 GPUs"].holds and _scaling_read_to(0.5)["2 GPUs"].at_reading is None
    assert "at every reading inside the charts' precision (at best 1.15" in _scaling_read_to(0.1)["4 GPUs"].misses_on
    assert "precision holds it (1.14" in _scaling_read_to(0.2)["4 GPUs"].misses_on


def test_a_point_may_read_its_bar_less_precisely_than_its_column():
    """Fig. 11's 8-GPU bar sits under the aggregate line: its own ±0.5 applies to it, the
    column's to the others."""
    points = _scaling_read_to(0.1)
    assert points["8 GPUs"].at_reading is True and points["4 GPUs"].at_reading is False


def test_corners_on_both_sides_of_the_band_mean_a_reading_between_them_holds():
    """No corner within ±0.05 of the paper, one below and one above: by continuity a
    reading between them holds, and the point says so."""
    from cxlbench.analysis.published import PointResult, _mark_readings
    [case] = [c for c in load_cases()[0] if c.id == "zero-offload-dpu"]
    import cxlbench.analysis.published as pub
    miss = PointResult("x", 1.2, 1.0, 0.05, "absolute", {})
    flip = iter([-0.1, 0.1, -0.1, 0.1])
    real = pub.CHECKS[case.check]
    try:
        pub.CHECKS[case.check] = lambda c: [PointResult("x", 1.0 + next(flip), 1.0, 0.05, "absolute", {})]
        _mark_readings(case, [miss])
    finally:
        pub.CHECKS[case.check] = real
    assert miss.at_reading is True and not miss.best_reading.holds


def test_a_reading_that_is_not_a_precision_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[case]\ntitle="x"\nsource="y"\ncheck="phases"\ntolerance=0.1\n'
                   '[inputs]\nseq={value=1024, provenance="paper", where="t", reading=-1}\n')
    with pytest.raises(CaseError, match=r"bad: \[inputs\] seq: reading -1 is not a non-negative number"):
        read_case(bad)


def test_a_case_file_without_provenance_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[case]\ntitle="x"\nsource="y"\ncheck="phases"\ntolerance=0.1\n[inputs]\nseq={value=1024}\n')
    with pytest.raises(CaseError, match=r"bad: \[inputs\] seq needs provenance and where"):
        read_case(bad)
    bad.write_text('[case]\ntitle="x"\nsource="y"\ncheck="guess"\ntolerance=0.1\n')
    with pytest.raises(CaseError, match="check 'guess' is not one of"):
        read_case(bad)


def test_advise_published_prints_model_over_paper_per_case(capsys):
    assert main(["advise", "--published"]) == 0
    out = capsys.readouterr().out
    results, context = check_all()
    pred = [p for r in results for p in r.points if not p.composition]
    assert f"{sum(p.holds for p in pred)} of {len(pred)} predictions hold" in out
    assert "composition checks" in out
    for r in results:
        assert r.case.title in out
    assert out.count("MISSES") == len(KNOWN_MISSES)
    assert "the GPT-2 rule" in out and "Context, not checks" in out
    for c in context:
        assert c.why in out


def test_a_step_summed_from_its_own_logged_phases_is_counted_apart_from_the_predictions():
    """The tutorial's step is its logged phases composed: right by construction when the
    composition is, so it must not swell the count of predictions that hold."""
    results, _ = check_all()
    comp = {(r.case.id, p.label) for r in results for p in r.points if p.composition}
    tutorial = next(r for r in results if r.case.check == "phases")
    assert comp == {(tutorial.case.id, p.label) for p in tutorial.points if "step" in p.label}
    assert len(comp) == len(tutorial.case.points)


def test_the_tally_counts_predictions_and_composition_checks_apart():
    from cxlbench.analysis.published import CaseResult, PointResult
    case, _ = load_cases()
    point = lambda model, comp=False: PointResult("p", model, 1.0, 0.1, "relative", {}, composition=comp)
    results = [CaseResult(case[0], [point(1.05), point(1.5), point(0.95)]),
               CaseResult(case[1], [point(1.0, comp=True), point(1.2, comp=True)])]
    assert tally(results) == "2 of 3 predictions hold; 1 of 2 composition checks hold"
    results[0].points[1].at_reading = True
    assert tally(results[:1]) == ("2 of 3 predictions hold (1 of the 1 misses of figures read off charts "
                                  "within the charts' precision)")
    results[0].points[1].at_reading = None
    assert tally(results[:1]) == "2 of 3 predictions hold"


def test_published_refuses_a_workload_option_it_would_ignore(capsys):
    code = main(["advise", "--published", "--accumulate", "4", "--recompute"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--accumulate" in err and "--recompute" in err


def test_a_gpu_of_many_copies_its_partition_back_in_chunks_of_its_own():
    """The parameters' copy back trails the update by one chunk of the GPU's partition,
    not of the whole model: at 16 GPUs the 10B model's 4 Mi-parameter chunks number
    154 a GPU, not 2,451."""
    import math
    from cxlbench.analysis.published import _at, _one_gpu
    [case] = [c for c in load_cases()[0] if c.id == "zero-offload-scaling"]
    one = _one_gpu(case)
    w, _ = _at(case, one, 16)
    assert w.chunks == math.ceil(w.shard_params / case["chunk_params"]) < one.w.chunks / 10
