"""What the GPU families share: which GPU × tier cases a machine has, why one cannot
run, and the session a GPU case is measured in (device, timer, telemetry, ECC
before and after).

On a machine without a GPU every GPU case is still planned — for a nominal
gpu:0 and its hbm0, against the host tiers that exist — and recorded as
skipped with "no GPU", so a report says what was not measured.
"""
from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass, field

from cxlbench.benchmarks.base import Env, Planned, Skip, memory_short
from cxlbench.benchmarks.spec import Spec as BaseSpec
from cxlbench.gpu.errors import NO_GPU, Unavailable
from cxlbench.results.schema import Case
from cxlbench.topology.model import Initiator, Tier

#: spawning a worker, importing cupy, creating the CUDA context, NVML: per case
START_S = 2.0
HOST_KINDS = ("ddr", "cxl")


@dataclass(kw_only=True)
class GpuSpec(BaseSpec):
    """What every GPU family's table may set. tiers: hbm (the GPU's own memory), host
    tier kinds or names, and "local" (the DDR of the GPU's own node)."""
    tiers: tuple[str, ...] = ("hbm", *HOST_KINDS)


# ---- planning ------------------------------------------------------------------------

def gpu_initiators(env: Env) -> tuple[list[Initiator], str | None]:
    """The GPU initiators and, when none can run here, why (the same for all)."""
    gpus = sorted((i for i in env.initiators.values() if i.kind == "gpu"), key=lambda i: i.gpu or 0)
    if not gpus:
        return [Initiator("gpu:0", "gpu", gpu=0)], NO_GPU
    if env.root == "/":                      # the live machine: can this Python drive it?
        from cxlbench.gpu.device import runtime_missing
        return gpus, runtime_missing()
    return gpus, None                        # a fixture tree describes another machine


def hbm_tier(env: Env, gpu: Initiator) -> Tier:
    name = f"hbm{gpu.gpu or 0}"
    return env.tiers.get(name) or Tier(name, "hbm", gpu=gpu.gpu or 0)


def host_tiers(spec: GpuSpec, env: Env, gpu: Initiator | None = None) -> list[Tier]:
    """Host tiers a spec names in spec.tiers: kinds (ddr, cxl), names (ddr1), or
    "local" — the DDR of the GPU's own node — in name order."""
    wanted = set(spec.tiers)
    found = {t.name: t for t in env.tiers.values()
             if t.is_host_memory and (t.kind in wanted or t.name in wanted)}
    if "local" in wanted and gpu is not None:
        local = local_host_tier(env, gpu)
        if local is not None:
            found[local.name] = local
    return sorted(found.values(), key=lambda t: t.name)


def wants_hbm(spec: GpuSpec) -> bool:
    wanted = set(spec.tiers)
    return "hbm" in wanted or any(str(w).startswith("hbm") for w in wanted)


def local_host_tier(env: Env, gpu: Initiator) -> Tier | None:
    """The DDR of the GPU's own NUMA node (else the first DDR tier)."""
    ddr = sorted((t for t in env.tiers.values() if t.kind == "ddr"), key=lambda t: t.name)
    return next((t for t in ddr if t.node == gpu.node), ddr[0] if ddr else None)


def gpu_memory_skip(env: Env, gpu: Initiator, need: int, fraction: float = 0.85) -> str | None:
    """Why `need` bytes of device memory cannot be asked (when the machine says how much)."""
    record = next((g for g in env.machine.gpus if g.index == gpu.gpu), None)
    have = (record.memory_free_bytes or record.memory_bytes) if record else 0
    if have and need > fraction * have:
        return (f"needs {need >> 20} MiB of GPU memory, more than {int(fraction * 100)}% of the "
                f"{have >> 20} MiB {'free' if record.memory_free_bytes else 'it has'}")
    return None


def host_memory_skip(env: Env, tier: Tier, need: int) -> str | None:
    return memory_short(env, tier.node, need)


def planned(name: str, gpu: Initiator, tier: Tier, params: dict, spec: GpuSpec, skip: str | None,
            estimate_s: float) -> Planned:
    case = Case(name, gpu.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
    return Planned(case, skip, START_S + estimate_s)


def first_skip(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


# ---- measuring -----------------------------------------------------------------------

@dataclass
class Session:
    """One GPU case's device, its timer, telemetry and ECC readings (see open_session)."""
    dev: object
    info: dict
    static: dict = field(default_factory=dict)
    ecc_before: dict = field(default_factory=dict)
    stack: ExitStack = field(default_factory=ExitStack)
    _timer: object = None

    @property
    def xp(self):
        return self.dev.xp

    @property
    def timer(self):
        if self._timer is None:
            from cxlbench.gpu.timing import Timer
            self._timer = Timer(self.dev)
            self.stack.callback(self._timer.close)
        return self._timer

    def params(self) -> dict:
        """What every sample of the case carries: the GPU's ECC mode and power limit."""
        return {"ecc": self.static.get("ecc_mode"), "power_limit_w": self.static.get("power_limit_w")}

    def sampler(self):
        return self.dev.telemetry.sampler()

    def enter(self, resource):
        """Keep a buffer (anything with close()) until the case ends."""
        self.stack.callback(resource.close)
        return resource


class open_session:
    """with open_session(case, env, info) as s: ...

    Opens the GPU (Unavailable -> Skip), reads its static telemetry and ECC counts,
    and on the way out closes every buffer, reads the ECC counts again and records
    both (info["ecc"]); counts that moved become warnings. Placement refusals
    become skips; WrongResult fails the case (no figure from a wrong kernel)."""

    def __init__(self, case: Case, env: Env, info: dict):
        self.case, self.env, self.info = case, env, info
        self.session: Session | None = None

    def __enter__(self) -> Session:
        from cxlbench import gpu
        try:
            dev = gpu.open(self.env, self.case.initiator)
        except Unavailable as e:
            raise Skip(str(e)) from None
        tele = dev.telemetry
        s = Session(dev, self.info, static=tele.static(), ecc_before=tele.ecc_counts())
        self.info["gpu"] = {**dev.describe(), "telemetry": tele.source, **s.static}
        self.session = s
        return s

    def __exit__(self, kind, exc, tb):
        from cxlbench.gpu.telemetry import ecc_changes
        from cxlbench.memory import PlacementError
        s = self.session
        try:
            s.stack.close()
        finally:
            after = s.dev.telemetry.ecc_counts()
            moved = ecc_changes(s.ecc_before, after)
            self.info["ecc"] = {"before": s.ecc_before, "after": after, "changes": moved}
            if moved:
                self.info.setdefault("warnings", []).extend(f"GPU ECC during the case: {m}" for m in moved)
        if exc is not None and isinstance(exc, (Unavailable, PlacementError)):
            raise Skip(str(exc)) from None
        return False


def rotation(size: int, arrays: int, l2_bytes: int, cache: str, cap_bytes: int) -> int:
    """How many copies of a working set to rotate through so that consecutive operations
    never find the previous one's data in the L2 (cache="cold": at least 4 × L2 in all),
    within cap_bytes; 1 for cache="warm" (the L2's own figure)."""
    if cache == "warm":
        return 1
    per = max(arrays * size, 1)
    sets = max(1, math.ceil(4 * l2_bytes / per))
    return max(1, min(sets, cap_bytes // per, 4096))


def to_host(array):
    """A device array's values on the host (numpy arrays pass through)."""
    get = getattr(array, "get", None)
    return get() if callable(get) else array
