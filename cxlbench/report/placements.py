"""The placement advice's chart, breakdown table and inputs, as template context.

    advice_section(advice, maker) -> dict        what the advice page and a run's report show
    run_advice(run, maker) -> dict | None        a run's own advice: its GPU config, its tiers

The chart is the throughput of every placement relative to the best one that fits
(inline SVG, as every other chart), a bar per state and tier, coloured by tier as
the run report colours its tiers; the table is the step's breakdown; the inputs
say where each figure came from. Source addresses are shown as text without their
scheme: the page names its sources but refers to nothing outside itself.
"""
from __future__ import annotations

from typing import Any

from cxlbench.analysis.advisor import (COMBINE, DATASHEET, TERMS, Advice, AdviceError, advise_inputs, gather, gpu_config,
                                       held_tiers)
from cxlbench.report import build
from cxlbench.report.plots import Chart
from cxlbench.results.store import Run
from cxlbench.units import format_number, gib

def tier_key(tier: str) -> str:
    """The run report's colour key of a placement's tier: HBM is the GPU's, hbm0."""
    return "hbm0" if tier == "hbm" else tier


def _bare(url: str) -> str:
    """An address as text: without its scheme, so the page holds no link to follow."""
    return url.split("://", 1)[-1] if url else ""


def _chart(a: Advice, maker: build.ChartMaker) -> Chart:
    return build.relative_bars(
        maker, f"{a.model} on one {a.gpu_name}: tokens/s relative to the best placement (modelled)",
        "tokens/s relative to the best placement that fits (1 = the best)",
        [(p.label, tier_key(p.tier), p.relative if p.fits else None, p.tokens_per_s, p.verdict)
         for p in a.placements])


def advice_section(a: Advice, maker: build.ChartMaker) -> dict[str, Any]:
    rows = []
    for p in a.placements:
        rows.append({"label": p.label, "tier": p.tier, "kind": p.kind, "fits": p.fits, "verdict": p.verdict,
                     "need": gib(p.device_bytes), "step": format_number(p.step_s),
                     "tokens": format_number(p.tokens_per_s),
                     "relative": f"{p.relative * 100:.3g}%" if p.relative is not None else "—",
                     "terms": [format_number(p.terms.get(t)) for t in TERMS],
                     "named": p is a.choice, "best": p is a.best})
    inputs = [{"kind": f.source.kind, "name": f.name, "value": f.shown, "detail": f.detail,
               "source": f.source.text, "where": _bare(f.source.url)} for f in a.inputs.figures()]
    runs = [{"run_id": r.run_id, "machine": r.meta.get("machine_name") or r.meta.get("hostname") or "?",
             "suite": (r.meta.get("suite") or {}).get("name", "?"), "started": r.meta.get("started") or "—"}
            for r in a.inputs.runs]
    return {"svg": maker.svg(_chart(a, maker), wide=True), "rows": rows, "terms": TERMS,
            "conclusion": a.conclusion, "named": a.choice is not None, "rule": a.rule,
            "tokens_per_step": f"{a.tokens_per_step:,}", "combine": COMBINE,
            "inputs": inputs, "notes": a.notes, "left_out": ", ".join(a.left_out),
            "left_out_why": "Left out with --tiers", "runs": runs,
            "headline": a.headline,
            "datasheet": any(f.source.kind == DATASHEET for f in a.inputs.figures())}


def run_advice(run: Run, maker: build.ChartMaker) -> dict[str, Any] | None:
    """What a training run's report shows of the advice: {"advice": section} when the
    run holds everything — a GPU training case with its probes and a host tier's CPU
    AdamW rate — modelled for the largest config it trained on the GPU, over its own
    tiers; {"hint": line} when it holds the host side only (a CPU run); else None."""
    model = gpu_config([run])
    try:
        inputs = gather([run], None, model=model)
    except AdviceError:
        return None
    tiers = held_tiers(inputs)
    host = [t for t in tiers if t != "hbm"]
    if model is not None and inputs.gpu is not None and host:
        try:
            section = advice_section(advise_inputs(inputs, model, tiers), maker)
            return {"advice": {**section, "left_out_why": "Not modelled: this run measured no tier of kind"}}
        except AdviceError:
            return None
    if host:
        return {"hint": f"Where the optimizer state should live on a GPU machine: `cxlbench advise {run.path} "
                        f"--model 8b --gpu h200` models each placement ({', '.join(host)} and HBM) from this run's "
                        f"CPU AdamW and NVMe rates and a GPU's datasheet. This run trained on no GPU, so it has "
                        f"no GPU figures of its own."}
    return None
