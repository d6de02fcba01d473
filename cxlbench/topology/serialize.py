"""Machine <-> plain JSON-able dicts, for `--json` and for run.json.

JSON objects have string keys, so the int-keyed maps (nodes, distances,
hugepages, memory tiers) go out with string keys and come back as ints.
"""
from __future__ import annotations

import dataclasses

from .model import (BlockDevice, Cache, Cpu, CxlMemdev, CxlRegion, EdacController, Environment, Gpu,
                    HmatAccess, HugePool, Initiator, Machine, Node, Tier)


def jsonable(value):
    """Dataclass records, dicts, lists and tuples -> JSON-ready values (dict keys as strings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def machine_to_dict(machine: Machine) -> dict:
    return jsonable(machine)


def tiers_to_dicts(tiers: list[Tier]) -> list[dict]:
    return jsonable(tiers)


def initiators_to_dicts(items: list[Initiator]) -> list[dict]:
    return jsonable(items)


def int_keys(d: dict) -> dict:
    return {int(k): v for k, v in d.items()}


def node_from_dict(d: dict) -> Node:
    return Node(**{**d,
                   "distances": int_keys(d["distances"]),
                   "hugepages": {int(k): HugePool(**p) for k, p in d.get("hugepages", {}).items()},
                   "hmat": [HmatAccess(**h) for h in d.get("hmat", [])]})


def machine_from_dict(d: dict) -> Machine:
    """The inverse of machine_to_dict (e.g. the topology stored in a run.json)."""
    cpu = Cpu(**{**d["cpu"], "caches": [Cache(**c) for c in d["cpu"]["caches"]]})
    return Machine(
        hostname=d["hostname"], cpu=cpu,
        nodes={int(k): node_from_dict(n) for k, n in d["nodes"].items()},
        environment=Environment(**d["environment"]),
        cxl_memdevs=[CxlMemdev(**x) for x in d.get("cxl_memdevs", [])],
        cxl_regions=[CxlRegion(**x) for x in d.get("cxl_regions", [])],
        memory_tiers=int_keys(d.get("memory_tiers", {})),
        edac=[EdacController(**{**x, "dimms": {k: tuple(v) for k, v in x["dimms"].items()}})
              for x in d.get("edac", [])],
        gpus=[Gpu(**x) for x in d.get("gpus", [])],
        block_devices=[BlockDevice(**x) for x in d.get("block_devices", [])],
        root=d.get("root", "/"),
        hugepages={int(k): HugePool(**p) for k, p in d.get("hugepages", {}).items()},
    )


def tier_from_dict(d: dict) -> Tier:
    return Tier(**d)
