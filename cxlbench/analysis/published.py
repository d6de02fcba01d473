"""Published offload measurements, as out-of-sample checks of the step-time model.

    load_cases(folder=PUBLISHED) -> ([Case], [Context])
    check(case) -> CaseResult          model ÷ paper per point, with the terms behind it
    check_all(folder=PUBLISHED) -> ([CaseResult], [Context])

The model has only met this project's own CPU steps. Others have measured GPU offload
steps and published them with their hardware: each file of analysis/published/ is one
such source — its configuration, its hardware figures, the result it reported and
where (table, figure), every input labelled `paper` or `assumed`. A check predicts a
figure the case's inputs do not contain (the with-DPU bar from the without-DPU one,
64 GPUs from one GPU, a step from bandwidths); nothing is fitted to the case checked.
The one exception, marked `composition` and counted apart, is the tutorial's step
composed from the phases its own log gives: it checks the composition, not a rate.
An input a paper lacks is assumed by one rule for every case, named in the input's
`where` ("the GPT-2 rule", "the direction rule", "the one V100 rule"). Sources that state too
little to predict anything without fitting are kept as context, with the reason.
"""
from __future__ import annotations

import copy
import itertools
import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from cxlbench.training.stepmodel import Cluster, Prediction, Rates, Workload, per_gpu, predict

PUBLISHED = Path(__file__).with_name("published")
PAPER, ASSUMED = "paper", "assumed"


class CaseError(Exception):
    """A published case file that cannot be read or checked: one line naming it."""


@dataclass(frozen=True)
class Input:
    name: str
    value: Any
    provenance: str            # paper / assumed
    where: str                 # table, figure or section; for an assumed input, the rule
    unit: str = ""
    #: read off a chart: the figure the paper drew lies within ± this (in its unit)
    reading: float = 0.0


@dataclass
class Case:
    id: str                    # the file's stem
    title: str
    source: str
    url: str
    check: str                 # which prediction (CHECKS)
    predicts: str
    tolerance: float
    tolerance_kind: str        # relative (model ÷ paper − 1) / absolute (model − paper)
    inputs: dict[str, Input]
    fields: dict[str, Input]   # each point column's provenance (value unused)
    points: list[dict[str, Any]]
    settings: dict[str, Any] = field(default_factory=dict)   # the [case] table's other keys

    def __getitem__(self, name: str) -> Any:
        try:
            return self.inputs[name].value
        except KeyError:
            raise CaseError(f"{self.id}: [inputs] has no {name!r}, which the {self.check} check needs") from None

    def point_inputs(self, point: dict[str, Any]) -> list[Input]:
        """A point's own values with their provenance (a point may override its column's)."""
        own = point.get("provenance") or {}
        out = []
        for name, meta in self.fields.items():
            if name in point:
                m = {**vars(meta), **own.get(name, {})}
                out.append(Input(name, point[name], m["provenance"], m["where"], m.get("unit", "")))
        return out


@dataclass(frozen=True)
class Context:
    title: str
    source: str
    url: str
    figures: str
    why: str


@dataclass
class PointResult:
    label: str
    model: float
    paper: float
    tolerance: float
    kind: str                  # relative / absolute
    terms: dict[str, float]    # the model's seconds per term behind `model`
    unit: str = ""
    gap: str = ""              # what the paper's figure implies that the model lacks, in seconds
    figures: tuple[str, ...] = ()   # the point's columns `paper` is made of: never read by the model
    #: True where the point checks how the model composes figures the case gives (the
    #: tutorial's step from its logged phases), not a figure predicted from hardware
    composition: bool = False
    #: for a miss whose figures were read off charts: True where a reading within the
    #: charts' precision holds it, False where none does; None otherwise
    at_reading: bool | None = None
    best_reading: "PointResult | None" = None    # the point at the most favourable reading

    @property
    def error(self) -> float:
        """model ÷ paper − 1 (relative) or model − paper (absolute)."""
        return self.model / self.paper - 1 if self.kind == "relative" else self.model - self.paper

    @property
    def holds(self) -> bool:
        return abs(self.error) <= self.tolerance + 1e-12

    @property
    def misses_on(self) -> str:
        """For a miss, the term that misses: what the paper's figure implies beside what
        the model has."""
        if self.holds:
            return ""
        if self.gap or not self.terms:
            gap = self.gap
        else:
            term, seconds = max(self.terms.items(), key=lambda kv: kv[1])
            gap = f"the model's largest term: {term} {seconds:.3g} s"
        if self.best_reading is None:
            return gap
        # four places: a best reading a hair past the tolerance must not print as on it
        best = self.best_reading.text(4)
        return (f"a reading inside the charts' precision holds it ({best}); " if self.at_reading
                else f"at every reading inside the charts' precision (at best {best}); ") + gap

    @property
    def shown(self) -> str:
        """model ÷ paper, or model − paper, as the tables print it."""
        return self.text(3)

    def text(self, places: int) -> str:
        """model ÷ paper (relative) or model − paper (absolute), to `places` decimals."""
        return f"{self.model / self.paper:.{places}f}" if self.kind == "relative" else f"{self.error:+.{places}f}"


@dataclass
class CaseResult:
    case: Case
    points: list[PointResult]

    @property
    def holds(self) -> bool:
        return all(p.holds for p in self.points)


# ---- reading -------------------------------------------------------------------------

def _input(table: str, name: str, raw: Any, case_id: str) -> Input:
    if not isinstance(raw, dict) or "provenance" not in raw or "where" not in raw:
        raise CaseError(f"{case_id}: [{table}] {name} needs provenance and where (paper or assumed, and the "
                        "table, figure or rule)")
    if raw["provenance"] not in (PAPER, ASSUMED):
        raise CaseError(f"{case_id}: [{table}] {name}: provenance {raw['provenance']!r} is neither "
                        f"{PAPER!r} nor {ASSUMED!r}")
    reading = raw.get("reading", 0.0)
    if isinstance(reading, bool) or not isinstance(reading, (int, float)) or reading < 0:
        raise CaseError(f"{case_id}: [{table}] {name}: reading {reading!r} is not a non-negative number (the "
                        "precision a chart was read to, in the value's unit)")
    return Input(name, raw.get("value"), raw["provenance"], raw["where"], raw.get("unit", ""), float(reading))


def read_case(path: Path) -> Case:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise CaseError(f"{path}: {e}") from None
    case_id = path.stem
    head = dict(data.get("case") or {})
    missing = [k for k in ("title", "source", "check", "tolerance") if k not in head]
    if missing:
        raise CaseError(f"{path}: [case] lacks {', '.join(missing)}")
    if head["check"] not in CHECKS:
        raise CaseError(f"{path}: check {head['check']!r} is not one of {', '.join(CHECKS)}")
    inputs = {k: _input("inputs", k, v, case_id) for k, v in (data.get("inputs") or {}).items()}
    fields = {k: _input("fields", k, v, case_id) for k, v in (data.get("fields") or {}).items()}
    known = {"title", "source", "url", "check", "predicts", "tolerance", "tolerance_kind"}
    return Case(case_id, head["title"], head["source"], head.get("url", ""), head["check"],
                head.get("predicts", ""), float(head["tolerance"]), head.get("tolerance_kind", "relative"),
                inputs, fields, list(data.get("point") or []),
                {k: v for k, v in head.items() if k not in known})


def load_cases(folder: str | Path = PUBLISHED) -> tuple[list[Case], list[Context]]:
    """Every case file of the folder (checks) and every [[context]] entry."""
    cases, context = [], []
    for path in sorted(Path(folder).glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        if "context" in data:
            context += [Context(c["title"], c["source"], c.get("url", ""), c["figures"], c["why"])
                        for c in data["context"]]
        if "case" in data:
            cases.append(read_case(path))
    return cases, context


# ---- the model, on a GPT-2-like shape --------------------------------------------------

#: How the ZeRO papers and DeepSpeed count a step's FLOPs: 2·4·tokens·params, the
#: forward, its recomputation (activation checkpointing) and the backward, with no
#: attention or vocabulary term (ZeRO-Infinity eq. 7; DeepSpeedExamples' Megatron
#: flops_calculator). Their TFLOPS convert to seconds only through their own count.
FLOPS_RULE = "8 × parameters × tokens per step (ZeRO-Infinity eq. 7, DeepSpeed's flops_calculator)"


def gpt2(case: Case, layers: int, hidden: int, batch: int, **kw) -> Workload:
    """A GPT-2-like decoder as the ZeRO papers size them: 12·l·h² in the blocks, plus
    the tied token embedding and the learned positions (what DeepSpeed's parameter
    count holds)."""
    seq, vocab = int(case["seq"]), int(case["vocab"])
    blocks = 12 * layers * hidden ** 2
    n = blocks + vocab * hidden + seq * hidden
    return _workload(case, n, blocks + vocab * hidden, layers, hidden, seq, batch * seq, **kw)


def _workload(case: Case, n: int, n_ne: int, layers: int, dim: int, seq: int, tokens: int, **kw) -> Workload:
    return Workload(n_params=n, n_params_nonembed=n_ne, n_layers=layers, dim=dim, seq_len=seq,
                    tokens_per_step=tokens, chunks=_chunks(case, n), **kw)


def _chunks(case: Case, params: float) -> int:
    """The optimizer chunks `params` parameters (a GPU's partition) are stepped and copied
    back in: the engine rule's chunk where the case gives one, else one."""
    chunk = case.inputs["chunk_params"].value if "chunk_params" in case.inputs else params
    return max(1, math.ceil(params / chunk))


def flops_per_step(w: Workload) -> float:
    """FLOPS_RULE: the papers' own count, for their TFLOPS and the GPU type's rate."""
    return 8.0 * w.n_params * w.tokens_per_step


def compute_for(w: Workload, r: Rates, overlap: str, step_s: float) -> float:
    """The compute seconds that make the model's step last `step_s` under `overlap`
    (the step grows with compute in every composition, so bisection finds it): how a
    published step is split into the GPU's share and the host's, with no fitting —
    the host terms come from the case's own figures."""
    lo, hi = 0.0, step_s
    if predict(w, replace(r, compute_s=lo), overlap).step_s > step_s:
        raise CaseError(f"the host terms alone ({predict(w, replace(r, compute_s=0.0), overlap).step_s:.3g} s) "
                        f"outlast the published step ({step_s:.3g} s)")
    for _ in range(100):
        mid = (lo + hi) / 2
        if predict(w, replace(r, compute_s=mid), overlap).step_s < step_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _link(case: Case) -> float:
    return float(case["link_GBps"]) * 1e9


def _cluster(case: Case, per_node: int, nodes: int) -> Cluster:
    """GPUs over nodes with the links they exchange gradients and parameters over,
    where the case gives them (the model leaves an unknown link's term out)."""
    def rate(name: str) -> float | None:
        return float(case[name]) * 1e9 if name in case.inputs else None
    return Cluster(per_node, nodes, rate("gpu_link_GBps"), rate("node_link_GBps"))


# ---- the checks ------------------------------------------------------------------------

def _dpu_ratio(case: Case) -> list[PointResult]:
    """With ÷ without DPU: the without-DPU step (from its TFLOPS) is split into compute
    and the host's update by the serial composition ("overlapped"), then priced again
    with the update behind the next step ("dpu"). One GPU: Table 4's CPU-Adam seconds
    are the whole model's, which a GPU alone hands its host."""
    if int(case["gpus"]) != 1:
        raise CaseError(f"{case.id}: the DPU ratio is priced for one GPU (Table 4's CPU-Adam time is the whole "
                        f"model's), not gpus = {case['gpus']}")
    out = []
    for p in case.points:
        w = gpt2(case, p["layers"], p["hidden"], p["batch"])
        rates = Rates(flops_per_s=0.0, d2h_Bps=_link(case), h2d_Bps=_link(case),
                      opt_params_per_s=w.n_params / p["cpu_adam_s"])
        without_s = flops_per_step(w) / (p["without_tflops"] * 1e12)
        rates = replace(rates, compute_s=compute_for(w, rates, "overlapped", without_s))
        dpu = predict(w, rates, "dpu")
        hidden = without_s * (1 - p["without_tflops"] / p["with_tflops"])
        gap = (f"host update: the paper's bars hide {hidden:.3g} s a step, the model's DPU hides "
               f"{without_s - dpu.step_s:.3g} s (the update it was given: CPU-Adam {p['cpu_adam_s']:.3g} s)")
        out.append(PointResult(p["label"], without_s / dpu.step_s, p["with_tflops"] / p["without_tflops"],
                               case.tolerance, case.tolerance_kind, dpu.terms, gap=gap, figures=("with_tflops",)))
    return out


@dataclass(frozen=True)
class _OneGpu:
    """A case's 1-GPU bar split into the GPU's compute and the host's share, with the
    node's figures the other GPU counts are priced from."""
    w: Workload
    node: Rates                 # one GPU's link, the node's CPU-Adam rate; compute_s set
    host_Bps: float
    overlap: str
    per_node: int


def _one_gpu(case: Case) -> _OneGpu:
    w = gpt2(case, case["layers"], case["hidden"], case["batch"])
    node = Rates(flops_per_s=0.0, d2h_Bps=_link(case), h2d_Bps=_link(case),
                 opt_params_per_s=float(case["node_adam_params_per_s"]))
    host = float(case["host_GBps"]) * 1e9
    overlap = "dpu" if case["dpu"] else "overlapped"
    one_s = flops_per_step(w) / (float(case["one_gpu_tflops"]) * 1e12)
    compute = compute_for(w, per_gpu(node, Cluster(1, 1), host), overlap, one_s)
    return _OneGpu(w, replace(node, compute_s=compute), host, overlap, int(case["gpus_per_node"]))


def _at(case: Case, one: _OneGpu, gpus: int, micro_steps: float = 1) -> tuple[Workload, Prediction]:
    """One GPU of `gpus`, the optimizer state partitioned over all, each step `micro_steps`
    of the 1-GPU bar's micro-batch (gradient accumulation) before the update."""
    w = replace(one.w, shards=gpus)
    w = replace(w, chunks=_chunks(case, w.shard_params)).accumulating(micro_steps)   # its partition's
    cluster = _cluster(case, min(gpus, one.per_node), math.ceil(gpus / one.per_node))
    rates = per_gpu(replace(one.node, compute_s=one.node.compute_s * micro_steps), cluster, one.host_Bps)
    return w, predict(w, rates, one.overlap)


def _scaling(case: Case) -> list[PointResult]:
    """TFLOPS per GPU at N GPUs from the 1-GPU figure: the same compute per GPU, the
    optimizer state partitioned over N, a node's cores and host bandwidth shared by
    its GPUs (stepmodel.per_gpu)."""
    one = _one_gpu(case)
    flops = flops_per_step(one.w)
    out = []
    for p in case.points:
        n = int(p["gpus"])
        _, pred = _at(case, one, n)
        paper_s = flops / (p["tflops"] * 1e12)
        between = pred.terms.get("reduce_scatter", 0.0) + pred.terms.get("all_gather", 0.0)
        gap = (f"between GPUs: the paper's step is {paper_s - pred.step_s:+.3g} s beside the model's "
               f"{pred.step_s:.3g} s, whose exchange between GPUs at the links' rates is {between:.3g} s; "
               f"Fig. 11 does not state the batch per GPU at each count")
        out.append(PointResult(f"{n} GPUs", flops / pred.step_s / 1e12, p["tflops"], case.tolerance,
                               case.tolerance_kind, pred.terms, "TFLOPS", gap, ("tflops",)))
    return out


def _accumulation(case: Case) -> list[PointResult]:
    """The gain of gradient accumulation: TFLOPS per GPU at a global batch reached by
    accumulation, over the same GPU's figure at one micro-batch a step (the 1-GPU bar the
    prediction starts from). The micro-steps a GPU runs per update are the global batch
    over (GPUs × micro-batch); the update, priced as in the scaling check, is then paid
    once for all of them. A ratio, held as the DPU ablation's is: checked as TFLOPS within
    ±15%, a model with no accumulation at all (35.2 against 41.1) held as well."""
    one = _one_gpu(case)
    base = float(case["one_gpu_tflops"])
    out = []
    for p in case.points:
        n = int(p["gpus"])
        k = float(p["global_batch"]) / (n * float(case["batch"]))
        w, pred = _at(case, one, n, k)
        _, single = _at(case, one, n)
        tflops, flat = flops_per_step(w) / pred.step_s / 1e12, flops_per_step(one.w) / single.step_s / 1e12
        gap = (f"the paper's bar is {p['tflops']:.3g} TFLOPS, the model's {tflops:.3g}; at one micro-batch a "
               f"step the model has {flat:.3g} at {n} GPU{'s' if n > 1 else ''} (Fig. 11: "
               f"{'the bar it starts from' if n == 1 else 'the scaling check at this count'})")
        out.append(PointResult(f"{p['figure']}: {n} GPU{'s' if n > 1 else ''}, {k:.3g} micro-steps",
                               tflops / base, p["tflops"] / base, case.tolerance, case.tolerance_kind,
                               pred.terms, gap=gap, figures=("tflops",)))
    return out


def _streamed_tflops(case: Case) -> list[PointResult]:
    """TFLOPS per GPU with the parameters in CPU memory and the optimizer state on NVMe
    (ZeRO-Infinity): compute at the one rate for the GPU type, every host term at the
    GPU's share of what its node gives 16 GPUs reading at once."""
    per_node = int(case["gpus_per_node"])
    gpu_flops = float(case["v100_tflops"]) * 1e12
    node = Rates(flops_per_s=gpu_flops, d2h_Bps=_link(case), h2d_Bps=_link(case),
                 opt_params_per_s=float(case["node_adam_params_per_s"]),
                 nvme_read_Bps=float(case["nvme_read_GBps"]) * 1e9,
                 nvme_write_Bps=float(case["nvme_write_GBps"]) * 1e9)
    rates = per_gpu(node, _cluster(case, per_node, 1), float(case["host_GBps"]) * 1e9)
    out = []
    for p in case.points:
        w = gpt2(case, p["layers"], p["hidden"], p["batch"], param_bytes=int(case["param_bytes"]),
                 grad_bytes=int(case["grad_bytes"]), nvme_bytes=int(case["nvme_bytes"]), shards=per_node)
        pred = predict(w, replace(rates, compute_s=flops_per_step(w) / gpu_flops), "streamed")
        out.append(PointResult(p["label"], flops_per_step(w) / pred.step_s / 1e12, p["tflops"], case.tolerance,
                               case.tolerance_kind, pred.terms, "TFLOPS", figures=("tflops",)))
    return out


def _phases(case: Case) -> list[PointResult]:
    """Forward + backward from FLOPs at the GPU type's one rate; then the step as the
    model composes the logged phases (the optimizer logged, not predicted: this half
    checks the composition — serial, no DPU — not a rate)."""
    w = gpt2(case, case["layers"], case["hidden"], case["batch"])
    compute = predict(w, Rates(flops_per_s=1.0, compute_s=flops_per_step(w) / (float(case["v100_tflops"]) * 1e12)),
                      "none")
    step_tol = float(case.settings.get("step_tolerance", case.tolerance))
    out = []
    for p in case.points:
        fb = p["forward_s"] + p["backward_s"]
        out.append(PointResult(f"iteration {p['iteration']}: forward + backward", compute.terms["compute"], fb,
                               case.tolerance, case.tolerance_kind, compute.terms, "s",
                               figures=("forward_s", "backward_s")))
        rates = Rates(flops_per_s=0.0, d2h_Bps=_link(case), h2d_Bps=_link(case),
                      opt_params_per_s=w.n_params / p["optimizer_s"], compute_s=fb)
        step = predict(w, rates, "overlapped")
        out.append(PointResult(f"iteration {p['iteration']}: step from its phases (composition, ±{step_tol:.0%})",
                               step.step_s, p["elapsed_s"], step_tol,
                               "relative", step.terms, "s", figures=("elapsed_s",), composition=True))
    return out


def _update_phase(case: Case) -> list[PointResult]:
    """The host's update with the optimizer state on NVMe, from the drives' and the
    link's bandwidths: every byte of the state (and the gradients) read and written
    through the narrower of the drives together and the link they share, the CPU's
    Adam hidden behind the I/O where it is shorter (the model's max(optimizer, nvme))."""
    n = float(case["params"])
    link = float(case["link_GBps"]) * 1e9
    w = _workload(case, int(n), int(n), 1, 1, 1, 1, nvme_bytes=int(case["nvme_bytes"]))
    out = []
    for p in case.points:
        drives = int(p["ssds"])
        rates = Rates(flops_per_s=1.0, compute_s=0.0, opt_params_per_s=n / float(case["cpu_adam_s"]),
                      nvme_read_Bps=min(drives * float(case["ssd_read_GBps"]) * 1e9, link),
                      nvme_write_Bps=min(drives * float(case["ssd_write_GBps"]) * 1e9, link))
        pred = predict(w, rates, "streamed")      # compute 0: the step is the update alone
        out.append(PointResult(f"{drives} SSDs", pred.step_s, p["update_s"], case.tolerance, case.tolerance_kind,
                               pred.terms, "s", figures=("update_s",)))
    return out


CHECKS: dict[str, Callable[[Case], list[PointResult]]] = {
    "dpu_ratio": _dpu_ratio,
    "scaling": _scaling,
    "accumulation": _accumulation,
    "streamed_tflops": _streamed_tflops,
    "phases": _phases,
    "update_phase": _update_phase,
}


def _readings(case: Case) -> list[tuple[str, str, float]]:
    """What the case read off charts: (table, name, precision)."""
    return ([("inputs", n, i.reading) for n, i in case.inputs.items() if i.reading]
            + [("fields", n, f.reading) for n, f in case.fields.items() if f.reading])


def _read_at(case: Case, signs: tuple[int, ...]) -> Case:
    """The case with each figure read off a chart moved by its precision, up (+1) or
    down (−1); a point may state its own precision for a column (a bar read through
    another mark)."""
    moved = copy.deepcopy(case)
    for (table, name, err), sign in zip(_readings(case), signs):
        if table == "inputs":
            moved.inputs[name] = replace(moved.inputs[name], value=moved.inputs[name].value + sign * err)
            continue
        for p in moved.points:
            if name in p:
                own = (p.get("provenance") or {}).get(name, {})
                p[name] += sign * float(own.get("reading", err))
    return moved


def _mark_readings(case: Case, points: list[PointResult]) -> None:
    """Whether each miss survives the charts' precision: the check again at every corner
    of the readings' ± box (a ratio of two bars is most favourable at a corner), the
    model's inputs and the paper's figure moved together. A miss inside the box is not
    told apart from a hold by what the paper printed."""
    read = _readings(case)
    if not read or all(p.holds for p in points):
        return
    try:
        corners = [CHECKS[case.check](_read_at(case, signs))
                   for signs in itertools.product((-1, 1), repeat=len(read))]
    except CaseError:
        return                # a corner the model cannot price: no claim about every reading
    for i, p in enumerate(points):
        if not p.holds:
            at = [c[i] for c in corners]
            p.best_reading = min(at, key=lambda q: abs(q.error) - q.tolerance)
            # corners on both sides of the band: by continuity a reading between them holds
            straddle = min(q.error for q in at) < -p.tolerance and max(q.error for q in at) > p.tolerance
            p.at_reading = p.best_reading.holds or straddle


def check(case: Case) -> CaseResult:
    try:
        points = CHECKS[case.check](case)
        _mark_readings(case, points)
        return CaseResult(case, points)
    except CaseError as e:
        raise CaseError(f"{case.id}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise CaseError(f"{case.id}: a point lacks or mistypes {e}: every point needs the columns its "
                        f"{case.check} check reads") from None


def check_all(folder: str | Path = PUBLISHED) -> tuple[list[CaseResult], list[Context]]:
    cases, context = load_cases(folder)
    return [check(c) for c in cases], context


def tally(results: list[CaseResult]) -> str:
    """How many checks hold, predictions apart from composition checks: a step summed
    from its own logged phases agrees by construction when the composition is right, and
    counted among the predictions it would flatter the model."""
    points = [p for r in results for p in r.points]
    pred = [p for p in points if not p.composition]
    comp = [p for p in points if p.composition]
    text = f"{sum(p.holds for p in pred)} of {len(pred)} predictions hold"
    read = [p for p in pred if p.at_reading is not None]
    if read:
        text += (f" ({sum(p.at_reading for p in read)} of the {len(read)} misses of figures read off charts "
                 "within the charts' precision)")
    return text + (f"; {sum(p.holds for p in comp)} of {len(comp)} composition checks hold" if comp else "")


__all__ = ["load_cases", "read_case", "check", "check_all", "tally", "gpt2", "flops_per_step", "compute_for", "FLOPS_RULE",
           "Case", "CaseResult", "PointResult", "Context", "Input", "CaseError", "CHECKS", "PUBLISHED"]
