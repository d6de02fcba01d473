"""Where should the training state live? The step-time model, fed with measured rates.

    advise(paths, model, gpu=None, mfu=0.40, within=0.10, tiers=None, batch=None, seq=None) -> Advice
    gather(runs, gpu=None, mfu=0.40) -> Inputs            the rates, each with where it came from
    advise_inputs(inputs, model, ...) -> Advice           the placements they price
    load_gpus() -> {name: GpuSpec}                        gpus.toml, datasheet figures

For one model config (training/configs.py) on one GPU, the optimizer state — fp32
master params and Adam moments together, as ZeRO-Offload keeps them — is placed on
HBM or on a host tier (DDR, CXL, NVMe), and each placement is priced by
training.stepmodel.predict: "overlapped" for the offload engine (gradients stream
to the host during backward, the CPU steps while parameters stream back, NVMe I/O
double-buffered), "none" for the state on the GPU. Every figure the model needs is
an input with its provenance: measured (the run, case, machine and CPU that
measured it), datasheet (the gpus.toml entry and its source), paper (a figure others
measured on their machine and published: the practical copy rates) or assumed (the
MFU, with the reason; a rate modelled from a datasheet's bandwidth). A needed input that is missing is an AdviceError naming it and
the run that would measure it: nothing is estimated in its place.

The result is modelled, not measured: a placement's tokens/s is what the model
predicts from the rates, on a GPU the results may never have seen.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from cxlbench.results.store import Run, find_runs, load_run, machine_of, measured_whole
from cxlbench.training.configs import MODELS, model_config, train_config
from cxlbench.training.footprint import hbm_need
from cxlbench.training.stepmodel import (ACTIVATION_BYTES, ADAMW_BYTES, Rates, Workload, predict,
                                         tokens_to_hide_optimizer)
from cxlbench.units import GIB, format_count, gib, tier_order

MEASURED, DATASHEET, PAPER, ASSUMED = "measured", "datasheet", "paper", "assumed"
#: what a figure can be: measured here, a vendor's datasheet, a published measurement
#: (a paper, a blog, a forum: someone else's machine), or assumed (a rule, or modelled)
PROVENANCES = (MEASURED, DATASHEET, PAPER, ASSUMED)
#: Tier kinds, the least costly per byte first: the rule that names a placement.
COST_ORDER = ("nvme", "cxl", "ddr", "hbm")
HOST_KINDS = ("ddr", "cxl", "nvme")
DEFAULT_MFU = 0.40
MFU_REASON = ("no GPU run gives this GPU's own MFU, and REFERENCES.md records no MFU "
              "figure to cite; 0.40 is a common figure for a well-tuned bf16 dense training run. "
              "Change it with --mfu")
GPUS_FILE = Path(__file__).with_name("gpus.toml")


class AdviceError(Exception):
    """A model, GPU or input the advisor cannot use: one line, naming what is missing
    and how to get it."""


# ---- inputs -------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    kind: str                  # measured / datasheet / assumed
    text: str                  # the run, case, machine and CPU; the entry and its document; the reason
    url: str = ""

    def __str__(self) -> str:
        return f"{self.text} ({self.url})" if self.url else self.text


@dataclass(frozen=True)
class Figure:
    """One input of the model: a rate or a capacity, and where it came from."""
    name: str                  # "CPU AdamW, optimizer state on ddr0"
    value: float
    unit: str                  # params/s, GB/s, TFLOP/s, GiB, (none: a fraction)
    source: Source
    detail: str = ""           # which impl, threads, shapes

    @property
    def shown(self) -> str:
        if self.unit == "params/s":
            return f"{format_count(self.value, ' ')} params/s"
        if self.unit == "":
            return f"{self.value:.2f}"
        return f"{_num(self.value)} {self.unit}"


@dataclass(frozen=True)
class GpuSpec:
    """A datasheet entry of gpus.toml."""
    name: str
    title: str
    bf16_dense_tflops: float
    hbm_gib: float
    hbm_TBps: float
    pcie_gen: int
    host_GBps: float
    host_source: str
    nvlink_GBps: float
    nvlink_source: str
    source: str
    url: str = ""
    host_url: str = ""
    hbm_source: str = ""


def load_gpus(path: str | Path = GPUS_FILE) -> dict[str, GpuSpec]:
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    return {name: GpuSpec(name=name, **entry) for name, entry in data.items()}


@dataclass
class HostTier:
    """What the runs hold for one host tier (ddr0, cxl2, nvme0)."""
    name: str
    kind: str
    adamw: Figure | None = None           # CPU AdamW params/s (NVMe: on the update's host buffers)
    nvme_read: Figure | None = None
    nvme_write: Figure | None = None
    end_to_end: Figure | None = None      # NVMe: the file-backed step as measured, for comparison
    bandwidth: Figure | None = None       # what the tier gives all of a node's copies at once (a profile's)
    capacity_bytes: int | None = None     # on the machine that measured it
    machine: str = ""

    def missing(self) -> list[str]:
        need = [("CPU AdamW rate", self.adamw)]
        if self.kind == "nvme":
            need += [("NVMe read bandwidth", self.nvme_read), ("NVMe write bandwidth", self.nvme_write)]
        return [what for what, f in need if f is None]


@dataclass
class GpuInputs:
    label: str                   # "h200 (datasheet)" / "NVIDIA H200 on gpu-host (measured)"
    flops: Figure                # F_eff, the rate the model prices compute at
    hbm: Figure                  # capacity, GiB
    d2h: Figure
    h2d: Figure
    adamw: Figure | None         # the optimizer step with the state in HBM
    extra: list[Figure] = field(default_factory=list)   # peak, MFU, HBM bandwidth: what F_eff/adamw came from
    config: str | None = None    # measured: the config whose shapes F_eff was probed at
    datasheet: bool = False
    peer: Figure | None = None   # the link to the other GPUs (NVLink), per direction
    device: str = ""             # measured: the device's name as the driver reports it

    def figures(self) -> list[Figure]:
        """Every GPU input, in a reader's order: what compute costs, what fits, the copies."""
        before = [f for f in self.extra if f.unit != "GB/s"]       # peak, MFU: what F_eff came from
        after = [f for f in self.extra if f.unit == "GB/s"]        # HBM bandwidth: what AdamW came from
        return [*before, self.flops, self.hbm, *after, *([self.adamw] if self.adamw else []),
                self.d2h, self.h2d, *([self.peer] if self.peer else [])]


@dataclass
class Inputs:
    gpu: GpuInputs | None
    tiers: dict[str, HostTier]
    runs: list[Run]
    skipped: dict[str, str]      # tier kind -> why the runs skipped its AdamW case
    gpu_why: str = ""            # why there is no GPU side

    def figures(self) -> list[Figure]:
        out = []
        if self.gpu:
            out += self.gpu.figures()
        for t in sorted(self.tiers.values(), key=lambda t: tier_order(t.name)):
            out += [f for f in (t.adamw, t.nvme_read, t.nvme_write, t.end_to_end) if f is not None]
        return out


def _num(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _started(run: Run) -> str:
    return str(run.meta.get("started") or "")


def _measured(run: Run, case_id: str) -> Source:
    """Where a host figure was measured; a tier the user declared says so, with what
    discovery had found there (a DDR node declared `cxl` is a proxy, not CXL)."""
    cpu = ((run.meta.get("machine") or {}).get("cpu") or {}).get("model") or "CPU unknown"
    text = f"run {run.run_id} on {machine_of(run.meta)} ({cpu}), case {case_id}"
    target = case_id.split("/")[2] if case_id.count("/") >= 2 else ""
    tier = next((t for t in run.meta.get("tiers") or [] if t.get("name") == target), {})
    if tier.get("declared"):          # its evidence names the declaration and what discovery found
        text += f"; {tier.get('evidence') or 'declared ' + tier['declared']}"
    return Source(MEASURED, text)


def _gpu_name(run: Run, index: int | None) -> str:
    gpus = (run.meta.get("machine") or {}).get("gpus") or []
    gpu = next((g for g in gpus if g.get("index") == index), gpus[0] if gpus else None)
    return str(gpu.get("name")) if gpu else "GPU"


def _gpu_measured(run: Run, case_id: str, index: int | None) -> Source:
    return Source(MEASURED, f"run {run.run_id} on {machine_of(run.meta)} ({_gpu_name(run, index)}), "
                            f"case {case_id}")


def _cases(run: Run) -> list[dict[str, Any]]:
    return [c for c in run.meta.get("cases") or [] if c.get("benchmark") == "training"]


def _gpu_trained(run: Run) -> list[dict[str, Any]]:
    """The run's training cases that trained on a GPU and measured."""
    return [c for c in _cases(run) if c.get("status") == "ok"
            and (c.get("params") or {}).get("mode") == "train" and (c.get("params") or {}).get("compute") == "gpu"]


def _rows(run: Run, case_id: str) -> pd.DataFrame:
    """The case's samples; none of a case that failed part-way (no figure to price with)."""
    s = measured_whole(run.samples, run.meta)
    return s[s["case_id"] == case_id] if not s.empty else s


def _col(rows: pd.DataFrame, name: str, value: Any) -> pd.DataFrame:
    if name not in rows.columns:
        return rows.iloc[0:0] if value is not None else rows
    return rows[rows[name].isna()] if value is None else rows[rows[name] == value]


def _median(rows: pd.DataFrame) -> float | None:
    return float(rows["value"].median()) if len(rows) else None


def _host_tiers(runs: Sequence[Run]) -> tuple[dict[str, HostTier], dict[str, str]]:
    """Every host tier's inputs; a figure comes from the newest run that has it."""
    tiers: dict[str, HostTier] = {}
    skipped: dict[str, str] = {}
    for run in sorted(runs, key=_started, reverse=True):
        capacity = capacity_of(run)
        for c in _cases(run):
            params = c.get("params") or {}
            if params.get("mode") != "optimizer" or c.get("tier_kind") not in HOST_KINDS:
                continue
            # every CPU of the initiator, and 4 KiB pages, as the training engines' state has
            if "threads" in params or "page" in params:
                continue
            if c.get("status") != "ok":
                skipped.setdefault(c["tier_kind"], c.get("reason") or c.get("status"))
                continue
            t = tiers.setdefault(c["target"], HostTier(c["target"], c["tier_kind"]))
            t.capacity_bytes = t.capacity_bytes or capacity.get(c["target"])
            t.machine = t.machine or machine_of(run.meta)
            rows = _rows(run, c["case_id"])
            source = _measured(run, c["case_id"])
            if t.kind == "nvme":
                _nvme_figures(t, rows, source, c)
            elif t.adamw is None:
                t.adamw = _best_adamw(rows, source, f"CPU AdamW, optimizer state on {t.name}")
    for run in sorted(runs, key=_started, reverse=True):
        capacity = capacity_of(run)
        for c in _gpu_trained(run):                            # else a GPU offload run's own probe
            _probed_adamw(tiers, run, c, capacity)
    for run in sorted(runs, key=_started, reverse=True):      # NVMe bandwidth from the storage family
        for c in run.meta.get("cases") or []:
            if c.get("benchmark") == "storage" and c.get("tier_kind") == "nvme" and c.get("status") == "ok":
                t = tiers.setdefault(c["target"], HostTier(c["target"], "nvme", machine=machine_of(run.meta)))
                _storage_figures(t, run)
    ddr = [t for t in tiers.values() if t.kind == "ddr" and t.adamw is not None]
    for t in tiers.values():          # an NVMe tier measured by the storage family alone
        if t.kind == "nvme" and t.adamw is None and ddr:
            src = ddr[0].adamw
            t.adamw = Figure(f"CPU AdamW on the NVMe path's host buffers ({ddr[0].name})", src.value,
                             src.unit, src.source, f"{ddr[0].name}'s rate: the update runs on DDR buffers; "
                                                   + src.detail)
    return tiers, skipped


def capacity_of(run: Run) -> dict[str, int | None]:
    return {t.get("name"): t.get("capacity_bytes") for t in run.meta.get("tiers") or []}


def _probed_adamw(tiers: dict[str, HostTier], run: Run, case: dict, capacity: dict) -> None:
    """A tier no optimizer-mode case measured takes the AdamW rate a GPU offload case
    probed on its own state there (every CPU of the host, the engine's chunks): the
    first H200 run held only this."""
    params, target = case.get("params") or {}, case.get("target")
    # the advisor prices all the state on the tier, on every CPU: a case that split it
    # across tiers, or stepped on the delayed update's own thread team, measured else
    if params.get("engine") != "offload" or case.get("tier_kind") not in ("ddr", "cxl") or params.get("dpu") \
            or params.get("params_on") != target or params.get("grads_on") != target:
        return
    if target in tiers and tiers[target].adamw is not None:
        return
    rows = _col(_rows(run, case["case_id"]), "probe", "adamw")
    rows = rows[rows["metric"] == "params_per_s"]
    if rows.empty:
        return
    t = tiers.setdefault(target, HostTier(target, case["tier_kind"]))
    t.capacity_bytes = t.capacity_bytes or capacity.get(target)
    t.machine = t.machine or machine_of(run.meta)
    impl = str(rows["impl"].iloc[0]) if "impl" in rows.columns else "the engine's"
    t.adamw = Figure(f"CPU AdamW, optimizer state on {t.name}", float(rows["value"].median()), "params/s",
                     _measured(run, case["case_id"]),
                     f"{impl}, the offload engine's own probe on its state (every CPU of the host)")


def _best_adamw(rows: pd.DataFrame, source: Source, name: str) -> Figure | None:
    rows = _col(rows[rows["metric"] == "params_per_s"], "io", None)
    if rows.empty or "impl" not in rows.columns:
        return None
    medians = rows.groupby("impl")["value"].median().sort_values(ascending=False)
    impl = str(medians.index[0])
    threads = rows["threads"].dropna() if "threads" in rows.columns else pd.Series(dtype=float)
    th = f", {int(threads.iloc[0])} threads (all of the initiator's)" if len(threads) else ", every CPU of the initiator"
    others = ", ".join(str(i) for i in medians.index[1:])
    return Figure(name, float(medians.iloc[0]), "params/s", source,
                  f"{impl}, the best of the implementations measured{f' (also {others})' if others else ''}{th}")


def _nvme_figures(t: HostTier, rows: pd.DataFrame, source: Source, case: dict) -> None:
    if t.adamw is None:
        memory = _col(rows[rows["metric"] == "params_per_s"], "io", "memory")
        if len(memory):
            impl = str(memory["impl"].iloc[0]) if "impl" in memory.columns else "?"
            node = ((case.get("info") or {}).get("buffers") or {}).get("asked_node")
            where = f"node {node}" if node is not None else "the initiator's node"
            t.adamw = Figure(f"CPU AdamW on the NVMe path's host buffers ({where})", _median(memory), "params/s",
                             source, f"{impl}, the same step in memory beside the file-backed one")
    for probe, attr, what in (("nvme_read", "nvme_read", "read"), ("nvme_write", "nvme_write", "write")):
        value = _median(_col(rows[rows["metric"] == "bandwidth_GBps"], "probe", probe))
        if getattr(t, attr) is None and value:
            setattr(t, attr, Figure(f"NVMe {what} bandwidth, optimizer file on {t.name}", value, "GB/s", source,
                                    "the optimizer's own file I/O (chunks through pinned buffers)"))
    e2e = _col(rows[rows["metric"] == "params_per_s"], "io", "nvme")
    if t.end_to_end is None and len(e2e):
        t.end_to_end = Figure(f"CPU AdamW with the state in files on {t.name}, end to end", _median(e2e),
                              "params/s", source, "reads, update and writes as measured; shown for "
                                                  "comparison, the model prices them as separate terms")


def _storage_figures(t: HostTier, run: Run) -> None:
    s = measured_whole(run.samples, run.meta)
    if s.empty or "rw" not in s.columns:
        return
    rows = s[(s["benchmark"] == "storage") & (s["target"] == t.name) & (s["metric"] == "bandwidth_GBps")]
    for rw, attr in (("read", "nvme_read"), ("write", "nvme_write")):
        if getattr(t, attr) is not None:
            continue
        per_case = rows[rows["rw"] == rw].groupby("case_id")["value"].median()
        if per_case.empty:
            continue
        case_id = str(per_case.idxmax())
        setattr(t, attr, Figure(f"NVMe sequential {rw} bandwidth on {t.name}", float(per_case.max()), "GB/s",
                                _measured(run, case_id), "storage family: the best block size and queue "
                                                         "depth measured (an upper bound for the optimizer's I/O)"))


def _gpu_from_runs(runs: Sequence[Run], model: str | None) -> GpuInputs | None:
    """The GPU side from a GPU training run: the matmul rate at the model's shapes
    (or the largest config run), copy rates and device AdamW from its probes."""
    found: list[tuple[Run, dict]] = []
    for run in sorted(runs, key=_started, reverse=True):
        found += [(run, c) for c in _gpu_trained(run)]
    if not found:
        return None

    def size(rc):
        return model_config(rc[1]["params"]["config"]).num_params() if rc[1]["params"]["config"] in MODELS else 0

    def probe(rc, metric, name):
        return _median(_col(_rows(rc[0], rc[1]["case_id"])[lambda r: r["metric"] == metric], "probe", name))

    def gpu_index(rc):
        return int(rc[1]["initiator"].split(":")[1]) if rc[1]["initiator"].split(":")[-1].isdigit() else None

    ranked = sorted(found, key=lambda rc: (rc[1]["params"]["config"] == model, size(rc)), reverse=True)
    shape = next((rc for rc in ranked if probe(rc, "tflops", "matmul_model_shape")), None)
    if shape is None:
        return None
    run, case = shape
    config = case["params"]["config"]
    detail = f"at {config}'s shapes (batch {case['params'].get('batch')} × seq {case['params'].get('seq')})"
    if model and config != model:
        detail += f", not {model}'s: a GPU run of {model} would probe its own"
    flops = _replayed_rate(ranked, config, detail, gpu_index) or Figure(
        "GPU matmul rate at the model's shapes (F_eff)", probe(shape, "tflops", "matmul_model_shape"), "TFLOP/s",
        _gpu_measured(run, case["case_id"], gpu_index(shape)),
        detail + "; the step model prices compute at it (no case of this config replayed its step's "
                 "kernels: a bound, the first H200 run's 1b stepped at 0.55 of it)")
    gpus = (run.meta.get("machine") or {}).get("gpus") or []
    g = next((x for x in gpus if x.get("index") == gpu_index(shape)), gpus[0] if gpus else {})
    if not g.get("memory_bytes"):
        return None
    hbm = Figure("GPU memory (HBM)", g["memory_bytes"] / GIB, "GiB",
                 Source(MEASURED, f"run {run.run_id} on {machine_of(run.meta)}: {g.get('name')} as the driver "
                                  f"reports it"))
    copies = {}
    for name in ("d2h", "h2d"):
        rc = next((rc for rc in ranked if rc[1]["params"]["engine"] == "offload" and probe(rc, "bandwidth_GBps", name)),
                  None)
        if rc is None:
            return None
        copies[name] = Figure(f"{'device → host' if name == 'd2h' else 'host → device'} copy ({name})",
                              probe(rc, "bandwidth_GBps", name), "GB/s",
                              _gpu_measured(rc[0], rc[1]["case_id"], gpu_index(rc)),
                              "the offload engine's own pinned buffers")
    rc = next((rc for rc in ranked if rc[1]["params"]["engine"] == "none" and probe(rc, "params_per_s", "adamw")),
              None)
    adamw = None if rc is None else Figure(
        "GPU AdamW, optimizer state in HBM", probe(rc, "params_per_s", "adamw"), "params/s",
        _gpu_measured(rc[0], rc[1]["case_id"], gpu_index(rc)), "torch's fused AdamW on the device")
    return GpuInputs(f"{_gpu_name(run, gpu_index(shape))} on {machine_of(run.meta)}, measured", flops, hbm,
                     copies["d2h"], copies["h2d"], adamw, [], config, device=str(g.get("name") or ""))


def _replayed_rate(ranked: list[tuple[Run, dict]], config: str, detail: str, gpu_index) -> Figure | None:
    """F_eff as the step's own kernels achieved it: the model FLOPs of one step over the
    compute probe's seconds (the kernels replayed, plus the framework's overhead), from a
    case of `config`, all on HBM first. The step model's compute term on that run; a GEMM
    at the model's shapes alone runs faster than the step does."""
    for run, case in sorted((rc for rc in ranked if rc[1]["params"]["config"] == config),
                            key=lambda rc: rc[1]["params"]["engine"] != "none"):
        rows = _rows(run, case["case_id"])
        rows = rows[rows["metric"] == "seconds"] if not rows.empty else rows
        kernels = _median(_col(rows, "probe", "compute_kernels"))
        framework = _median(_col(rows, "probe", "compute_framework")) or 0.0
        info = case.get("info") or {}
        if not kernels or kernels + framework <= 0 or not info.get("flops_per_token") \
                or not info.get("tokens_per_step"):
            continue
        rate = info["flops_per_token"] * info["tokens_per_step"] / (kernels + framework) / 1e12
        return Figure("GPU compute rate of the step's own kernels (F_eff)", rate, "TFLOP/s",
                      _gpu_measured(run, case["case_id"], gpu_index((run, case))),
                      f"{detail}; model FLOPs over the compute probe's {(kernels + framework) * 1e3:.3g} ms "
                      f"(the step's kernels replayed + the framework's overhead)")
    return None


def _gpu_from_datasheet(spec: GpuSpec, mfu: float, runs: Sequence[Run]) -> GpuInputs:
    sheet = Source(DATASHEET, f"gpus.toml [{spec.name}]: {spec.source}", spec.url)
    peak = Figure(f"{spec.title}: bf16 dense peak", spec.bf16_dense_tflops, "TFLOP/s", sheet,
                  "the datasheet's sparse figure halved")
    mfu_fig = Figure("MFU (model FLOPs utilisation)", mfu, "",
                     Source(ASSUMED, MFU_REASON if mfu == DEFAULT_MFU else
                            "as given with --mfu; a datasheet has no measured MFU"))
    flops = Figure("GPU compute rate (F_eff = peak × MFU)", spec.bf16_dense_tflops * mfu, "TFLOP/s",
                   Source(ASSUMED, f"{spec.name}'s datasheet peak × the assumed MFU"))
    hbm = Figure("GPU memory (HBM)", spec.hbm_gib, "GiB",
                 Source(DATASHEET, f"gpus.toml [{spec.name}]: {spec.hbm_source}", spec.url) if spec.hbm_source
                 else sheet, "as the device reports it")
    hbm_bw = Figure("HBM bandwidth", spec.hbm_TBps * 1000, "GB/s", sheet)
    adamw = Figure("GPU AdamW, optimizer state in HBM", spec.hbm_TBps * 1e12 / ADAMW_BYTES, "params/s",
                   Source(ASSUMED, f"modelled: gpus.toml [{spec.name}]'s HBM bandwidth ÷ {ADAMW_BYTES} B per "
                                   "parameter (AdamW's traffic), bandwidth-bound at the datasheet's peak: the "
                                   "fastest it can be", spec.url))
    measured = _gpu_from_runs(runs, None)
    if measured is not None and same_gpu(spec, measured.device):
        d2h, h2d = measured.d2h, measured.h2d      # a run's own copies beat a practical figure
    else:
        host = Source(PAPER, f"gpus.toml [{spec.name}]: PCIe Gen{spec.pcie_gen} x16, {spec.host_source}",
                      spec.host_url)       # another's measurement of the copies, not the vendor's
        why = "a practical rate, not the link's" + (
            "" if measured is None else f"; the GPU run among the results measured {measured.device or 'another GPU'}, "
                                        f"not {spec.name}, so its copies are not this GPU's")
        d2h = Figure("device → host copy (d2h)", spec.host_GBps, "GB/s", host, why)
        h2d = Figure("host → device copy (h2d)", spec.host_GBps, "GB/s", host, why)
    peer = Figure("GPU ↔ GPU link (NVLink)", spec.nvlink_GBps, "GB/s",
                  Source(DATASHEET, f"gpus.toml [{spec.name}]: {spec.nvlink_source}", spec.url),
                  "per direction; the link's rate, not a collective's")
    return GpuInputs(f"{spec.name} ({spec.title}, datasheet)", flops, hbm, d2h, h2d, adamw,
                     [peak, mfu_fig, hbm_bw], datasheet=True, peer=peer)


def same_gpu(spec: GpuSpec, device: str) -> bool:
    """Whether a device the driver names ("NVIDIA H200", "NVIDIA A100-SXM4-80GB") is of
    a datasheet entry's part (h200, a100-80gb): the entry's name up to its first '-'
    as a word of the device's. A copy rate measured on one part says nothing of
    another's link (an A100's Gen4 against an H200's Gen5)."""
    part = spec.name.split("-")[0].lower()
    return bool(re.search(rf"(?<![a-z0-9]){re.escape(part)}(?![0-9])", device.lower()))


def _check_model(model: str) -> None:
    if model not in MODELS:
        raise AdviceError(f"unknown model {model!r}: one of {', '.join(MODELS)} (training/configs.py)")


def _gpu_entry(name: str) -> GpuSpec:
    gpus = load_gpus()
    if name not in gpus:
        raise AdviceError(f"unknown GPU {name!r}: the datasheet entries are {', '.join(sorted(gpus))} "
                          f"(cxlbench/analysis/gpus.toml); leave --gpu out to use a GPU training run")
    return gpus[name]


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Every run at or below the paths (run directories or results folders)."""
    return [load_run(r) for p in paths for r in find_runs(p)]


def gather(runs: Sequence[Run], gpu: str | None = None, mfu: float = DEFAULT_MFU,
           model: str | None = None) -> Inputs:
    """The inputs the runs hold. gpu: a gpus.toml entry (None: a GPU training run among
    the runs); model: the config whose shapes a measured matmul rate should be at."""
    if not 0 < mfu <= 1:
        raise AdviceError(f"--mfu {mfu:g} is not a fraction in (0, 1]: e.g. 0.4 for 40%")
    tiers, skipped = _host_tiers(runs)
    why = ""
    if gpu is not None:
        gpu_inputs = _gpu_from_datasheet(_gpu_entry(gpu), mfu, runs)
    else:
        gpu_inputs = _gpu_from_runs(runs, model)
        if gpu_inputs is None:
            why = ("no GPU training run with its rate probes (matmul, d2h, h2d) in the given results: name a "
                   f"datasheet entry with --gpu ({', '.join(sorted(load_gpus()))}), or add a run of "
                   "`cxlbench run --suite training` made on a GPU machine")
    return Inputs(gpu_inputs, tiers, list(runs), skipped, why)


# ---- placements ---------------------------------------------------------------------

@dataclass
class Placement:
    state: str                  # "optimizer state"
    tier: str                   # hbm, ddr0, cxl2, nvme0
    kind: str
    terms: dict[str, float]     # seconds per step: compute, d2h, h2d, optimizer, nvme
    step_s: float
    tokens_per_s: float
    device_bytes: int           # what the GPU must hold
    state_bytes: int            # the fp32 master params and moments, on `tier`
    capacity_bytes: int         # the GPU's memory
    relative: float | None = None    # tokens/s relative to the best placement that fits
    balance_tokens: float | None = None  # tokens per step at which the host update lasts as long as compute

    @property
    def fits(self) -> bool:
        return self.device_bytes <= self.capacity_bytes

    @property
    def verdict(self) -> str:
        """'fits' or 'does not fit in 80 GiB HBM: needs 128 GiB'."""
        if self.fits:
            return "fits"
        return (f"does not fit in {gib(self.capacity_bytes)} HBM: needs "
                f"{gib(self.device_bytes)}")

    @property
    def label(self) -> str:
        return f"{self.state} on {self.tier}"


@dataclass
class Advice:
    model: str
    n_params: int
    batch: int
    seq: int
    gpu: str
    within: float
    inputs: Inputs
    placements: list[Placement]       # best first; those that do not fit last
    best: Placement | None
    choice: Placement | None
    left_out: list[str]               # tier kinds the caller left out with --tiers
    notes: list[str]

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq

    @property
    def headline(self) -> str:
        return (f"{self.model} ({format_count(self.n_params)} params) on one {self.gpu}; batch {self.batch} × "
                f"seq {self.seq} = {self.tokens_per_step:,} tokens per step")

    @property
    def gpu_name(self) -> str:
        """The GPU without how it is known: "h200", not "h200 (NVIDIA H200, datasheet)"."""
        return self.gpu.split(" (")[0]

    @property
    def rule(self) -> str:
        return (f"the cheapest placement within {self.within * 100:g}% of the best tokens/s: among the placements "
                f"that fit and reach at least {(1 - self.within) * 100:g}% of the best, the one with the state on "
                f"the least costly tier per byte ({' < '.join(COST_ORDER)})")

    @property
    def conclusion(self) -> str:
        if self.best is None:
            smallest = min(self.placements, key=lambda p: p.device_bytes)
            return (f"no placement fits one {self.gpu}: even with the optimizer state off the GPU, {self.model} at "
                    f"{self.tokens_per_step:,} tokens per step needs {gib(smallest.device_bytes)} on the "
                    f"GPU, which has {gib(smallest.capacity_bytes)}")
        c = self.choice
        if c is self.best:
            cheaper = [p for p in self.placements if p.fits and COST_ORDER.index(p.kind) < COST_ORDER.index(c.kind)]
            why = (f"no cheaper tier reaches {(1 - self.within) * 100:g}% of it" if cheaper else
                   "no cheaper tier was modelled")
            return f"{c.label}: {c.tokens_per_s:,.0f} tokens/s, the best placement; {why}"
        return (f"{c.label}: {c.tokens_per_s:,.0f} tokens/s, {c.relative * 100:.3g}% of the best "
                f"({self.best.label}, {self.best.tokens_per_s:,.0f} tokens/s)")


#: A placement's terms, in the order the table and the page list them
TERMS = ("compute", "d2h", "h2d", "optimizer", "nvme")

#: How the terms of a row add up to its step (training/stepmodel.py), for the reader
COMBINE = ("step = compute + max(0, d2h − ⅔·compute) + max(optimizer, nvme, h2d) + h2d/chunks for the state on a "
           "host tier (the offload engine, \"overlapped\"); compute + optimizer for the state in HBM (\"none\")")


def advise_inputs(inputs: Inputs, model: str, tiers: Sequence[str] | None = None, within: float = 0.10,
                  batch: int | None = None, seq: int | None = None) -> Advice:
    """Price each placement the inputs allow (tiers: kinds or tier names; default every
    kind), rank them, and name the cheapest within `within` of the best."""
    _check_model(model)
    if not 0 <= within < 1:
        raise AdviceError(f"--within {within * 100:g}% must lie between 0 and 100%")
    if inputs.gpu is None:
        raise AdviceError(inputs.gpu_why)
    cfg, train = model_config(model), train_config(model, batch=batch, seq_len=seq)
    if train.batch < 1 or train.seq_len < 1:
        raise AdviceError(f"batch {train.batch} × seq {train.seq_len}: both must be at least 1")
    wanted = list(tiers) if tiers else ["hbm", *HOST_KINDS]
    chosen = _choose(inputs, wanted)
    n = cfg.num_params()
    tokens = train.batch * train.seq_len
    g = inputs.gpu
    flops = g.flops.value * 1e12
    capacity = int(g.hbm.value * GIB)
    activations = ACTIVATION_BYTES * tokens * cfg.dim * cfg.n_layers
    placements = []
    for tier in chosen:
        if tier == "hbm":
            w = _workload(cfg, train, offload=False)
            pred = predict(w, Rates(flops_per_s=flops, opt_params_per_s=g.adamw.value), "none")
            device = hbm_need(2, False, n, 1, 0, activations)    # bf16 params, grads; fp32 master, m, v
            placements.append(Placement("optimizer state", "hbm", "hbm", pred.terms, pred.step_s,
                                        tokens / pred.step_s, device, 12 * n, capacity))
            continue
        t = inputs.tiers[tier]
        w = _workload(cfg, train, offload=True, nvme=t.kind == "nvme")
        rates = Rates(flops_per_s=flops, d2h_Bps=g.d2h.value * 1e9, h2d_Bps=g.h2d.value * 1e9,
                      opt_params_per_s=t.adamw.value,
                      nvme_read_Bps=t.nvme_read.value * 1e9 if t.nvme_read else None,
                      nvme_write_Bps=t.nvme_write.value * 1e9 if t.nvme_write else None)
        pred = predict(w, rates, "overlapped")
        host_s = max(pred.terms.get("optimizer", 0.0), pred.terms.get("nvme", 0.0))
        p = Placement("optimizer state", t.name, t.kind, pred.terms, pred.step_s, tokens / pred.step_s,
                      hbm_need(2, True, n, 1, 0, activations), 12 * n, capacity)
        p.balance_tokens = tokens_to_hide_optimizer(flops, n / host_s) if host_s > 0 else None
        placements.append(p)
    fitting = sorted((p for p in placements if p.fits), key=lambda p: p.step_s)
    best = fitting[0] if fitting else None
    for p in fitting:
        p.relative = best.step_s / p.step_s
    good = [p for p in fitting if p.tokens_per_s >= best.tokens_per_s * (1 - within) - 1e-9]
    choice = min(good, key=lambda p: (COST_ORDER.index(p.kind), p.step_s)) if good else None
    ordered = fitting + sorted((p for p in placements if not p.fits), key=lambda p: p.step_s)
    named = {s if s in ("hbm", *HOST_KINDS) else inputs.tiers[s].kind for s in wanted}
    left_out = [k for k in ("hbm", *HOST_KINDS) if k not in named]
    return Advice(model, n, train.batch, train.seq_len, g.label, within, inputs, ordered, best, choice,
                  left_out, _notes(inputs, ordered, cfg, tokens, within))


def _workload(cfg, train, offload: bool, nvme: bool = False, shards: int = 1,
              recompute: bool = False) -> Workload:
    """One GPU's step of `cfg` at `train`'s batch shape, its optimizer partition N / shards
    stepped in the engine's chunks."""
    n = cfg.num_params()
    return Workload(n_params=n, n_params_nonembed=cfg.num_params(embeddings=False), n_layers=cfg.n_layers,
                    dim=cfg.dim, seq_len=train.seq_len, tokens_per_step=train.batch * train.seq_len,
                    grad_bytes=2, param_bytes=2, nvme_bytes=12 if nvme else 0, offload=offload,
                    chunks=max(1, -(-n // (shards * max(1, train.chunk_params)))), shards=shards,
                    recompute=recompute)


_HOW = {
    "ddr": "run `cxlbench run --suite training` (its optimizer mode measures CPU AdamW on every DDR tier) "
           "and pass its results",
    "cxl": "run `cxlbench run --suite training` on a machine with a CXL memory node (or one declared with "
           "--tier cxl=node:N) and pass its results",
    "nvme": "run `cxlbench run --suite training --tier nvme=/a/dir/on/nvme` and pass its results",
}


def _choose(inputs: Inputs, wanted: Sequence[str]) -> list[str]:
    """The placements the selectors name ('hbm', kinds, tier names), each with every
    input it needs, in the cost order; or the one line that says what is missing."""
    kinds_known = ("hbm", *HOST_KINDS)
    chosen: list[str] = []
    for sel in wanted:
        if sel == "hbm":
            if inputs.gpu.adamw is None:
                raise AdviceError("no GPU AdamW rate for the state in HBM: the GPU run has no case of engine "
                                  "none on the GPU (add one: engine = [\"none\"] in the training suite), or "
                                  "leave hbm out: " + _others(wanted, sel))
            chosen.append("hbm")
            continue
        if sel in HOST_KINDS:
            found = sorted((t for t in inputs.tiers.values() if t.kind == sel), key=lambda t: t.name)
        elif sel in inputs.tiers:
            found = [inputs.tiers[sel]]
        else:
            names = ", ".join(sorted(inputs.tiers)) or "none"
            raise AdviceError(f"--tiers {sel!r}: neither a tier kind ({', '.join(kinds_known)}) nor a tier "
                              f"of the given runs ({names})")
        complete = [t for t in found if not t.missing()]
        if not complete:
            kind = found[0].kind if found else sel
            if found:
                what = f"{' and '.join(found[0].missing())} for {found[0].name}"
            else:
                what = f"CPU AdamW rate with the optimizer state on a {kind.upper()} tier"
            seen = inputs.skipped.get(kind)
            seen = f" (the runs skipped it: {seen})" if seen and not found else ""
            raise AdviceError(f"no {what} in the given runs{seen}: {_HOW[kind]}; or leave {kind} out: "
                              + _others(wanted, sel))
        chosen += [t.name for t in complete if t.name not in chosen]
    return sorted(chosen, key=tier_order)            # hbm, ddr, cxl, nvme: a reader's order


def _others(wanted: Sequence[str], sel: str) -> str:
    rest = [w for w in wanted if w != sel]
    return f"--tiers {','.join(rest)}" if rest else "--tiers with the tiers the runs hold"


def _notes(inputs: Inputs, placements: list[Placement], cfg, tokens: int, within: float) -> list[str]:
    notes = []
    balance = [f"{p.tier} {format_count(p.balance_tokens)}" for p in placements if p.balance_tokens]
    if balance:
        notes.append("batch size: the host's update (optimizer, NVMe I/O) lasts as long as the compute at about "
                     f"{', '.join(balance)} tokens per step (T* = F_eff / (6 × params/s), REFERENCES.md; now "
                     f"{tokens:,}). The modelled offload engine runs the update after backward, so it adds to the "
                     "step" + (f": within {within * 100:g}% of the GPU takes about {(1 - within) / within:.0f}× T* "
                               "tokens, if the activations still fit" if within > 0 else ""))
    notes += ["gradients: no row of their own — the CPU AdamW rates were measured with the gradients' host "
             "buffer on the state's tier (on DDR for NVMe), and the model's other gradient term, the d2h copy, "
             "is priced at the GPU's copy rate whichever tier the pinned buffer is on",
             "activations: the step model has no term for activation checkpoints on the host; they stay on the "
             f"GPU, estimated at {ACTIVATION_BYTES} B × tokens × dim × layers "
             f"({ACTIVATION_BYTES * tokens * cfg.dim * cfg.n_layers / GIB:.1f} GiB here) in its memory",
             "fits: bf16 params and the gradients' reduce bucket on the GPU (offloaded, DeepSpeed keeps the "
             "gradient partitions on the host), plus bf16 grads, fp32 master params and Adam moments for the state "
             "in HBM, plus activations; no room is counted for the CUDA context, allocator fragmentation or "
             "temporary buffers"]
    measured_on = sorted({f"{t.machine}" for t in inputs.tiers.values() if t.machine})
    if inputs.gpu is not None and inputs.gpu.datasheet and measured_on:
        notes.append(f"the host figures are those of the machine that measured them ({', '.join(measured_on)}; "
                     "threads in each input): a GPU server's host CPUs and disks step at their own rate — run "
                     "the training suite there for its figures")
    for p in placements:
        t = inputs.tiers.get(p.tier)
        if t is not None and t.capacity_bytes and p.state_bytes > t.capacity_bytes:
            notes.append(f"{p.tier} on {t.machine} holds {t.capacity_bytes / GIB:.0f} GiB; the {cfg.name} "
                         f"optimizer state needs {p.state_bytes / GIB:.0f} GiB there: the rate per parameter is "
                         f"what was measured, a machine with that much {p.kind.upper()} is assumed")
    return notes


def advise(paths: Iterable[str | Path], model: str, gpu: str | None = None, mfu: float = DEFAULT_MFU,
           within: float = 0.10, tiers: Sequence[str] | None = None, batch: int | None = None,
           seq: int | None = None) -> Advice:
    """The advice from the runs at or below `paths` (run directories or results folders)."""
    _check_model(model)                  # before reading any run: a typo is one line at once
    if gpu is not None:
        _gpu_entry(gpu)
    runs = load_runs(paths)
    return advise_inputs(gather(runs, gpu, mfu, model), model, tiers, within, batch, seq)


def held_tiers(inputs: Inputs) -> list[str]:
    """The placements a run's own inputs allow (for the run report): hbm where the GPU
    side has a device AdamW rate, and every host tier with all it needs."""
    out = ["hbm"] if inputs.gpu is not None and inputs.gpu.adamw is not None else []
    return out + sorted(t.name for t in inputs.tiers.values() if not t.missing())


def gpu_config(runs: Sequence[Run]) -> str | None:
    """The largest config a run trained on its GPU (what its own advice models)."""
    configs = {(c.get("params") or {}).get("config") for run in runs for c in _gpu_trained(run)}
    known = [c for c in configs if c in MODELS]
    return max(known, key=lambda c: model_config(c).num_params()) if known else None


__all__ = ["advise", "advise_inputs", "gather", "load_gpus", "load_runs", "held_tiers", "gpu_config",
           "Advice", "AdviceError", "Figure", "GpuSpec", "Inputs", "Placement", "Source",
           "MEASURED", "DATASHEET", "ASSUMED", "COST_ORDER", "COMBINE", "DEFAULT_MFU", "TERMS"]
