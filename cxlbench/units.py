"""Sizes as people write them ("64KiB", "1GiB", "2M") and back; counts, numbers,
parameters and CPU lists as people read them; the order tiers are shown in. One
home for each, so the summary, the report and the topology print them alike."""
from __future__ import annotations

import math
import numbers
import re
from typing import Any, Iterable

GIB = 2**30

_BINARY = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20,
           "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40}
_DECIMAL = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in a size: plain ints pass through; K/M/G and KiB/MiB/GiB are binary, KB/MB/GB decimal."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or (unit not in _BINARY and unit not in _DECIMAL):
        raise ValueError(f"not a size: {text!r} (write e.g. 64KiB, 2MiB, 1GiB)")
    return int(float(m.group(1)) * (_BINARY.get(unit) or _DECIMAL[unit]))


def format_size(n: int | float) -> str:
    """The shortest exact binary form when there is one (4KiB, 1GiB), else one decimal."""
    n = int(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n // scale}{unit}" if n % scale == 0 else f"{n / scale:.1f}{unit}"
    return f"{n}B"


def format_count(n: float, sep: str = "") -> str:
    """A count in three figures with a decimal prefix: 131392 -> 131k, 4194304 -> 4.19M,
    1.5e9 -> 1.5G, 2e12 -> 2T (sep goes between number and prefix: '131 k')."""
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{sep}{unit}"
    return f"{n:.3g}"


def ceil_sig(x: float, sig: int = 3) -> float:
    """x rounded up to `sig` significant figures (15.33 -> 15.4): a least figure that
    must be met, printed rounded down, would fall short of what it promises."""
    if not math.isfinite(x) or x <= 0:
        return x
    q = 10.0 ** (math.floor(math.log10(x)) - sig + 1)
    return math.ceil(x / q * (1 - 1e-12)) * q     # a value already at `sig` figures stays


def gib(n_bytes: float) -> str:
    """Bytes as the what-if and the advisor print capacities and needs: GiB to three
    figures, the precision at which a need and a capacity can be told apart."""
    return f"{format_number(n_bytes / GIB)} GiB"


def format_number(x: float | None, sig: int = 3) -> str:
    """Sensible significant figures: 1.23, 12.3, 123, 1,234, 12,345; "—" for none."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax == 0:
        return "0"
    digits = max(sig - 1 - int(math.floor(math.log10(ax))), 0)
    return f"{x:.{digits}f}"


def format_param(name: str, value: Any) -> str:
    """A parameter's value as a table or a label shows it: sizes of *_bytes columns as
    1GiB, parameter counts as 16.8M, whole floats as ints, "—" for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if name.endswith("_bytes") and isinstance(value, numbers.Integral):
        return format_size(int(value))
    if name == "n_params" and isinstance(value, numbers.Integral):
        return format_count(value)
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def format_cpulist(cpus: Iterable[int]) -> str:
    """CPUs as the kernel lists them: [0, 1, 2, 5] -> "0-2,5" (parse_cpulist's inverse)."""
    ranges: list[str] = []
    ordered = sorted({int(c) for c in cpus})
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)


def natural_key(name: Any) -> tuple:
    """Sorts ddr2 before ddr10 and node9 before node10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name)))


#: Tier kinds in a reader's order: nearest the GPU first, storage last.
TIER_KINDS = ("hbm", "ddr", "cxl", "nvme")


def tier_order(name: str) -> tuple:
    """Tiers (ddr0, cxl2, hbm0, ddr0+cxl2 ...) by kind in TIER_KINDS order, then naturally."""
    kind = re.match(r"[a-z]+", str(name))
    rank = TIER_KINDS.index(kind.group(0)) if kind and kind.group(0) in TIER_KINDS else len(TIER_KINDS)
    return (rank, natural_key(name))


def parse_fraction(value: Any, where: str = "threshold") -> float:
    """0.05, "5%", "0.05" → 0.05. Must lie in (0, 1)."""
    try:
        if isinstance(value, str):
            text = value.strip()
            v = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        elif isinstance(value, bool):
            raise TypeError
        else:
            v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r} is not a fraction (write 0.05 or \"5%\")") from None
    if not 0 < v < 1:
        raise ValueError(f"{where}: {value!r} must lie above 0 and below 100%")
    return v
