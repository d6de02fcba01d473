"""`cxlbench advise`: where the optimizer state should live, modelled from measured rates.

    cxlbench advise RESULTS... --model 8b [--gpu h200] [--mfu 0.4] [--within 10]
                    [--tiers hbm,ddr,nvme] [--batch N] [--seq N] [-o advice.html]
    cxlbench advise [RESULTS...] --model 70b --gpu h100-sxm --gpus 8 [--nodes N]
                    --host PROFILE [--target 90] [-o advice.html]   each tier's share of all-HBM
    cxlbench advise --published        the step model against published offload measurements

The body is `advise(...)`, a function with explicit parameters (tests call it);
`add_parser` is the thin argparse layer. A missing input, an unknown model or
GPU, or a path with no runs is one line and exit 2 (cli.main's known errors).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Sequence

from cxlbench.cli.argtypes import out_file, whole
from cxlbench.cli.commands import UserError
from cxlbench.units import format_number, gib

DEFAULT_WITHIN = 0.10      # name the cheapest placement within 10% of the best tokens/s

if TYPE_CHECKING:
    from cxlbench.analysis.advisor import Advice

def advise(results: Sequence[str], model: str | None, gpu: str | None = None, mfu: float | None = None,
           within: float | None = None, tiers: Sequence[str] | None = None, out: str | None = None,
           batch: int | None = None, seq: int | None = None, gpus: int | None = None, nodes: int = 1,
           host: str | None = None, target: float = 0.90, published: bool = False,
           recompute: bool = False, accumulate: int = 1, zero: int | None = None) -> int:
    """Print the advice for `model` from the runs at or below `results` (and write it as
    HTML to `out`); mfu None: the default (0.40), assumed, for a datasheet GPU. With a
    host profile or more than one GPU: each tier's share of all-HBM on that server
    (whatif); with `published`: the model against published measurements."""
    from cxlbench.analysis.advisor import DEFAULT_MFU, AdviceError, advise as make_advice
    if published:
        given = [flag for flag, value in (("--model", model), ("--gpu", gpu), ("--mfu", mfu), ("--batch", batch),
                                          ("--seq", seq), ("--gpus", gpus), ("--nodes", nodes > 1),
                                          ("--host", host), ("--recompute", recompute),
                                          ("--accumulate", accumulate > 1), ("--zero", zero),
                                          ("-o", out)) if value]
        if given:
            raise UserError(f"--published prices each case as its paper states it: drop {', '.join(given)}")
        return published_report()
    if model is None:
        raise UserError("advise needs --model (tiny, small, 1b, 3b, 8b, 70b), or --published")
    if tiers is not None and not tiers:
        raise UserError("--tiers names no tier: give kinds (hbm,ddr,cxl,nvme) or tier names")
    if host is not None or (gpus or 1) > 1 or nodes > 1:
        if tiers is not None or within is not None:
            raise UserError("--tiers and --within choose among one GPU's placements from runs; a server's "
                            "what-if (--host, --gpus) prices every tier: drop them")
        return server(results, model, gpu, DEFAULT_MFU if mfu is None else mfu, gpus, nodes, host, target,
                      batch, seq, out, recompute, accumulate, zero)
    if zero is not None:
        raise UserError("--zero prices a server's step: give --host PROFILE, or --gpus N above 1, with it")
    if accumulate > 1:
        raise UserError("--accumulate prices a server's step: give --host PROFILE, or --gpus N above 1, with it")
    if recompute:
        raise UserError("--recompute prices a server's step: give --host PROFILE, or --gpus N above 1, with it")
    if not results:
        raise UserError("advise needs results (run directories or folders) with training runs, or --host "
                        "PROFILE for a server's datasheet figures")
    try:
        advice = make_advice(results, model, gpu, DEFAULT_MFU if mfu is None else mfu,
                             DEFAULT_WITHIN if within is None else within, tiers,
                             batch, seq)
    except AdviceError as e:
        raise UserError(str(e)) from None
    from cxlbench.report.advice import render_advice
    return _show(advice_text(advice), lambda path: render_advice(advice, path), out)


def _show(text: str, render, out: str | None) -> int:
    """Print the advice, and write its page where asked."""
    print(text)
    if out:
        print(f"report: {render(out)}")
    return 0


def server(results: Sequence[str], model: str, gpu: str | None, mfu: float, gpus: int | None, nodes: int,
           host: str | None, target: float, batch: int | None, seq: int | None, out: str | None,
           recompute: bool = False, accumulate: int = 1, zero: int | None = None) -> int:
    """Each tier's share of all-HBM tokens/s on a GPU server (analysis.whatif)."""
    from cxlbench.analysis.advisor import AdviceError, _check_model, _gpu_entry, gather, load_runs
    from cxlbench.analysis.whatif import host_from_runs, load_host, whatif
    from cxlbench.training.stepmodel import Cluster
    try:
        _check_model(model)
        if gpu is not None:
            _gpu_entry(gpu)
        runs = load_runs(results) if results else []
        if host is None and not runs:
            raise AdviceError("no host to place the state on: give --host PROFILE (cxlbench/analysis/hosts.toml "
                              "or a file of that form) or results with training runs")
        profile = load_host(host) if host is not None else host_from_runs(runs)
        per_node = gpus or profile.gpus or 1
        if profile.gpus and per_node > profile.gpus:
            total = per_node * nodes
            raise AdviceError(f"--gpus {per_node} is more GPUs than a node of {profile.name} holds "
                              f"({profile.gpus}): --gpus counts one node's; for {total} GPUs in all give "
                              + (f"--gpus {profile.gpus} --nodes {total // profile.gpus}"
                                 if total % profile.gpus == 0 else
                                 f"--gpus and --nodes whose product is {total}, --gpus at most {profile.gpus}"))
        inputs = gather(runs, gpu, mfu, model)
        if inputs.gpu is None:
            raise AdviceError(inputs.gpu_why)
        w = whatif(inputs.gpu, profile, model, Cluster(per_node, nodes), batch, seq, target, recompute, accumulate,
                   zero)
    except AdviceError as e:
        raise UserError(str(e)) from None
    from cxlbench.report.advice import render_whatif
    return _show(whatif_text(w), lambda path: render_whatif(w, path), out)


def whatif_text(w) -> str:
    from cxlbench.analysis.compare import text_table
    from cxlbench.analysis.whatif import TERMS, held_text, term_label
    lines = [w.headline,
             "MODELLED, not measured: training.stepmodel priced for one GPU with its share of its node; " + w.combine,
             ""]
    rows = [[r.label, gib(r.device_bytes), "yes" if r.device_bytes <= w.capacity_bytes else "no",
             format_number(r.tokens_per_s), _pct(r.share), format_number(r.dpu_tokens_per_s), _pct(r.dpu_share),
             *(format_number(r.plain.terms.get(t)) for t in TERMS)]
            for r in w.rows]
    heads = ["placement", "HBM need/GPU", "fits", f"tokens/s, {w.cluster.gpus} GPU" + ("s" if w.cluster.gpus > 1 else ""), "of all-HBM", "tokens/s DPU",
             "with DPU",
             *(f"{term_label(t)} s" for t in TERMS)]
    lines += text_table(heads, rows, {1, *range(3, len(heads))})
    lines.append(held_text(w))
    if w.hbm.device_bytes > w.capacity_bytes:
        lines.append(f"all-HBM does not fit {gib(w.capacity_bytes)} a GPU (needs "
                     f"{gib(w.hbm.device_bytes)}): it is the reference each share is taken of, as if it did")
    lines += ["", f"what must be true for {w.target * 100:g}% of all-HBM tokens/s:"]
    for r in w.rows[1:]:
        lines += [f"  {r.tier}: {n}" for n in r.needs]
    lines += ["", "inputs (measured / datasheet / paper / assumed):"]
    for f in w.figures():
        lines.append(f"  {f.source.kind:<9}  {f.name}: {f.shown}" + (f" — {f.detail}" if f.detail else ""))
        lines.append(f"  {'':<9}    {f.source}")
    from cxlbench.analysis.whatif import LEFT_OUT
    lines += ["", "not modelled: " + LEFT_OUT]
    return "\n".join(lines)


def published_report() -> int:
    """The step model against every published case: model ÷ paper per point, with its
    inputs and their provenance; exit 0 whether or not a check misses (a miss is a
    finding, shown with the term that misses, not a failure of the command)."""
    from cxlbench.analysis.published import CaseError, check_all
    try:
        results, context = check_all()
    except CaseError as e:
        raise UserError(str(e)) from None
    print(published_text(results, context))
    return 0


def published_text(results, context) -> str:
    from cxlbench.analysis.compare import text_table
    from cxlbench.analysis.published import FLOPS_RULE, tally
    lines = [f"The step-time model against published offload measurements: {tally(results)}",
             "Each prediction is of a figure its case's inputs do not contain; nothing is fitted to the case.",
             f"TFLOPS are converted with the papers' own count: {FLOPS_RULE}.", ""]
    for r in results:
        c = r.case
        lines += [f"{c.title}", f"  {c.source}" + (f" ({c.url.split('://', 1)[-1]})" if c.url else ""),
                  f"  predicts {c.predicts}; holds within {_tolerance(c.tolerance, c.tolerance_kind)}"]
        rows = [[p.label, f"{p.model:.3g}", f"{p.paper:.3g}",
                 p.shown,
                 "holds" if p.holds else "MISSES", p.misses_on] for p in r.points]
        head = "model ÷ paper" if all(p.kind == "relative" for p in r.points) else "model − paper"
        lines += ["  " + line for line in text_table(["point", "model", "paper", head, "", "the term that misses"],
                                                     rows, {1, 2, 3})]
        lines.append("  inputs:")
        for i in c.inputs.values():
            lines.append(f"    {i.provenance:<7}  {i.name} = {_value(i.value)}{' ' + i.unit if i.unit else ''} — {i.where}")
        for i in c.fields.values():
            lines.append(f"    {i.provenance:<7}  {i.name} (per point) — {i.where}")
        for p, label in zip(c.points, (pr.label for pr in r.points)):
            for name, meta in (p.get("provenance") or {}).items():
                lines.append(f"    {meta['provenance']:<7}  {name} = {_value(p[name])} at {p.get('label', label)} — "
                             f"{meta['where']}")
        lines.append("")
    lines.append("Context, not checks (too little stated to predict without fitting):")
    for x in context:
        lines += [f"  {x.title}: {x.figures}", f"    why not a check: {x.why}"]
    return "\n".join(lines)


def _value(v) -> str:
    from cxlbench.units import format_count
    return format_count(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) >= 1e5 else str(v)


def _tolerance(tol: float, kind: str) -> str:
    return f"±{tol * 100:g}%" if kind == "relative" else f"±{tol:g}"


def _pct(x: float) -> str:
    return f"{x * 100:.3g}%"


def advice_text(a: "Advice") -> str:
    from cxlbench.analysis.advisor import COMBINE, TERMS
    from cxlbench.analysis.compare import text_table
    lines = [a.headline,
             "MODELLED, not measured: training.stepmodel priced with the inputs below; per row, " + COMBINE, ""]
    fitting = [p for p in a.placements if p.fits]
    rows = [[p.label, gib(p.device_bytes), format_number(p.step_s), format_number(p.tokens_per_s),
             _pct(p.relative), *(format_number(p.terms.get(t)) for t in TERMS)] for p in fitting]
    lines += [] if not rows else text_table(["placement", "HBM need", "step s", "tokens/s", "vs best",
                         *(f"{t} s" for t in TERMS)], rows, set(range(1, 10)))
    for p in a.placements:
        if not p.fits:
            lines.append(f"{p.label}: {p.verdict}")
    if a.left_out:
        lines.append(f"left out with --tiers: {', '.join(a.left_out)}")
    lines.append("")
    if a.choice is not None:
        lines.append(f"named: {a.conclusion}")
    else:
        lines.append(f"named: none — {a.conclusion}")
    lines.append(f"rule: {a.rule}")
    lines += ["", "inputs (measured / datasheet / assumed):"]
    for f in a.inputs.figures():
        lines.append(f"  {f.source.kind:<9}  {f.name}: {f.shown}" + (f" — {f.detail}" if f.detail else ""))
        lines.append(f"  {'':<9}    {f.source}")
    lines += ["", "not in the table, and what is assumed:"] + [f"  - {n}" for n in a.notes]
    return "\n".join(lines)


def _within(text: str) -> float:
    """--within 10 or 10%: percent of the best tokens/s. A bare number between 0 and 1
    is refused: beside --mfu, which takes a fraction, "0.9" is far likelier to mean 90%
    than 0.9%; "0.9%" says it (1 is 1%)."""
    bare = text.strip()
    try:
        value = float(bare.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (e.g. 10 or 10%)") from None
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f"{text!r} must lie between 0 and 100 (percent)")
    if 0 < value < 1 and not bare.endswith("%"):
        raise argparse.ArgumentTypeError(f"{text!r} is a percent here: give {value * 100:g} for {value * 100:g}%, "
                                         f"or {bare}% if {bare}% is meant")
    return value / 100


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0.4)") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1] (e.g. 0.4 for 40%)")
    return value


def add_parser(sub) -> None:
    a = sub.add_parser("advise", help="where the optimizer state should live: every placement modelled "
                                      "from measured rates (and a GPU's datasheet)")
    a.add_argument("results", nargs="*", help="run directories or results folders (the runs' training "
                                              "and storage figures are the inputs)")
    a.add_argument("--model", help="model config: tiny, small, 1b, 3b, 8b, 70b")
    a.add_argument("--gpu", help="a datasheet entry (h100-sxm, h200, b200, a100-80gb); default: a GPU "
                                 "training run among the results")
    a.add_argument("--mfu", type=_fraction,
                   help="model FLOPs utilisation assumed with a datasheet GPU (default 0.40)")
    a.add_argument("--within", type=_within, metavar="PERCENT",
                   help="name the cheapest placement within this of the best tokens/s (default 10)")
    a.add_argument("--tiers", help="restrict the placements: kinds (hbm,ddr,cxl,nvme) or tier names "
                                   "(ddr0,nvme0), comma-separated; default every kind")
    a.add_argument("--batch", type=whole(1, most=10**6), help="sequences per step (default: the config's)")
    a.add_argument("--seq", type=whole(1, most=10**8), help="tokens per sequence (default: the config's)")
    a.add_argument("--gpus", type=whole(1, "(GPUs in one node)", most=1024), help="GPUs per node, the optimizer state sharded over "
                                                             "all of them (with --host: default the profile's)")
    a.add_argument("--nodes", type=whole(1, most=10**6), default=1, help="nodes, each a copy of the host (default 1)")
    a.add_argument("--host", help="a server profile (cxlbench/analysis/hosts.toml: h100-8gpu-cxl) or a .toml "
                                  "file of that form: each tier's share of all-HBM tokens/s on it")
    a.add_argument("--target", type=_within, default=0.90, metavar="PERCENT",
                   help="the share of all-HBM tokens/s the what-must-be-true lines aim at (default 90)")
    a.add_argument("--recompute", action="store_true",
                   help="with --host/--gpus: activation checkpointing (the forward runs twice, each layer keeps "
                        "only its input)")
    a.add_argument("--accumulate", type=whole(1, most=10**6), default=1, metavar="K",
                   help="with --host/--gpus: gradient accumulation, K batches per optimizer step (the update "
                        "and its copies back paid once for all K; default 1)")
    a.add_argument("--zero", type=int, choices=(2, 3),
                   help="with --host/--gpus: the ZeRO stage, 2 (the bf16 parameters whole on every GPU) or 3 (sharded "
                        "too, gathered for every forward and backward); default 2 where it fits a GPU, else 3")
    a.add_argument("--published", action="store_true",
                   help="check the step model against published offload measurements (model ÷ paper)")
    a.add_argument("-o", "--out", type=out_file, help="also write the advice as one self-contained HTML file")
    a.set_defaults(func=lambda x: advise(
        x.results, x.model, x.gpu, x.mfu, x.within,
        [t.strip() for t in x.tiers.split(",") if t.strip()] if x.tiers is not None else None, x.out, x.batch, x.seq,
        x.gpus, x.nodes, x.host, x.target, x.published, x.recompute, x.accumulate,
        x.zero))


__all__ = ["advise", "advice_text", "whatif_text", "published_text", "add_parser"]
