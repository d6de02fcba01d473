"""Training across ranks and nodes: a torchrun entry point.

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
        --rdzv-id JOB -m cxlbench.training.distributed --out STORE --config NAME

torchrun's c10d rendezvous forms the group; every rank builds the same Llama and
FSDP2 (`fully_shard`) shards it across all ranks (gloo on CPUs, NCCL on GPUs), as
torchtitan trains. Each rank trains on its own batches (data parallel: the global
batch grows with the world, the usual weak-scaling measurement). Each timed step
gives tokens/s per rank (its tokens over its step time) and in total (the world's
tokens over the slowest rank's time: the step ends when the last rank's gradients
are reduced). Rank 0 stores one run, every row tagged with rank and node_rank
(the totals with rank -1), so runs at world size 1, 2, 4 ... in one store give the
scaling efficiency the fleet report shows: total(W) / (W x total(1)).
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch

from cxlbench.results.schema import COMPLETE, Case, CaseResult, Sample
from cxlbench.results.store import RunWriter, StoreWriter
from cxlbench.results.location import is_url

NAME = "training_scaling"
FAMILY = {
    "title": "Training across ranks", "description": "FSDP2 training steps of a Llama model over "
    "torchrun's ranks: tokens/s per rank and in total, per world size.",
    "x": "world_size", "facets": [], "headlines": [], "pair": None,
    "metrics": {"tokens_per_s": {"unit": "tokens/s", "better": "higher"},
                "tokens_per_s_total": {"unit": "tokens/s", "better": "higher"},
                "step_s": {"unit": "s", "better": "lower"}},
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cxlbench.training.distributed",
                                description="FSDP2 training over torchrun's ranks, into a results store")
    p.add_argument("--model", default="tiny")
    p.add_argument("--batch", type=int, help="sequences per rank per step (default: the model's)")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--steps", type=int, default=8, help="timed steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", default="results", help="results store: a folder or a URL")
    p.add_argument("--config", default="training", help="the configuration's name in the store")
    p.add_argument("--label")
    p.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, one GPU per rank)")
    return p


def topology() -> dict[str, int]:
    """What torchrun told this process (GROUP_RANK is the node's rank)."""
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        raise SystemExit("cxlbench.training.distributed: start it with torchrun (no RANK/WORLD_SIZE set)")
    return {"rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"]),
            "local_rank": int(env.get("LOCAL_RANK", 0)), "node_rank": int(env.get("GROUP_RANK", 0)),
            "nnodes": int(env.get("GROUP_WORLD_SIZE", 1)) if "GROUP_WORLD_SIZE" in env else 0}


def train(args: argparse.Namespace, where: dict[str, int]) -> str:
    """This rank's timed steps, gathered on every rank; rank 0 stores them (and
    returns where), the others wait for it in the engine's close, so no launcher
    leaves early."""
    import torch.distributed as dist
    from cxlbench.training.configs import model_config, train_config
    from cxlbench.training.data import MarkovTokens
    from cxlbench.training.engine import Fsdp2Engine

    cfg = model_config(args.model)
    tc = train_config(args.model, batch=args.batch, seq_len=args.seq_len, steps=args.steps,
                      warmup_steps=args.warmup)
    device = f"cuda:{where['local_rank']}" if args.device == "cuda" else "cpu"
    engine = Fsdp2Engine(cfg, tc, device=device)
    data = MarkovTokens(cfg.vocab_size, seed=tc.seed)
    n = tc.warmup_steps + tc.steps
    # each rank its own batches: index them past the other ranks'
    batches = [engine.prepare(data.batch(where["rank"] * n + i, tc.batch, tc.seq_len)) for i in range(n)]
    for b in batches[:tc.warmup_steps]:
        engine.step(*b)
    mine = []
    for i, b in enumerate(batches[tc.warmup_steps:]):
        dist.barrier()                  # steps start together, so the slowest rank bounds each
        t0 = time.perf_counter()
        times = engine.step(*b)
        mine.append({"step": i, "step_s": time.perf_counter() - t0, "loss": times.loss})
    row = {**where, "host": socket.gethostname(), "steps": mine,
           "tokens_per_step": tc.batch * tc.seq_len, "model": args.model, "batch": tc.batch,
           "seq_len": tc.seq_len}
    everyone: list = [None] * where["world_size"]
    dist.all_gather_object(everyone, row)
    try:
        return store(args, everyone) if where["rank"] == 0 else ""
    finally:
        engine.close()


def samples(everyone: list[dict]) -> list[Sample]:
    out = []
    for r in everyone:
        tag = {"rank": r["rank"], "node_rank": r["node_rank"], "host": r["host"]}
        for s in r["steps"]:
            out.append(Sample("tokens_per_s", r["tokens_per_step"] / s["step_s"], s["step"], dict(tag)))
            out.append(Sample("step_s", s["step_s"], s["step"], dict(tag)))
    for i in range(len(everyone[0]["steps"])):
        slowest = max(r["steps"][i]["step_s"] for r in everyone)
        total = sum(r["tokens_per_step"] for r in everyone) / slowest
        out.append(Sample("tokens_per_s_total", total, i, {"rank": -1, "node_rank": -1, "host": ""}))
    return out


def store(args: argparse.Namespace, everyone: list[dict]) -> str:
    first = everyone[0]
    world = len(everyone)
    nodes = len({r["node_rank"] for r in everyone})
    case = Case(NAME, f"{args.device}:ranks", "ddr0" if args.device == "cpu" else "hbm0",
                "ddr" if args.device == "cpu" else "hbm",
                {"model": first["model"], "world_size": world, "nodes": nodes, "batch": first["batch"],
                 "seq_len": first["seq_len"]}, repetitions=len(first["steps"]), warmup=args.warmup)
    host = socket.gethostname()
    meta = {"label": args.label, "machine_name": host, "hostname": host, "command": sys.argv,
            "suite": {"name": NAME, "benchmark": []}, "families": {NAME: FAMILY},
            "configuration": {"name": args.config, "source": "label"},
            "training": {"world_size": world, "nodes": nodes, "backend": "gloo" if args.device == "cpu" else "nccl",
                         "ranks": [{k: r[k] for k in ("rank", "node_rank", "local_rank", "host")} for r in everyone]},
            "versions": {"torch": torch.__version__}}
    writer = StoreWriter(args.out, host, meta, args.config) if is_url(args.out) \
        else RunWriter(args.out, host, meta, args.config)
    writer.add(CaseResult(case, "ok", "", samples(everyone)))
    writer.finish(COMPLETE)
    return getattr(writer, "url", "") or str(writer.path)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    where = topology()
    stored = train(args, where)
    if stored:
        print(f"world size {where['world_size']}: stored {stored}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
