"""GPUs: NVML when its bindings are installed, else torch.cuda, else the PCI devices in sysfs.

NVML and torch describe the machine this process runs on, so they are only
asked when reading the live system (root "/"); a fixture tree yields what its
sysfs shows. The sysfs source knows a GPU is there and where it is attached,
not its name or memory: it says so (name "unknown", memory 0) rather than guess.
Nothing here fails when neither NVML nor torch is installed.
"""
from __future__ import annotations

import importlib.util

from .model import Gpu
from .sysfs import list_dir, read_int

PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA = 0x10DE
GPU_CLASSES = (0x0300, 0x0302)          # VGA controller, 3D controller
ACCELERATOR_CLASSES = GPU_CLASSES + (0x0380, 0x1200)   # + other display, processing accelerator


def pci_class(root: str, address: str) -> int | None:
    value = read_int(root, f"{PCI_DEVICES}/{address}/class")
    return value >> 8 if value is not None else None      # drop the programming interface byte


def pci_numa_node(root: str, address: str | None) -> int | None:
    if not address:
        return None
    node = read_int(root, f"{PCI_DEVICES}/{address.lower()}/numa_node")
    return node if node is not None and node >= 0 else None


def normal_bus_id(bus_id: str | bytes) -> str:
    """NVML's "00000000:17:00.0" -> sysfs's "0000:17:00.0"."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    domain, _, rest = text.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"


def sysfs_gpu(root: str, index: int, address: str) -> Gpu:
    device = read_int(root, f"{PCI_DEVICES}/{address}/device") or 0
    return Gpu(index=index, name=f"unknown (PCI {NVIDIA:04x}:{device:04x})", memory_bytes=0,
               numa_node=pci_numa_node(root, address), source="sysfs", pci_bus_id=address)


def sysfs_gpus(root: str) -> list[Gpu]:
    """NVIDIA display/3D controllers on the PCI bus, in bus order (NVML's default order)."""
    found = [a for a in list_dir(root, PCI_DEVICES)
             if read_int(root, f"{PCI_DEVICES}/{a}/vendor") == NVIDIA
             and pci_class(root, a) in GPU_CLASSES]
    return [sysfs_gpu(root, i, a) for i, a in enumerate(found)]


def accelerators_visible(root: str) -> bool:
    """Whether PCI shows anything torch could drive; True when PCI isn't visible at all,
    so that only a machine known to have none skips the (slow) torch import."""
    devices = list_dir(root, PCI_DEVICES)
    return not devices or any(pci_class(root, a) in ACCELERATOR_CLASSES for a in devices)


def nvml_text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def nvml_optional(call, *args):
    """An NVML query that some boards don't support (ECC on consumer cards): None then."""
    import pynvml
    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def nvml_gpu(root: str, index: int, driver: str | None) -> Gpu:
    import pynvml
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(h)
    ecc = nvml_optional(pynvml.nvmlDeviceGetEccMode, h)
    bus_id = normal_bus_id(pynvml.nvmlDeviceGetPciInfo(h).busId)
    return Gpu(
        index=index,
        name=nvml_text(pynvml.nvmlDeviceGetName(h)),
        memory_bytes=int(memory.total),
        uuid=nvml_optional(lambda: nvml_text(pynvml.nvmlDeviceGetUUID(h))),
        ecc_enabled=bool(ecc[0]) if ecc else None,
        # The link idles at a lower generation to save power; the maximum the
        # device and slot allow is what a transfer runs at.
        pcie_gen=nvml_optional(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
        pcie_width=nvml_optional(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
        numa_node=pci_numa_node(root, bus_id),
        driver=driver,
        source="nvml",
        pci_bus_id=bus_id,
        memory_free_bytes=int(memory.free),
    )


def nvml_gpus(root: str) -> list[Gpu] | None:
    """All GPUs NVML sees; None when NVML is not installed or cannot start (no driver)."""
    if importlib.util.find_spec("pynvml") is None:
        return None
    import pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        driver = nvml_optional(lambda: nvml_text(pynvml.nvmlSystemGetDriverVersion()))
        return [nvml_gpu(root, i, driver) for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def torch_bus_id(props) -> str | None:
    if not hasattr(props, "pci_bus_id"):
        return None
    return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"


def torch_gpus(root: str) -> list[Gpu] | None:
    """GPUs torch.cuda sees (CUDA or ROCm builds); None without torch or without a device."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        bus_id = torch_bus_id(props)
        gpus.append(Gpu(index=i, name=props.name, memory_bytes=int(props.total_memory),
                        uuid=str(getattr(props, "uuid", "")) or None,
                        numa_node=pci_numa_node(root, bus_id), source="torch", pci_bus_id=bus_id))
    return gpus


def read_gpus(root: str = "/", probe: bool = True) -> list[Gpu]:
    """GPUs from the best source available; see the module docstring for the order."""
    if probe and root == "/":
        gpus = nvml_gpus(root)
        if gpus is None and accelerators_visible(root):
            gpus = torch_gpus(root)
        if gpus is not None:
            return gpus
    return sysfs_gpus(root)
