"""Recorded shape of machines, read from sysfs/procfs under a configurable root.

    machine = read_machine()              # or read_machine("tests/fixtures/two_socket_cxl")
    tiers = classify_tiers(machine, ["cxl=node:1"])
    print(format_topology(machine, tiers))
    checks = run_checks(machine); exit(doctor_exit_code(checks))
"""
from .doctor import Check, doctor_exit_code, format_checks, run_checks
from .model import (BlockDevice, Cache, Cpu, CxlMemdev, CxlRegion, EdacController, Environment, Gpu,
                    HmatAccess, HugePool, Initiator, Machine, Node, Tier, TierDeclaration)
from .nodes import read_nodes
from .read import read_machine
from .serialize import jsonable, machine_from_dict, machine_to_dict
from .block_devices import block_device_for
from .tiers import allowed_cpus, classify_tiers, initiators, parse_tier_declaration
from .view import format_topology

__all__ = [
    "read_machine", "read_nodes", "block_device_for",
    "allowed_cpus", "classify_tiers", "initiators", "parse_tier_declaration",
    "run_checks", "doctor_exit_code", "format_checks", "Check",
    "format_topology", "machine_to_dict", "machine_from_dict", "jsonable",
    "BlockDevice", "Cache", "Cpu", "CxlMemdev", "CxlRegion", "EdacController", "Environment", "Gpu",
    "HmatAccess", "HugePool", "Initiator", "Machine", "Node", "Tier", "TierDeclaration",
]
