"""Sizes as people write them ("64KiB", "1GiB", "2M") and back; counts as they read them."""
from __future__ import annotations

import re

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
    1.5e9 -> 1.5G (sep goes between number and prefix: '131 k')."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{sep}{unit}"
    return f"{n:g}"
