"""The step-time model beside the measured step, for each training placement.

A training case stores its steps' breakdown (forward_s, backward_s, transfer_s,
optimizer_s, nvme waits: one sample per step) and one predicted_step_s sample
whose columns hold the model's terms (model_compute_s, model_d2h_s, ...). The
table puts each phase's median next to its term, so a reader sees which term a
disagreement comes from, not only that the step disagrees.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from cxlbench.report import build

TOLERANCE = 0.2      # the model's own (training/stepmodel.py): beyond it, a case is flagged


def _median(g: pd.DataFrame, *metrics: str) -> float:
    total = 0.0
    for m in metrics:
        v = g.loc[g["metric"] == m, "value"].median()
        total += 0.0 if pd.isna(v) else float(v)
    return total


def _term(pred: pd.Series, *names: str) -> float:
    return sum(float(pred[f"model_{n}_s"]) for n in names
               if f"model_{n}_s" in pred and pd.notna(pred[f"model_{n}_s"]))


def rows(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per training placement: measured and modelled seconds per phase."""
    if "mode" not in samples.columns:
        return pd.DataFrame()
    train = samples[(samples["benchmark"] == "training") & (samples["mode"] == "train")]
    out = []
    for case_id, g in train.groupby("case_id", sort=False):
        preds = g[g["metric"] == "predicted_step_s"]
        if preds.empty:
            continue
        pred = preds.iloc[0]
        nvme = _term(pred, "nvme")
        dpu = "dpu" in g and bool(g["dpu"].fillna(False).astype(bool).any())
        out.append({
            "tier": g["target"].iloc[0], "engine": g["engine"].iloc[0] + (" + DPU" if dpu else ""),
            "tokens_per_s": _median(g, "tokens_per_s"),
            "params_on": g["params_on"].iloc[0] if "params_on" in g else "",
            "step": _median(g, "step_time_s"), "step_model": float(pred["value"]),
            "compute": _median(g, "forward_s", "backward_s"), "compute_model": _term(pred, "compute"),
            "transfer": _median(g, "transfer_s"), "transfer_model": _term(pred, "d2h", "h2d"),
            "optimizer": _median(g, "optimizer_s", "nvme_read_s", "nvme_write_s"),
            "optimizer_model": max(_term(pred, "optimizer"), nvme),
            "basis": pred.get("model_compute_basis", "flops"),
        })
    return pd.DataFrame(out)


def _pair(measured: float, model: float) -> str:
    return f"{measured * 1e3:.3g} / {model * 1e3:.3g}" if model else f"{measured * 1e3:.3g} / —"


def section(samples: pd.DataFrame, maker) -> dict[str, list]:
    """What leads the training section: the relative chart, then the table."""
    r = rows(samples)
    chart, model = relative_chart(r, maker), table(r)
    return {"lead_charts": [chart] if chart else [], "lead_tables": [model] if model else []}


def table(r: pd.DataFrame) -> dict[str, Any] | None:
    """The table of `rows` for the training section (the points_table macro's shape)."""
    if r.empty:
        return None
    headers = ["tier", "engine", "params on", "step measured (ms)", "step model (ms)", "measured ÷ model",
               "compute (ms, measured / model)", "transfer", "optimizer + I/O waits", "compute term"]
    body = []
    for x in r.itertuples():
        ratio = x.step / x.step_model
        verdict = "holds" if abs(ratio - 1) <= TOLERANCE else "off"
        body.append([x.tier, x.engine, x.params_on, f"{x.step * 1e3:.3g}", f"{x.step_model * 1e3:.3g}",
                     f"{ratio:.2f} ({verdict})", _pair(x.compute, x.compute_model),
                     _pair(x.transfer, x.transfer_model), _pair(x.optimizer, x.optimizer_model),
                     "probe" if x.basis == "probe" else "FLOPs ÷ GEMM rate"])
    return {"title": f"Step-time model beside the measured step: medians over the steady steps, "
                     f"'holds' within ±{TOLERANCE:.0%}; compute term by probe = the step's operators "
                     f"replayed + the framework's overhead from a minimal twin",
            "headers": headers, "numeric": [3, 4, 5, 6, 7, 8], "rows": body, "more": 0}


def relative_chart(r: pd.DataFrame, maker) -> dict[str, Any] | None:
    """Measured tokens/s of each placement (`rows`) relative to the run's best: the
    chart the advisor draws from the model, here from the steps themselves."""
    if len(r) < 2:
        return None
    best = r["tokens_per_s"].max()
    chart = build.relative_bars(
        maker, "Training: measured tokens/s relative to the best placement in this run",
        "tokens/s relative to the best placement measured (1 = the best)",
        [(f"{x.tier} · {x.engine}" + (f" · params on {x.params_on}" if x.params_on != x.tier else ""),
          x.tier, x.tokens_per_s / best, x.tokens_per_s, "") for x in r.itertuples()])
    return {"svg": maker.svg(chart, wide=True), "title": chart.title, "wide": True}
