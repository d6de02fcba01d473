"""ECC error counts from the EDAC memory controllers (/sys/devices/system/edac/mc).

Each controller mcN has totals (ce_count, ue_count) and one directory per
DIMM (dimmK) or, on drivers that count per rank, per rank (rankK), with
dimm_ce_count, dimm_ue_count and dimm_edac_mode ("SECDED", "S4ECD4ED", ...).
"""
from __future__ import annotations

import re

from .model import EdacController
from .sysfs import list_dir, numbered, read_int, read_text

MC_DIR = "/sys/devices/system/edac/mc"


def dimm_dirs(root: str, mc: str) -> list[str]:
    names = [n for n in list_dir(root, mc) if re.fullmatch(r"(dimm|rank)\d+", n)]
    return sorted(names, key=lambda n: (n.rstrip("0123456789"), int(re.sub(r"\D", "", n))))


def read_controller(root: str, index: int) -> EdacController:
    mc = f"{MC_DIR}/mc{index}"
    dimms: dict[str, tuple[int, int]] = {}
    modes: list[str] = []
    for name in dimm_dirs(root, mc):
        d = f"{mc}/{name}"
        dimms[name] = (read_int(root, f"{d}/dimm_ce_count"), read_int(root, f"{d}/dimm_ue_count"))
        mode = read_text(root, f"{d}/dimm_edac_mode")
        if mode and mode not in modes:
            modes.append(mode)
    return EdacController(
        name=f"mc{index}",
        mode="/".join(modes) or None,
        # The controller totals also count errors the driver could not pin to a DIMM.
        # A count that cannot be read is None, not 0: read as 0 after a 3, it would
        # report errors that went away (or, the other way, errors that came).
        ce_count=read_int(root, f"{mc}/ce_count"),
        ue_count=read_int(root, f"{mc}/ue_count"),
        dimms=dimms,
    )


def read_edac(root: str = "/") -> list[EdacController]:
    """Every memory controller EDAC knows; empty in VMs and without an EDAC driver."""
    return [read_controller(root, i) for i in numbered(root, MC_DIR, "mc")]
