"""The one error the placement layer raises for what it cannot honour."""


class PlacementError(Exception):
    """A buffer cannot be put where it was asked, or did not end up there.

    The message is one sentence: what is wrong and what to do about it. A
    benchmark that gets one records the case as skipped with that reason; it
    never measures a buffer that is not where it was asked to be.
    """


def fmt_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; binary units, as the kernel reports memory."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
