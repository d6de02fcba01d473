"""The question cxlbench exists for, on a whole GPU server: with the optimizer state on
DDR, CXL or NVMe instead of HBM, what share of all-HBM tokens/s is left — with and
without the delayed parameter update — and what would the slower tier have to give to
keep a target share of it?

    load_host(name_or_path) -> HostProfile      a hosts.toml entry, or a file of that form
    host_from_runs(runs, gpus) -> HostProfile   the host tiers measured runs hold
    whatif(gpu, host, model, cluster, ...) -> WhatIf

Every figure is modelled (training.stepmodel): one GPU's step, its tokens and its
partition of the optimizer state (ZeRO: the state sharded over every GPU), its share
of its node's cores, tier bandwidth and drives (stepmodel.per_gpu), priced
"overlapped" (the update after backward) and "dpu" (the update behind the next step),
at ZeRO-2 where its whole bf16 copy of the parameters fits a GPU beside the rest, else
at ZeRO-3 (the parameters sharded and gathered layer by layer): what fits decides it,
for every row alike.
All-HBM is the state in each GPU's memory, stepped there: the reference every tier's
share is taken of, whether or not it fits — which is the seed chart's own premise.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from cxlbench import tomlfile
from cxlbench.analysis.advisor import (ASSUMED, DATASHEET, MEASURED, PAPER, PROVENANCES, AdviceError, Figure, GpuInputs, HostTier,
                                       Source, _host_tiers)
from cxlbench.analysis.advisor import _workload as advisor_workload
from cxlbench.results.store import Run
from cxlbench.training.configs import model_config, train_config
from cxlbench.training.footprint import REDUCE_BUCKET_BYTES, hbm_need, hbm_parts
from cxlbench.training.stepmodel import (ACTIVATION_BYTES, ADAMW_BYTES, Cluster, Prediction, Rates, Workload,
                                         activation_bytes, per_gpu, predict)
from cxlbench.units import GIB, ceil_sig, format_count, gib

HOSTS_FILE = Path(__file__).with_name("hosts.toml")
#: A CPU core's AdamW rate where a profile has no measured one: ZeRO-Offload's CPU-Adam
#: stepped 10B parameters in 2.57 s on a DGX-2's 2× Xeon Platinum 8168, 48 cores
#: (Ren et al. 2021, Table 4) — the one published CPU-Adam rate with its CPUs named.
PER_CORE_ADAMW = 10e9 / 2.57 / 48
PER_CORE_SOURCE = Source(PAPER, "ZeRO-Offload (Ren et al., ATC 2021) Table 4: CPU-Adam steps 10B parameters in "
                                "2.57 s on 2× Xeon Platinum 8168 (48 cores): 81 M params/s per core")
HOST_TIERS = ("ddr", "cxl", "nvme")
#: The step's terms a row shows, in the order the tables print them
TERMS = ("compute", "d2h", "h2d", "optimizer", "nvme", "reduce_scatter", "all_gather", "state_memory")
#: How a row's terms add up, for the reader (training/stepmodel.py)
FLOOR = ("on every host tier, each at least state-memory: the time that tier's memory (DDR's buffers under NVMe) "
         "takes to move what the update, the gradients, the parameters and NVMe's swap ask of it")
COMBINE_DPU = ("without DPU, step = compute + max(0, max(d2h, reduce-scatter) − ⅔·compute) + max(optimizer, nvme, "
               "h2d) + h2d/chunks + all-gather; with DPU, step = max(compute + max(0, max(d2h, reduce-scatter) − "
               "⅔·compute), max(optimizer, nvme, h2d) + h2d/chunks + all-gather); all-HBM: compute + max(0, "
               "reduce-scatter − ⅔·compute) + optimizer + all-gather; " + FLOOR)
#: The same with the parameters sharded too (ZeRO-3): gathered for every forward and
#: backward behind the compute, not after the update
COMBINE_ZERO3 = ("without DPU, step = compute + exposed + max(optimizer, nvme, h2d) + h2d/chunks; with DPU, step = "
                 "max(compute + exposed, max(optimizer, nvme, h2d) + h2d/chunks); all-HBM: compute + exposed + "
                 "optimizer; exposed = max(0, gather − ⅓·compute) + max(0, max(d2h, reduce-scatter + {back}) − "
                 "⅔·compute), the forward's gather behind the forward and the backward's beside the reduce-scatter "
                 "behind the backward (all-gather is the {count} gathers' sum); " + FLOOR)
#: What the model leaves out, said wherever its figures are shown
LEFT_OUT = ("the collectives' latency and algorithm efficiency (the GPUs' exchange is priced at the links' "
            "rates: a lower bound); "
            "activations offloaded to the host (they stay in HBM: "
            f"{ACTIVATION_BYTES} B × tokens × dim × layers, or with --recompute each layer's bf16 input and one "
            "layer's whole); DPU's staleness (one step) as it affects convergence; "
            "gradients copied down one GPU at a time (DeepSpeed's ZeRO-2 offload unless round_robin_gradients "
            "is set: each GPU's share is priced over its own link); "
            "the output logits (fp32, and their gradient), the CUDA context and allocator slack in what fits")


@dataclass
class HostProfile:
    name: str
    title: str
    gpus: int | None                     # GPUs per node the profile describes (None: runs)
    tiers: dict[str, HostTier]           # by tier name: ddr, cxl, nvme (a profile) or ddr0, nvme0 (runs)
    figures: list[Figure] = field(default_factory=list)    # what the tiers' figures came from
    network: Figure | None = None        # a node's NICs, per direction, all together


def _tier_adamw(kind: str, bandwidth: Figure, cores: Figure, given: dict) -> Figure:
    """A measured rate where the profile has one; else the lower of the two bounds a
    CPU AdamW has: the tier's bandwidth over AdamW's 28 bytes per parameter, and the
    cores at the one published per-core rate."""
    name = f"CPU AdamW, optimizer state on {kind.upper()}"
    if "adamw_params_per_s" in given:
        return Figure(name, _positive(given, "adamw_params_per_s"), "params/s",
                      Source(_provenance(given, "adamw_provenance", MEASURED),
                             given.get("adamw_source", "as the profile states")))
    by_bw = bandwidth.value * 1e9 / ADAMW_BYTES
    by_cores = cores.value * PER_CORE_ADAMW
    bound = "the tier's bandwidth" if by_bw <= by_cores else "the cores"
    return Figure(name, min(by_bw, by_cores), "params/s",
                  Source(ASSUMED, f"modelled: the lower of {bandwidth.value:g} GB/s ÷ {ADAMW_BYTES} B per parameter "
                                  f"({format_count(by_bw)} params/s) and {cores.value:g} cores × 81 M params/s "
                                  f"({format_count(by_cores)} params/s, {PER_CORE_SOURCE.text}); {bound} bound it"))


#: what a profile's figure with no source says where it came from
UNSOURCED = "the profile, which names no source: assumed"


def _unsourced(table: dict, key: str) -> str:
    """A figure's default provenance: datasheet where the profile names its source,
    assumed where it names none (a hand-written profile's figure is no datasheet's)."""
    return DATASHEET if table.get(key) else ASSUMED


def _provenance(table: dict, key: str, default: str) -> str:
    value = table.get(key, default)
    if value not in PROVENANCES:
        raise ValueError(f"{key} {value!r} is none of {', '.join(PROVENANCES)}")
    return value


def _positive(table: dict, key: str, most: float = math.inf) -> float:
    """A profile's figure: a positive, finite number (a bandwidth, a core count, a rate),
    at most `most` (past which it is a typo, not a server)."""
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{key} = {value!r} is not a positive number")
    if value > most:
        raise ValueError(f"{key} = {value!r}: at most {most:,g}")
    return float(value)


def _table(entry: dict, kind: str) -> dict:
    t = entry[kind]
    if not isinstance(t, dict):
        raise ValueError(f"{kind} = {t!r} is not a table ([{kind}] with its figures)")
    return t


#: the keys a profile's tables take (hosts.toml's header says what each is): a misspelt
#: one would otherwise leave its figure to the model without a word
PROFILE_KEYS = {"title", "gpus", "cores", "cores_source", "network_GBps", "network_source", "network_url",
                "ddr", "cxl", "nvme"}
TIER_KEYS = {"bandwidth_GBps", "adamw_params_per_s", "adamw_provenance", "adamw_source", "source", "url",
             "provenance"}
NVME_KEYS = {"read_GBps", "write_GBps", "source", "url", "provenance"}


def _known_keys(entry: dict) -> None:
    for where, table, known in [("", entry, PROFILE_KEYS),
                                *((f"[{k}] ", entry[k], NVME_KEYS if k == "nvme" else TIER_KEYS)
                                  for k in ("ddr", "cxl", "nvme") if isinstance(entry.get(k), dict))]:
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"{where}{unknown[0]} is no key of a profile (those are: {', '.join(sorted(known))})")


def _profile(name: str, entry: dict) -> HostProfile:
    def source(t: dict) -> Source:
        return Source(_provenance(t, "provenance", _unsourced(t, "source")), t.get("source", UNSOURCED),
                      t.get("url", ""))

    try:
        _known_keys(entry)
        cores = Figure("CPU cores per node", _positive(entry, "cores", most=8192), "cores",
                       Source(_unsourced(entry, "cores_source"), entry.get("cores_source", UNSOURCED)))
        tiers: dict[str, HostTier] = {}
        figures = [cores]
        for kind in ("ddr", "cxl"):
            if kind in entry:
                t = _table(entry, kind)
                bw = Figure(f"{kind.upper()} bandwidth per node", _positive(t, "bandwidth_GBps"), "GB/s", source(t))
                tiers[kind] = HostTier(kind, kind, adamw=_tier_adamw(kind, bw, cores, t), bandwidth=bw,
                                       machine=name)
                figures.append(bw)
        if "nvme" in entry:
            t = _table(entry, "nvme")
            ddr = tiers.get("ddr")
            if ddr is None:
                raise AdviceError(f"host profile {name!r}: an nvme table needs a ddr one (the update runs on DDR "
                                  "buffers)")
            read = Figure("NVMe read bandwidth per node", _positive(t, "read_GBps"), "GB/s", source(t))
            write = Figure("NVMe write bandwidth per node", _positive(t, "write_GBps"), "GB/s", source(t))
            tiers["nvme"] = HostTier("nvme", "nvme", adamw=ddr.adamw, nvme_read=read, nvme_write=write,
                                     bandwidth=ddr.bandwidth, machine=name)
            figures += [read, write]
        gpus = entry.get("gpus")
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 1024):
            raise ValueError(f"gpus = {gpus!r} is not a whole number of GPUs from 1 to 1024")
        network = None
        if "network_GBps" in entry:
            network = Figure("network per node (its NICs)", _positive(entry, "network_GBps"), "GB/s",
                             Source(_unsourced(entry, "network_source"), entry.get("network_source", UNSOURCED),
                                    entry.get("network_url", "")), "per direction")
            figures.append(network)
    except KeyError as e:
        raise AdviceError(f"host profile {name!r} lacks {e.args[0]} (see cxlbench/analysis/hosts.toml for the "
                          "form)") from None
    except (TypeError, ValueError) as e:
        raise AdviceError(f"host profile {name!r}: {e}") from None
    return HostProfile(name, entry.get("title", name), gpus, tiers, figures, network)


def load_host(name: str, path: str | Path = HOSTS_FILE) -> HostProfile:
    """A profile of hosts.toml by name, or a .toml file holding one profile's keys, or
    profiles in hosts.toml's form (FILE.toml:NAME picks one of several)."""
    file, _, pick = name.rpartition(":") if ".toml:" in name else (name, "", "")
    if file.endswith(".toml"):
        try:
            entry = tomlfile.read(file)
        except tomlfile.TomlFileError as e:
            raise AdviceError(f"--host {e}") from None
        named = {k: v for k, v in entry.items() if _a_profile(v)} if not _a_profile(entry, tables=False) else {}
        if pick or len(named) > 1:
            if pick not in named:
                raise AdviceError(f"--host {file} holds {len(named)} profiles ({', '.join(named)}): name one as "
                                  f"{file}:{next(iter(named), 'NAME')}" + (f", not {pick!r}" if pick else ""))
            return _profile(pick, named[pick])
        if len(named) == 1 and len(entry) == 1:
            (name, entry), = named.items()          # hosts.toml's own form: one [NAME] with its tables
            return _profile(name, entry)
        return _profile(Path(file).stem, entry)
    profiles = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    if name not in profiles:
        raise AdviceError(f"unknown host profile {name!r}: the profiles are {', '.join(sorted(profiles))} "
                          f"(cxlbench/analysis/hosts.toml), or give a .toml file of that form")
    return _profile(name, profiles[name])


def _a_profile(table: Any, tables: bool = True) -> bool:
    """Whether a TOML table is a whole profile (its cores, or tier tables of its own),
    not one tier's table; tables=False: judged by its cores alone."""
    return isinstance(table, dict) and ("cores" in table
                                        or (tables and any(isinstance(v, dict) for v in table.values())))


def host_from_runs(runs: Sequence[Run]) -> HostProfile:
    """The host tiers the runs measured (their CPU AdamW and NVMe rates); no tier
    bandwidth, so the GPUs' links alone bound the copies."""
    tiers, _ = _host_tiers(runs)
    complete = {n: t for n, t in tiers.items() if not t.missing()}
    if not complete:
        raise AdviceError("the given runs hold no host tier with a CPU AdamW rate: run `cxlbench run --suite "
                          "training` there, or name a server profile with --host")
    machines = sorted({t.machine for t in complete.values() if t.machine})
    return HostProfile("measured", f"the host tiers measured on {', '.join(machines)}", None, complete)


# ---- the model ------------------------------------------------------------------------

@dataclass(frozen=True)
class Need:
    """What one input of a tier must be for the tier to reach the target share."""
    overlap: str                      # overlapped (without DPU) / dpu
    input: str                        # "adamw", "nvme" or "accumulate": the input varied
    factor: float | None              # × the given figure (accumulate: the least count); None: no
                                      # value reaches the target
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class TierRow:
    tier: str
    kind: str
    plain: Prediction                 # the update after backward ("overlapped"; "none" for HBM)
    dpu: Prediction                   # the update behind the next step (HBM: the same as plain)
    tokens_per_s: float               # the whole cluster's
    dpu_tokens_per_s: float
    device_bytes: int                 # what one GPU must hold
    share: float = math.nan           # of all-HBM tokens/s
    dpu_share: float = math.nan
    needs: list[Need] = field(default_factory=list)    # what must be true to reach the target
    curve: list[tuple[int, float, float]] = field(default_factory=list)   # (batches per step, share,
                                                                           # with DPU): accumulation

    @property
    def label(self) -> str:
        return "all-HBM" if self.kind == "hbm" else f"optimizer state on {self.tier}"


@dataclass
class WhatIf:
    model: str
    n_params: int
    gpu: GpuInputs
    host: HostProfile
    cluster: Cluster
    batch: int
    seq: int
    target: float
    rows: list[TierRow]               # hbm first, then ddr, cxl, nvme
    capacity_bytes: int
    recompute: bool = False           # activation checkpointing
    micro_steps: int = 1              # gradient accumulation: batches per optimizer step
    zero: int = 2                     # ZeRO stage: 2 keeps the bf16 parameters whole on every GPU,
                                      # 3 shards them too
    zero_why: str = ""                # why that stage
    held_offloaded: dict[str, float] = field(default_factory=dict)   # what a GPU holds, part by part
    held_hbm: dict[str, float] = field(default_factory=dict)

    @property
    def hbm(self) -> TierRow:
        return self.rows[0]

    @property
    def headline(self) -> str:
        c = self.cluster
        where = f"{c.gpus_per_node} × {self.gpu.label.split(' (')[0]}" + (f" on each of {c.nodes} nodes"
                                                                          if c.nodes > 1 else "")
        return (f"{self.model} ({format_count(self.n_params)} params) on {where}, host {self.host.name}; "
                f"batch {self.batch} × seq {self.seq} per GPU"
                + (f", {self.micro_steps} of them per optimizer step" if self.micro_steps > 1 else "")
                + (", activations checkpointed" if self.recompute else "")
                + (f"; the optimizer state sharded over {c.gpus} GPUs" if c.gpus > 1 else "; the optimizer state unsharded (one GPU)")
                + (f", ZeRO-3: the parameters too ({self.zero_why})" if self.zero == 3 else
                   f", ZeRO-2: the bf16 parameters whole on every GPU ({self.zero_why})")
                + ("" if self.rows[1].device_bytes <= self.capacity_bytes else
                   f"; no placement fits {gib(self.capacity_bytes)} a GPU (offloaded, one needs "
                   f"{gib(self.rows[1].device_bytes)}): every figure is priced as if it did"))

    @property
    def combine(self) -> str:
        """How a row's terms add up, with what accumulation changes in them."""
        base = COMBINE_DPU
        if self.zero == 3:
            base = COMBINE_ZERO3.format(back="2 × gather" if self.recompute else "gather",
                                        count="three" if self.recompute else "two")
        if self.micro_steps == 1:
            return base
        return (base + f"; with {self.micro_steps} batches per optimizer step, compute, d2h and "
                "reduce-scatter" + (" and the gathers" if self.zero == 3 else "") + " are their sums over the "
                "batches and what the compute cannot hide of them is taken batch by batch (the accumulated "
                "gradients crossing the host tier both ways from the second on), the update and its copies back "
                "once" + ("" if self.zero == 3 else ", and the all-gather"))

    def figures(self) -> list[Figure]:
        seen, out = set(), []
        for f in [*self.gpu.figures(), *self.host.figures,
                  *(f for t in self.host.tiers.values() for f in (t.adamw, t.nvme_read, t.nvme_write) if f)]:
            if id(f) not in seen:
                seen.add(id(f))
                out.append(f)
        return out


def _workload(model: str, batch: int, seq: int, cluster: Cluster, offload: bool, nvme: bool,
              recompute: bool = False, micro_steps: int = 1, zero: int = 2) -> Workload:
    """One GPU's step: `micro_steps` forwards and backwards of `batch` sequences each
    (gradient accumulation), then one update."""
    w = advisor_workload(model_config(model), train_config(model, batch=batch, seq_len=seq), offload, nvme,
                         shards=cluster.gpus, recompute=recompute).accumulating(micro_steps)
    return replace(w, params_sharded=zero == 3)


def held_text(w: "WhatIf") -> str:
    """What a GPU holds, offloaded and all-HBM, part by part: why a placement fits or not."""
    def listed(parts: dict[str, float]) -> str:
        return " + ".join(f"{k} {v / GIB:,.1f}" for k, v in parts.items())

    extra = {k: v for k, v in w.held_hbm.items() if k not in w.held_offloaded}
    return (f"HBM a GPU holds (ZeRO-{w.zero}, GiB): with the state offloaded, {listed(w.held_offloaded)} = "
            f"{gib(w.rows[1].device_bytes)}; all-HBM adds {listed(extra)} = "
            f"{gib(w.hbm.device_bytes)}")


def _unfit(parts: dict[str, float], capacity: int, recompute: bool, zero: int, gpus: int) -> Need:
    """A placement a GPU cannot hold has no rate of the host that makes it run: what
    must be true first is that it fits (the figures above price it as if it did), and
    the ways offered are those that shrink what overflows: the activations (a smaller
    batch or sequence, recomputation) only if the rest fits; the parameters by ZeRO-3
    where ZeRO-2 keeps them whole, or by more GPUs where ZeRO-3 shards them."""
    need, activations = sum(parts.values()), parts.get("activations", 0.0)
    params = sum(v for k, v in parts.items() if k.startswith("bf16 parameters"))
    ways = []
    if need - activations < capacity:
        ways += ["a smaller batch or sequence"] + ([] if recompute else ["--recompute (activations checkpointed)"])
    if zero == 2 and gpus > 1:
        ways.append("--zero 3 (the parameters sharded over the GPUs)")
    if zero == 3 and params > capacity / 4:
        ways.append("more GPUs (a smaller share of the parameters each)")
    if gpus == 1 and need - activations >= capacity:
        ways.append("more GPUs, with --zero 3")
    first = f"fit it first: {', or '.join(ways)}" if ways else "nothing advise can vary fits it"
    return Need("both", "fit", None,
                f"does not fit {gib(capacity)} a GPU (needs {gib(need)}, activations "
                f"{activations / GIB:,.0f} of it): no host rate makes it run, so none is named; {first}")


def _stage(zero: int | None, gpus: int, zero2_need: int, capacity: int) -> tuple[int, str]:
    """ZeRO-2 where its offloaded placement fits a GPU (the parameters need no gathering
    then: ZeRO-Offload's layout) or there is one GPU; else ZeRO-3 (ZeRO-Infinity's); or
    the stage asked for."""
    if zero == 3 and gpus == 1:
        raise AdviceError("--zero 3 shards the parameters over the GPUs: with one GPU there is nothing to shard "
                          "them over (give --gpus above 1, or --zero 2)")
    if zero is not None:
        return zero, "as asked"
    if gpus == 1:
        return 2, "one GPU: nothing to shard the parameters over"
    if zero2_need <= capacity:
        return 2, f"{gib(zero2_need)} a GPU with the state offloaded fits {gib(capacity)}"
    return 3, (f"ZeRO-2's whole bf16 copy would need {gib(zero2_need)} a GPU with the state offloaded, "
               f"more than its {gib(capacity)}")


def _node_rates(gpu: GpuInputs, tier: HostTier, scale_adamw: float = 1.0, scale_nvme: float = 1.0) -> Rates:
    return Rates(flops_per_s=gpu.flops.value * 1e12, d2h_Bps=gpu.d2h.value * 1e9, h2d_Bps=gpu.h2d.value * 1e9,
                 opt_params_per_s=tier.adamw.value * scale_adamw,
                 nvme_read_Bps=tier.nvme_read.value * 1e9 * scale_nvme if tier.nvme_read else None,
                 nvme_write_Bps=tier.nvme_write.value * 1e9 * scale_nvme if tier.nvme_write else None)


def price(w: Workload, gpu: GpuInputs, tier: HostTier, cluster: Cluster, overlap: str,
           scale_adamw: float = 1.0, scale_nvme: float = 1.0) -> Prediction:
    host = tier.bandwidth.value * 1e9 if tier.bandwidth else None
    rates = per_gpu(_node_rates(gpu, tier, scale_adamw, scale_nvme), cluster, host)
    if host:
        # the state (on NVMe: the DDR buffers it is stepped in) and the pinned buffers
        # the copies use are both on this tier
        rates = replace(rates, state_Bps=rates.host_Bps)
    return predict(w, rates, overlap)


def _tokens(p: Prediction, w: Workload, cluster: Cluster) -> float:
    return w.tokens_per_step * cluster.gpus / p.step_s


def _smallest_factor(reaches: Callable[[float], bool], lo: float = 1e-4, hi: float = 1e6) -> float | None:
    """The smallest factor on one input at which `reaches` holds (it holds for all
    larger ones: more bandwidth never slows the model's step); None when even `hi`
    does not."""
    if not reaches(hi):
        return None
    if reaches(lo):
        return lo
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return hi


def _needs(w: Workload, gpu: GpuInputs, tier: HostTier, cluster: Cluster, hbm_tokens: float,
           target: float) -> list[Need]:
    """What must be true of the tier for its tokens/s to reach `target` of all-HBM's,
    per composition."""
    nvme = tier.kind == "nvme"
    goal = target * hbm_tokens
    out = []
    for overlap, name in (("overlapped", "without DPU"), ("dpu", "with DPU")):
        def reaches(k: float) -> bool:
            p = price(w, gpu, tier, cluster, overlap, 1.0 if nvme else k, k if nvme else 1.0)
            return _tokens(p, w, cluster) >= goal

        k = _smallest_factor(reaches)
        varied = "nvme" if nvme else "adamw"
        if k is None:
            cap = price(w, gpu, tier, cluster, overlap, *((1.0, 1e9) if nvme else (1e9, 1.0)))
            out.append(Need(overlap, varied, None,
                            f"{name}: no {'NVMe bandwidth' if nvme else 'AdamW rate'} reaches {target * 100:g}%: with "
                            f"it unbounded the step is {cap.step_s:.3g} s "
                            f"({_tokens(cap, w, cluster) / hbm_tokens * 100:.3g}% of all-HBM), of "
                            + _held_by(cap)
                            + ("" if nvme else _tier_bound(w, gpu, tier, cluster, overlap, goal, cap, target))))
        elif nvme:
            r, wr = ceil_sig(tier.nvme_read.value * k), ceil_sig(tier.nvme_write.value * k)
            out.append(Need(overlap, varied, k, f"{name}: NVMe ≥ {r:.3g} GB/s read and {wr:.3g} GB/s write per node "
                                                f"({ceil_sig(k):.3g}× the {tier.nvme_read.value:g}/"
                                                f"{tier.nvme_write.value:g} GB/s given)"))
        else:
            rate = ceil_sig(tier.adamw.value * k)
            out.append(Need(overlap, varied, k, f"{name}: CPU AdamW ≥ {format_count(rate)} params/s per node "
                                                f"({ceil_sig(k):.3g}× the {format_count(tier.adamw.value)} given) — a "
                                                f"bandwidth-bound AdamW needs {math.ceil(rate * ADAMW_BYTES / 1e9):,} "
                                                f"GB/s of {tier.kind.upper()} for it"))
    return out


#: the most batches per optimizer step the accumulation lines search (what --accumulate takes)
MAX_ACCUMULATE = 10**6
#: the page's accumulation chart runs from one batch a step to this (or the count priced)
CURVE_TOP = 4096


def _price_hbm(w: Workload, gpu: GpuInputs, cluster: Cluster) -> Prediction:
    return predict(w, Rates(flops_per_s=gpu.flops.value * 1e12, opt_params_per_s=gpu.adamw.value,
                            collective_Bps=cluster.collective_Bps), "none")


@dataclass(frozen=True)
class Reach:
    """Where a tier's share of all-HBM, against batches per optimizer step, meets the target."""
    least: int | None                 # the least count that reaches it; None: none to MAX_ACCUMULATE
    until: int | None = None          # the last count that does, where it falls back under before the end
    best: int = 1                     # where none does: the count with the highest share
    past: bool = False                # ... though counts past MAX_ACCUMULATE would reach it


def _batches(k: int) -> str:
    return f"{k:,} batch{'' if k == 1 else 'es'}"


def _accumulation_needs(w: Workload, w_hbm: Workload, gpu: GpuInputs, tier: HostTier, cluster: Cluster,
                        target: float) -> list[Need]:
    """The other lever than a faster tier: more batches per optimizer step (gradient
    accumulation), which pays the update and its copies back once for all of them. The
    counts at which the tier reaches `target` of all-HBM at the same count (the share is
    taken like for like: all-HBM accumulates too), per composition. A count is a global
    batch, and whether the recipe converges at it is not the model's to say."""
    per_batch = _one_batch(w).tokens_per_step * cluster.gpus
    share = _share_at(w, w_hbm, gpu, tier, cluster)
    out = []
    for overlap, name in (("overlapped", "without DPU"), ("dpu", "with DPU")):
        def pct(k: int, where: str = "") -> str:
            x = share(k, overlap)
            over = ("; over 100%: all-HBM runs its update and the parameters' all-gather after it in series, "
                    "which DPU overlaps with the next step") if x > 1 else ""
            return f"{x * 100:.3g}% of all-HBM{where}{over}"

        r = reach(lambda k: share(k, overlap), target)
        if r.least is None:
            text = (f"no accumulation up to {MAX_ACCUMULATE:,} batches a step reaches {target * 100:g}% "
                    f"({pct(MAX_ACCUMULATE, ' there')}), only more: the update, paid once a step, holds it"
                    if r.past else
                    f"no accumulation reaches {target * 100:g}%: "
                    + (f"it approaches {pct(r.best)} however many batches a step" if r.best == MAX_ACCUMULATE else
                       f"at most {pct(r.best)}, at {_batches(r.best)} a step, less after")
                    + ": what each batch pays on this tier holds it, not the update")
        elif share(w.micro_steps, overlap) >= target:
            text = f"reached with the {_batches(w.micro_steps)} a step given ({pct(w.micro_steps)})" + (
                f"; from {_batches(r.least)} a step on" if r.least < w.micro_steps else "")
        else:
            counts = (f"{r.least:,} to {r.until:,} batches a step (more pull it back under: each batch costs "
                      f"more on this tier than on HBM)" if r.until else f"≥ {_batches(r.least)} a step")
            text = (f"instead, accumulate {counts}: a global batch of {format_count(r.least * per_batch)} tokens "
                    f"({pct(r.least, ' at that count')}; whether the recipe converges at it is not modelled)")
        out.append(Need(overlap, "accumulate", r.least, f"{name}: {text}"))
    return out


def _share_at(w: Workload, w_hbm: Workload, gpu: GpuInputs, tier: HostTier,
              cluster: Cluster) -> Callable[[int, str], float]:
    """share(k, overlap): the tier's tokens/s over all-HBM's with k batches per
    optimizer step on both."""
    one, one_hbm = _one_batch(w), _one_batch(w_hbm)

    def share(k: int, overlap: str) -> float:
        tier_w, hbm_w = one.accumulating(k), one_hbm.accumulating(k)
        return (_tokens(price(tier_w, gpu, tier, cluster, overlap), tier_w, cluster)
                / _tokens(_price_hbm(hbm_w, gpu, cluster), hbm_w, cluster))
    return share


def _accumulation_curve(w: Workload, w_hbm: Workload, gpu: GpuInputs, tier: HostTier, cluster: Cluster,
                        needs: list[Need]) -> list[tuple[int, float, float]]:
    """(batches per step, share without DPU, share with DPU) at 1, 2, 4 ... CURVE_TOP, the
    count priced, and each count the needs name within that range (so the lines cross
    the target where the text says)."""
    top = max(CURVE_TOP, w.micro_steps)
    named = {n.factor for n in needs if n.input == "accumulate" and n.factor and n.factor <= top}
    counts = sorted({2 ** i for i in range(top.bit_length())} | {w.micro_steps, top} | named)
    share = _share_at(w, w_hbm, gpu, tier, cluster)
    return [(k, share(k, "overlapped"), share(k, "dpu")) for k in counts]


def _one_batch(w: Workload) -> Workload:
    """The step of one batch per optimizer step, that `accumulating` multiplies."""
    return replace(w, tokens_per_step=round(w.tokens_per_step / w.micro_steps), micro_steps=1)


def _counts() -> list[int]:
    """The counts the accumulation search walks: every one to 64, then 5% apart."""
    counts = list(range(1, 65))
    while counts[-1] < MAX_ACCUMULATE:
        counts.append(min(MAX_ACCUMULATE, math.ceil(counts[-1] * 1.05)))
    return counts


def _boundary(reaches: Callable[[int], bool], lo: int, hi: int) -> int:
    """The count in (lo, hi] where `reaches` turns, given it differs at lo and hi: the
    first that reaches when rising (reaches(hi)), the first that does not when falling."""
    turned = reaches(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) == turned else (mid, hi)
    return hi


def reach(share: Callable[[int], float], target: float) -> Reach:
    """Where share(k) meets the target over 1..MAX_ACCUMULATE. The share rises while the
    once-a-step costs shrink against the batches, and can then fall where each batch
    costs more on the tier than on HBM: so the search walks up from one batch (one by
    one, then 5% apart), bisects between the last count short of the target and the
    first that reaches it, and where the share at MAX_ACCUMULATE is under the target
    again, finds where it falls back the same way."""
    reaches = lambda k: share(k) >= target          # noqa: E731
    counts = _counts()
    best, best_share = 1, -math.inf
    for i, k in enumerate(counts):
        s = share(k)
        if s >= target:
            least = _boundary(reaches, counts[i - 1] if i else 0, k)
            if reaches(MAX_ACCUMULATE):
                return Reach(least)
            j = next(j for j in range(i, len(counts)) if not reaches(counts[j]))
            return Reach(least, until=_boundary(reaches, counts[j - 1], counts[j]) - 1)
        if s > best_share:
            best, best_share = k, s
    return Reach(None, best=best, past=reaches(LIMIT_COUNT))


#: a count past any recipe's, where the once-a-step costs are nothing against the
#: batches: the share there is the one more batches approach
LIMIT_COUNT = 10**12


def _tier_bound(w: Workload, gpu: GpuInputs, tier: HostTier, cluster: Cluster, overlap: str, goal: float,
                cap: Prediction, target: float) -> str:
    """Where the DDR or CXL tier, not the cores, holds a step with AdamW unbounded: as a
    floor (state-memory), or through the link's share of it (the accumulated gradients
    cross it both ways each micro-step); then the bandwidth that would reach the target.
    Empty where the tier does not hold it."""
    memory = cap.terms.get("state_memory", 0.0) >= cap.step_s
    update = cap.terms.get("optimizer", 0.0)        # with the cores unbounded: the tier's own time
    wider = _tier_need(w, gpu, tier, cluster, overlap, goal) if tier.bandwidth else None
    if not memory and not (wider and wider > 1):
        return ""
    parts = ([f"AdamW's {ADAMW_BYTES} B a parameter through it, {update:.3g} s a step at any core count"]
             if update >= 0.001 else [])
    if w.micro_steps > 1 or not parts:
        parts.append("the GPUs' copies through it, the accumulated gradients both ways")
    how = ("state-memory: what the update, the gradients and the parameters move through it" if memory
           else "; ".join(parts))
    need = (f": {target * 100:g}% needs ≥ {math.ceil(tier.bandwidth.value * wider):,} GB/s of it per node "
            f"({ceil_sig(wider):.3g}× the {tier.bandwidth.value:,.0f} given) with AdamW unbounded" if wider else "")
    return f" — the {tier.kind.upper()}'s bandwidth holds it ({how}), not the cores{need}"


def _tier_need(w: Workload, gpu: GpuInputs, tier: HostTier, cluster: Cluster, overlap: str,
               goal: float) -> float | None:
    """The least factor on the tier's bandwidth that reaches `goal` tokens/s with the
    AdamW rate unbounded (where the memory, not the cores, holds the step)."""
    def reaches(m: float) -> bool:
        wider = replace(tier, bandwidth=replace(tier.bandwidth, value=tier.bandwidth.value * m))
        return _tokens(price(w, gpu, wider, cluster, overlap, 1e9), w, cluster) >= goal

    return _smallest_factor(reaches, lo=1.0)


def term_label(term: str) -> str:
    """A term as a reader sees it: reduce-scatter, not reduce_scatter."""
    return term.replace("_", "-")


def _held_by(p: Prediction) -> str:
    """The terms of a step priced with one input unbounded (its term then costs next to
    nothing, unless a memory bounds it): what holds the step then."""
    left = [f"{term_label(k)} {v:.3g} s" for k, v in p.terms.items() if v >= 0.001]
    return ", ".join(left)


def _linked(cluster: Cluster, gpu: GpuInputs, host: HostProfile) -> Cluster:
    """The cluster with the links its GPUs exchange gradients and parameters over; a
    link the job crosses that no input gives is an error naming it."""
    if cluster.gpus_per_node > 1 and gpu.peer is None:
        raise AdviceError(f"no GPU-to-GPU link figure for {gpu.label} (needed with {cluster.gpus_per_node} GPUs a "
                          "node): name a datasheet GPU with --gpu, whose NVLink gpus.toml gives")
    if cluster.nodes > 1 and host.network is None:
        raise AdviceError(f"host {host.name!r} gives no network_GBps (its NICs' bandwidth per direction), needed "
                          f"with --nodes {cluster.nodes}: add it to the profile (see cxlbench/analysis/hosts.toml)")
    return replace(cluster, gpu_link_Bps=gpu.peer.value * 1e9 if gpu.peer else None,
                   node_link_Bps=host.network.value * 1e9 if host.network else None)


def whatif(gpu: GpuInputs, host: HostProfile, model: str, cluster: Cluster, batch: int | None = None,
           seq: int | None = None, target: float = 0.90, recompute: bool = False,
           micro_steps: int = 1, zero: int | None = None) -> WhatIf:
    """Every tier the host has, priced for one GPU of the cluster, as shares of all-HBM.
    micro_steps: batches each GPU runs per optimizer step (gradient accumulation): the
    update, its copies back and ZeRO-2's gather are paid once for all of them, the
    gradients' way down and their reduce-scatter once per batch. zero: the ZeRO stage
    (2 or 3) every row is priced at, all-HBM too; None: 2 where it fits a GPU with the
    state offloaded, else 3."""
    if gpu.adamw is None:
        raise AdviceError("no GPU AdamW rate for the all-HBM reference: name a datasheet GPU with --gpu")
    if not 0 < target < 1:
        raise AdviceError(f"--target {target * 100:g}% must lie above 0 and below 100%")
    if micro_steps < 1:
        raise AdviceError(f"--accumulate {micro_steps}: the batches per optimizer step must be at least 1")
    cluster = _linked(cluster, gpu, host)
    train = train_config(model, batch=batch, seq_len=seq)
    cfg = model_config(model)
    activations = activation_bytes(train.batch * train.seq_len, cfg.dim, cfg.n_layers, recompute)
    n = cfg.num_params()
    capacity = int(gpu.hbm.value * GIB)
    # the largest module gathered at once: a block, or the embedding (or output) matrix
    unit = max((n - 2 * cfg.vocab_size * cfg.dim) / cfg.n_layers, cfg.vocab_size * cfg.dim)

    zero, why = _stage(zero, cluster.gpus, hbm_need(2, True, n, cluster.gpus, unit, activations), capacity)
    held = {offload: hbm_parts(zero, offload, n, cluster.gpus, unit, activations) for offload in (True, False)}
    need = {offload: int(sum(parts.values())) for offload, parts in held.items()}
    w_hbm = _workload(model, train.batch, train.seq_len, cluster, offload=False, nvme=False, recompute=recompute,
                      micro_steps=micro_steps, zero=zero)
    hbm = _price_hbm(w_hbm, gpu, cluster)
    hbm_tokens = _tokens(hbm, w_hbm, cluster)
    rows = [TierRow("hbm", "hbm", hbm, hbm, hbm_tokens, hbm_tokens, need[False], 1.0, 1.0)]
    for kind in HOST_TIERS:
        for tier in sorted((t for t in host.tiers.values() if t.kind == kind), key=lambda t: t.name):
            w = _workload(model, train.batch, train.seq_len, cluster, offload=True, nvme=kind == "nvme",
                          recompute=recompute, micro_steps=micro_steps, zero=zero)
            plain, dpu = (price(w, gpu, tier, cluster, o) for o in ("overlapped", "dpu"))
            row = TierRow(tier.name, kind, plain, dpu, _tokens(plain, w, cluster), _tokens(dpu, w, cluster),
                          need[True])
            row.share, row.dpu_share = row.tokens_per_s / hbm_tokens, row.dpu_tokens_per_s / hbm_tokens
            row.needs = _needs(w, gpu, tier, cluster, hbm_tokens, target) + \
                _accumulation_needs(w, w_hbm, gpu, tier, cluster, target) if need[True] <= capacity else \
                [_unfit(held[True], capacity, recompute, zero, cluster.gpus)]
            row.curve = _accumulation_curve(w, w_hbm, gpu, tier, cluster, row.needs)
            rows.append(row)
    if len(rows) == 1:
        raise AdviceError(f"host {host.name!r} has no DDR, CXL or NVMe tier to place the optimizer state on")
    return WhatIf(model, n, gpu, host, cluster, train.batch, train.seq_len, target, rows, capacity,
                  recompute, micro_steps, zero, why, held[True], held[False])


__all__ = ["load_host", "host_from_runs", "whatif", "price", "HostProfile", "Need", "TierRow", "WhatIf", "PER_CORE_ADAMW",
           "HOSTS_FILE", "PAPER", "COMBINE_DPU", "COMBINE_ZERO3", "LEFT_OUT", "REDUCE_BUCKET_BYTES", "hbm_need",
           "hbm_parts", "held_text", "TERMS", "term_label"]
