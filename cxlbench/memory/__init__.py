"""Putting buffers on a tier and checking they are there.

    with allocate(1 << 30, node=0, page="thp") as buf:
        ...  # buf.addr, buf.length, buf.page_bytes_found, buf.huge_coverage

Every buffer is verified page by page on its node before it is returned;
what cannot be honoured raises PlacementError with one sentence saying what
is wrong and what to do. verify_on_node checks any range of this process
(the training engine uses it on tensors).
"""
from .errors import PlacementError
from .host import HostBuffer, allocate, native_missing, safety_margin
from .verify import PagePlacement, page_nodes, placement, verify_on_node

__all__ = ["allocate", "HostBuffer", "PlacementError", "verify_on_node", "page_nodes",
           "placement", "PagePlacement", "safety_margin", "native_missing"]
