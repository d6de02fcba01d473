"""Run the training placements on this machine and print the table docs/validation.md
keeps: tokens/s, MFU and the step breakdown per placement, next to the model.

    python -m cxlbench.cli.training_check --configs tiny,1b --nvme /mnt/scratch --steps 20

Each case runs in this process, one after the other (the runner's worker
processes are the production path; this is the device check's short script).
Skipped cases are listed with their reason.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time


def _q(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    if len(values) < 4:
        return values[0], statistics.median(values), values[-1]
    q = statistics.quantiles(values, n=4)
    return q[0], q[1], q[2]


# Not cut from __doc__: python -OO strips docstrings, and the parser with them.
DESCRIPTION = ("Run the training placements on this machine and print the table docs/validation.md "
               "keeps: tokens/s, MFU and the step breakdown per placement, next to the model.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=DESCRIPTION)
    ap.add_argument("--configs", default="tiny")
    ap.add_argument("--engines", default="offload,none,fsdp2_cpu_offload")
    ap.add_argument("--optimizer-on", default="ddr,cxl,nvme,hbm")
    ap.add_argument("--nvme", default=None, help="a directory to declare as the nvme tier")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compute", default="auto", help="auto, gpu or cpu")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: a case whose estimate no longer fits in what is left is skipped")
    args = ap.parse_args(argv)

    import torch

    from cxlbench.benchmarks import training
    from cxlbench.benchmarks import spec as family_spec
    from cxlbench.benchmarks.base import Skip
    from cxlbench.runner.run import build_env

    env = build_env("/", [f"nvme={args.nvme}"] if args.nvme else [], {})
    spec = family_spec.of(training, config=args.configs.split(","), steps=args.steps,
                          warmup_steps=args.warmup, engine=args.engines.split(","),
                          optimizer_on=args.optimizer_on.split(","), compute=args.compute)
    print("| config | engine | initiator | optimizer on | params on | tokens/s median [IQR] | MFU "
          "| fwd / bwd / transfer / opt / nvme wait (ms) | model step (ms) | loss first→last | flag |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    skipped = []
    start = time.monotonic()
    for planned in training.plan(spec, env):
        case, p = planned.case, planned.case.params
        if planned.skip:
            skipped.append((case.case_id, planned.skip))
            continue
        if args.budget is not None and time.monotonic() - start + planned.estimate_s > args.budget:
            skipped.append((case.case_id, f"time budget of {args.budget:.0f} s spent (estimated "
                                          f"{planned.estimate_s:.0f} s)"))
            continue
        info: dict = {}
        t0 = time.time()
        try:
            samples = training.measure(case, env, info)
        except Skip as e:
            skipped.append((case.case_id, str(e)))
            continue
        except Exception as e:                      # one case's failure, the table goes on
            skipped.append((case.case_id, f"FAILED {type(e).__name__}: {e}"))
            continue
        finally:
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        by: dict[str, list[float]] = {}
        for s in samples:
            if set(s.params) <= {"iteration"}:          # the per-step samples
                by.setdefault(s.metric, []).append(s.value)
        lo, med, hi = _q(by["tokens_per_s"])
        ms = lambda k: statistics.median(by.get(k, [0.0])) * 1e3  # noqa: E731
        pred = next(s for s in samples if s.metric == "predicted_step_s")
        flag = "yes" if info["step_model"]["flagged"] else "no"
        curve = info["loss_curve"]
        print(f"| {p['config']} | {p['engine']} | {case.initiator} | {case.target} | {p['params_on']} "
              f"| {med:.4g} [{lo:.4g}–{hi:.4g}] | {statistics.median(by['mfu']):.3f} "
              f"| {ms('forward_s'):.3g} / {ms('backward_s'):.3g} / {ms('transfer_s'):.3g} / "
              f"{ms('optimizer_s'):.3g} / {ms('nvme_read_s') + ms('nvme_write_s'):.3g} "
              f"| {pred.value * 1e3:.4g} | {curve[0]:.2f}→{curve[-1]:.2f} | {flag} |")
        if info["step_model"]["flagged"]:
            print(f"<!-- {case.case_id}: {'; '.join(info['step_model']['disagreements'])} "
                  f"({time.time() - t0:.0f} s) -->")
        for note in info.get("notes") or []:     # why a term is priced as it is (the compute probe's fate)
            print(f"<!-- note: {note} -->")
        sys.stdout.flush()
    for case_id, reason in skipped:
        print(f"- skipped {case_id}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
