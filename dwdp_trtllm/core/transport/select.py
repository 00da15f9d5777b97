"""make_transport: the backend named by a config's `transport` key (auto|shm|ipc|vmm_fd|vmm_fabric).

The factory lives apart from the interface (base.py) so that the implementations import base and this module
imports them (lazily: the CUDA ones load cuda-python only when chosen); nothing imports back.
"""
from __future__ import annotations

from .base import PeerTransport, TransportError, resolve_kind


def make_transport(kind: str, **kwargs) -> PeerTransport:
    """Construct the backend named `kind` (auto|shm|ipc|vmm_fd|vmm_fabric)."""
    kind = resolve_kind(kind, kwargs["device"])
    if kind == "shm":
        from .shm import ShmTransport
        return ShmTransport(**kwargs)
    if kind == "ipc":
        from .cuda_ipc import CudaIpcTransport
        return CudaIpcTransport(**kwargs)
    if kind in ("vmm_fd", "vmm_fabric"):
        from .vmm import VmmTransport
        return VmmTransport(handle_type="fabric" if kind == "vmm_fabric" else "fd", **kwargs)
    raise TransportError(f"unknown transport {kind!r}: expected auto, shm, ipc, vmm_fd or vmm_fabric")
