"""`cxlbench advise`: where the optimizer state should live, modelled from measured rates.

    cxlbench advise RESULTS... --model 8b [--gpu h200] [--mfu 0.4] [--within 10]
                    [--tiers hbm,ddr,nvme] [--batch N] [--seq N] [-o advice.html]

The body is `advise(...)`, a function with explicit parameters (tests call it);
`add_parser` is the thin argparse layer. A missing input, an unknown model or
GPU, or a path with no runs is one line and exit 2 (cli.main's known errors).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Sequence

from cxlbench.cli.commands import UserError
from cxlbench.units import format_number

if TYPE_CHECKING:
    from cxlbench.analysis.advisor import Advice

def advise(results: Sequence[str], model: str, gpu: str | None = None, mfu: float | None = None,
           within: float = 0.10, tiers: Sequence[str] | None = None, out: str | None = None,
           batch: int | None = None, seq: int | None = None) -> int:
    """Print the advice for `model` from the runs at or below `results` (and write it as
    HTML to `out`); mfu None: the default (0.40), assumed, for a datasheet GPU."""
    from cxlbench.analysis.advisor import DEFAULT_MFU, AdviceError, advise as make_advice
    try:
        advice = make_advice(results, model, gpu, DEFAULT_MFU if mfu is None else mfu, within, tiers,
                             batch, seq)
    except AdviceError as e:
        raise UserError(str(e)) from None
    print(advice_text(advice))
    if out:
        from cxlbench.report.advice import render_advice
        print(f"report: {render_advice(advice, out)}")
    return 0


def _pct(x: float) -> str:
    return f"{x * 100:.3g}%"


def advice_text(a: "Advice") -> str:
    from cxlbench.analysis.advisor import COMBINE, TERMS
    from cxlbench.analysis.compare import text_table
    lines = [a.headline,
             "MODELLED, not measured: training.stepmodel priced with the inputs below; per row, " + COMBINE, ""]
    fitting = [p for p in a.placements if p.fits]
    rows = [[p.label, f"{p.device_bytes / 2**30:.0f} GiB", format_number(p.step_s), format_number(p.tokens_per_s),
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
    """--within 10 or 10%: percent of the best tokens/s."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (e.g. 10 or 10%)") from None
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f"{text!r} must lie between 0 and 100 (percent)")
    return value / 100


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0.4)") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1] (e.g. 0.4 for 40%)")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def add_parser(sub) -> None:
    a = sub.add_parser("advise", help="where the optimizer state should live: every placement modelled "
                                      "from measured rates (and a GPU's datasheet)")
    a.add_argument("results", nargs="+", help="run directories or results folders (the runs' training "
                                              "and storage figures are the inputs)")
    a.add_argument("--model", required=True, help="model config: tiny, small, 1b, 3b, 8b, 70b")
    a.add_argument("--gpu", help="a datasheet entry (h100-sxm, h200, b200, a100-80gb); default: a GPU "
                                 "training run among the results")
    a.add_argument("--mfu", type=_fraction,
                   help="model FLOPs utilisation assumed with a datasheet GPU (default 0.40)")
    a.add_argument("--within", type=_within, default=0.10, metavar="PERCENT",
                   help="name the cheapest placement within this of the best tokens/s (default 10)")
    a.add_argument("--tiers", help="restrict the placements: kinds (hbm,ddr,cxl,nvme) or tier names "
                                   "(ddr0,nvme0), comma-separated; default every kind")
    a.add_argument("--batch", type=_positive, help="sequences per step (default: the config's)")
    a.add_argument("--seq", type=_positive, help="tokens per sequence (default: the config's)")
    a.add_argument("-o", "--out", help="also write the advice as one self-contained HTML file")
    a.set_defaults(func=lambda x: advise(
        x.results, x.model, x.gpu, x.mfu, x.within,
        [t.strip() for t in x.tiers.split(",") if t.strip()] if x.tiers else None, x.out, x.batch, x.seq))


__all__ = ["advise", "advice_text", "add_parser"]
