"""What the GPU was doing while it was measured: clocks, power, ECC (NVML).

Read through NVML (nvidia-ml-py's pynvml) when installed, else through
`nvidia-smi --query-gpu` (always there with the driver), else not at all
(every reading None, source "none"). Three kinds of reading:

  static()     power limit, ECC mode (current, pending), maximum clocks
  ecc_counts() corrected / uncorrected ECC errors, volatile and aggregate
  sample()     SM and memory clocks, power draw, temperature, and the reasons
               the clocks are held down (power cap, thermal, ...)

Sampler polls sample() in a thread while a repetition runs, and summarise()
turns the readings into sample parameters: the median and lowest SM clock
during the case, the memory clock, the highest power and temperature, and
every clock-limiting reason seen. Latency in cycles is converted with the
clock measured on the device itself (cycles / globaltimer ns); the NVML clock
beside it is the cross-check.
"""
from __future__ import annotations

import importlib.util
import shutil
import statistics
import subprocess
import threading
from dataclasses import dataclass, field

#: NVML clock event (throttle) reason bits -> short names
REASONS = {
    0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}
ECC_KEYS = ("ecc_corrected_volatile", "ecc_uncorrected_volatile",
            "ecc_corrected_aggregate", "ecc_uncorrected_aggregate")


def reason_names(mask: int | None) -> str:
    if not mask:
        return "none" if mask == 0 else "unknown"
    names = [n for bit, n in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return ",".join(names + ([f"{rest:#x}"] if rest else []))


def normal_bus_id(bus_id: str | bytes | None) -> str | None:
    """'00000000:17:00.0' or '0000:17:00.0' -> '0000:17:00.0' (lowercase)."""
    if not bus_id:
        return None
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    domain, _, rest = text.strip().lower().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text.lower()


# ---- backends --------------------------------------------------------------------------

class NullBackend:
    source = "none"

    def static(self) -> dict:
        return {}

    def ecc_counts(self) -> dict:
        return {}

    def sample(self) -> dict:
        return {}


class NvmlBackend:
    source = "nvml"

    def __init__(self, bus_id: str | None, index: int | None):
        import pynvml
        self.nv = pynvml
        pynvml.nvmlInit()
        self.handle = self._find(bus_id, index)

    def _find(self, bus_id, index):
        nv = self.nv
        want = normal_bus_id(bus_id)
        if want:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                if normal_bus_id(nv.nvmlDeviceGetPciInfo(h).busId) == want:
                    return h
        return nv.nvmlDeviceGetHandleByIndex(index or 0)

    def _get(self, fn_names, *args):
        """The first of the named NVML calls that exists and answers; None otherwise."""
        for name in fn_names:
            fn = getattr(self.nv, name, None)
            if fn is None:
                continue
            try:
                return fn(self.handle, *args)
            except self.nv.NVMLError:
                return None
        return None

    def static(self) -> dict:
        nv = self.nv
        ecc = self._get(["nvmlDeviceGetEccMode"])
        limit = self._get(["nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"])
        return {
            "power_limit_w": limit / 1000 if limit is not None else None,
            "ecc_mode": _onoff(ecc[0]) if ecc else None,
            "ecc_pending": _onoff(ecc[1]) if ecc else None,
            "sm_clock_max_mhz": self._get(["nvmlDeviceGetMaxClockInfo"], nv.NVML_CLOCK_SM),
            "mem_clock_max_mhz": self._get(["nvmlDeviceGetMaxClockInfo"], nv.NVML_CLOCK_MEM),
        }

    def ecc_counts(self) -> dict:
        nv = self.nv
        out = {}
        for key, etype, ctype in (
                ("ecc_corrected_volatile", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
                ("ecc_uncorrected_volatile", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
                ("ecc_corrected_aggregate", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
                ("ecc_uncorrected_aggregate", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC)):
            value = self._get(["nvmlDeviceGetTotalEccErrors"], etype, ctype)
            out[key] = int(value) if value is not None else None
        rows = self._get(["nvmlDeviceGetRemappedRows"])
        if rows:
            out["remapped_rows_corrected"], out["remapped_rows_uncorrected"] = int(rows[0]), int(rows[1])
        return out

    def sample(self) -> dict:
        nv = self.nv
        power = self._get(["nvmlDeviceGetPowerUsage"])
        return {
            "sm_clock_mhz": self._get(["nvmlDeviceGetClockInfo"], nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._get(["nvmlDeviceGetClockInfo"], nv.NVML_CLOCK_MEM),
            "power_w": power / 1000 if power is not None else None,
            "temperature_c": self._get(["nvmlDeviceGetTemperature"], nv.NVML_TEMPERATURE_GPU),
            "reasons": self._get(["nvmlDeviceGetCurrentClocksEventReasons",
                                  "nvmlDeviceGetCurrentClocksThrottleReasons"]),
        }


class SmiBackend:
    """nvidia-smi --query-gpu, one process per reading (~50 ms)."""
    source = "nvidia-smi"
    STATIC = ("power.limit", "ecc.mode.current", "ecc.mode.pending", "clocks.max.sm", "clocks.max.mem")
    ECC = ("ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
           "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total")
    SAMPLE = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")

    def __init__(self, bus_id: str | None, index: int | None, run=subprocess.run):
        self.target = normal_bus_id(bus_id) or str(index or 0)
        self.run = run

    def query(self, fields) -> list[str | None]:
        try:
            r = self.run(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                          "--format=csv,noheader,nounits", "-i", self.target],
                         capture_output=True, text=True, timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            return [None] * len(fields)
        if r.returncode != 0 or not r.stdout.strip():
            return [None] * len(fields)
        values = [v.strip() for v in r.stdout.strip().splitlines()[0].split(",")]
        values += [None] * (len(fields) - len(values))
        return [None if v is None or v.startswith("[") or v in ("N/A", "") else v for v in values]

    def static(self) -> dict:
        limit, mode, pending, sm, mem = self.query(self.STATIC)
        return {"power_limit_w": _num(limit), "ecc_mode": _onoff(mode), "ecc_pending": _onoff(pending),
                "sm_clock_max_mhz": _num(sm), "mem_clock_max_mhz": _num(mem)}

    def ecc_counts(self) -> dict:
        return {k: _int(v) for k, v in zip(ECC_KEYS, self.query(self.ECC))}

    def sample(self) -> dict:
        sm, mem, power, temp = self.query(self.SAMPLE)
        return {"sm_clock_mhz": _num(sm), "mem_clock_mhz": _num(mem), "power_w": _num(power),
                "temperature_c": _num(temp), "reasons": None}


def _num(v):
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def _int(v):
    f = _num(v)
    return int(f) if f is not None else None


def _onoff(v) -> str | None:
    if v is None:
        return None
    text = str(v).strip().lower()
    if text in ("1", "enabled", "true", "on"):
        return "on"
    if text in ("0", "disabled", "false", "off"):
        return "off"
    return None


# ---- the telemetry of one GPU -------------------------------------------------------------

class Telemetry:
    def __init__(self, backend):
        self.backend = backend

    @property
    def source(self) -> str:
        return self.backend.source

    @classmethod
    def open(cls, bus_id: str | None, index: int | None) -> "Telemetry":
        if importlib.util.find_spec("pynvml") is not None:
            try:
                return cls(NvmlBackend(bus_id, index))
            except Exception:        # noqa: BLE001 - NVML present but unusable: try nvidia-smi
                pass
        if shutil.which("nvidia-smi"):
            return cls(SmiBackend(bus_id, index))
        return cls(NullBackend())

    def static(self) -> dict:
        return _safe(self.backend.static)

    def ecc_counts(self) -> dict:
        return _safe(self.backend.ecc_counts)

    def sample(self) -> dict:
        return _safe(self.backend.sample)

    def sampler(self, period_s: float = 0.02) -> "Sampler":
        return Sampler(self, period_s)


def _safe(fn) -> dict:
    """A reading never fails a case: a backend error reads as nothing known."""
    try:
        return fn() or {}
    except Exception:                # noqa: BLE001
        return {}


@dataclass
class Sampler:
    """with telemetry.sampler() as s: ...  then s.summary() (sample parameters)."""
    telemetry: Telemetry
    period_s: float = 0.02
    readings: list[dict] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self):
        self.readings.append(self.telemetry.sample())
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.readings.append(self.telemetry.sample())

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.readings.append(self.telemetry.sample())

    def summary(self) -> dict:
        return summarise(self.readings)


def summarise(readings: list[dict]) -> dict:
    """Readings -> sample parameters (None where nothing was read)."""
    def values(key):
        return [float(r[key]) for r in readings if r.get(key) is not None]

    sm, mem, power, temp = values("sm_clock_mhz"), values("mem_clock_mhz"), values("power_w"), \
        values("temperature_c")
    masks = [int(r["reasons"]) for r in readings if r.get("reasons") is not None]
    mask = 0
    for m in masks:
        mask |= m
    return {
        "sm_clock_mhz": statistics.median(sm) if sm else None,
        "sm_clock_min_mhz": min(sm) if sm else None,
        "mem_clock_mhz": statistics.median(mem) if mem else None,
        "power_w_max": max(power) if power else None,
        "temperature_c_max": max(temp) if temp else None,
        "clock_reasons": reason_names(mask & ~0x1) if masks else None,   # idle is not a limit
    }


def ecc_changes(before: dict, after: dict) -> list[str]:
    """Counts that moved between two ecc_counts() readings, in words."""
    out = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a is not None and b is not None and b != a:
            out.append(f"{key.replace('_', ' ')}: {a} -> {b}")
    return out

